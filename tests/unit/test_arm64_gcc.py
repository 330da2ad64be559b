"""arm64's default CPU level builds (pure): a tree that declares llama.cpp's armv9.2 (SME) variants gets GCC 14
in the build stage, by package and by name, natively and across; every other build keeps the base's own
compiler; a base without GCC 14 is named in one line; verify expects the declared variants and counts SME."""

from dataclasses import replace
from pathlib import Path

from buildkit.verify.buildfailure import known_failure
from buildkit.plan.buildplan import make_plan, make_request
from buildkit.plan.plantypes import Resolved
from buildkit.plan.config import load_config
from buildkit.plan.cpulevels import LEVELS, gcc_needed
from buildkit.plan.render import render_dockerfile, render_toolchain, templates_sha256
from buildkit.source.cpuvariants import declared_variants
from buildkit.verify import cpucode
from buildkit.verify.checks import backend_class, expected_backends

from test_plan_render import FACTS

EXAMPLE_FORK = Path(__file__).resolve().parents[2] / "examples" / "tiny-fork"
# the shape of llama.cpp's ggml/src/CMakeLists.txt (0.3.36): Linux, Android and Apple lists, comments
CMAKE = """
    elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")
        if (CMAKE_SYSTEM_NAME MATCHES "Linux")
            ggml_add_cpu_backend_variant(armv8.0_1)
            ggml_add_cpu_backend_variant(armv8.2_1    DOTPROD)
            ggml_add_cpu_backend_variant(armv8.6_1    DOTPROD FP16_VECTOR_ARITHMETIC SVE MATMUL_INT8)
            ggml_add_cpu_backend_variant(armv9.2_1    DOTPROD FP16_VECTOR_ARITHMETIC SVE MATMUL_INT8 SME)
            # ggml_add_cpu_backend_variant(armv9.9_9 SME)
        elseif (CMAKE_SYSTEM_NAME MATCHES "Android")
            ggml_add_cpu_backend_variant(android_armv9.2_1    DOTPROD MATMUL_INT8 FP16_VECTOR_ARITHMETIC SVE SME)
        elseif (APPLE)
            ggml_add_cpu_backend_variant(apple_m4             DOTPROD MATMUL_INT8 NOSVE SME)
"""
ARM64_ON_AMD64 = {"build.build_platform": "linux/amd64", "build.platform": "linux/arm64"}
ARM64_ON_ARM64 = {"build.build_platform": "linux/arm64", "build.platform": "linux/arm64"}


def tree_with(tmp_path: Path, text: str) -> Path:
    (tmp_path / "ggml" / "src").mkdir(parents=True)
    (tmp_path / "ggml" / "src" / "CMakeLists.txt").write_text(text)
    return tmp_path


def plan_of(variants, **overrides):
    cfg = load_config(None, env={}, overrides={k: (v, "test") for k, v in overrides.items()})
    return make_plan(make_request(cfg), Resolved(replace(FACTS, cpu_variants=variants), templates_sha256(), "9.9.9"))


def test_the_declared_variants_are_read_from_ggml_cmake_without_comments(tmp_path):
    got = dict(declared_variants(tree_with(tmp_path, CMAKE)))
    assert list(got) == ["armv8.0_1", "armv8.2_1", "armv8.6_1", "armv9.2_1", "android_armv9.2_1", "apple_m4"]
    assert got["armv8.0_1"] == () and got["armv9.2_1"][-1] == "SME"
    assert declared_variants(EXAMPLE_FORK) == ()  # the example fork builds its CPU backends its own way
    assert declared_variants(tmp_path / "nothing") == ()


def test_gcc_14_only_for_arm64_all_with_linux_sme_variants(tmp_path):
    declared = declared_variants(tree_with(tmp_path, CMAKE))
    assert gcc_needed(LEVELS["all"], "linux/arm64", declared) == 14
    assert gcc_needed(LEVELS["all"], "linux/amd64", declared) is None
    assert gcc_needed(LEVELS["armv8.6"], "linux/arm64", declared) is None
    assert gcc_needed(LEVELS["none"], "linux/arm64", declared) is None
    others = tuple(v for v in declared if v[0].startswith(("android_", "apple_")) or "SME" not in v[1])
    assert gcc_needed(LEVELS["all"], "linux/arm64", others) is None  # SME only for Android and Apple


def test_a_cross_build_installs_and_names_the_gcc_14_cross_compilers(tmp_path):
    declared = declared_variants(tree_with(tmp_path, CMAKE))
    plan = plan_of(declared, **{"build.arch": "cpu"}, **ARM64_ON_AMD64)
    assert plan.gcc_major == 14
    assert "-DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc-14" in plan.cmake_args
    assert "-DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++-14" in plan.cmake_args
    assert "-DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++-14" in dict(plan.labels)["org.llama-buildkit.flags"]
    apt = next(line for line in render_dockerfile(plan).splitlines() if "libssl-dev:arm64" in line)
    assert apt.split() == ["gcc-14-aarch64-linux-gnu", "g++-14-aarch64-linux-gnu", "libssl-dev:arm64", "\\"]
    toolchain = render_toolchain(plan)
    assert toolchain is not None
    assert "set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc-14)" in toolchain
    assert "set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++-14)" in toolchain
    # the same build of a tree without SME variants: the base's own cross compilers, as before
    plain = plan_of((), **{"build.arch": "cpu"}, **ARM64_ON_AMD64)
    assert plain.gcc_major is None and not any("CMAKE_C_COMPILER=" in a for a in plain.cmake_args)
    assert "gcc-14" not in render_dockerfile(plain)
    assert "set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)" in (render_toolchain(plain) or "")


def test_a_native_arm64_build_installs_gcc_14_and_nvcc_keeps_the_bases_gxx(tmp_path):
    declared = declared_variants(tree_with(tmp_path, CMAKE))
    cpu = plan_of(declared, **{"build.arch": "cpu"}, **ARM64_ON_ARM64)
    assert "-DCMAKE_C_COMPILER=gcc-14" in cpu.cmake_args and "-DCMAKE_CXX_COMPILER=g++-14" in cpu.cmake_args
    assert "ca-certificates gcc-14 g++-14 \\" in render_dockerfile(cpu)
    cuda = plan_of(declared, **{"build.arch": "sm_121"}, **ARM64_ON_ARM64)
    assert "-DCMAKE_CUDA_HOST_COMPILER=g++" in cuda.cmake_args  # CUDA's support matrix is the base's g++
    across = plan_of(declared, **{"build.arch": "sm_121"}, **ARM64_ON_AMD64)
    assert "set(CMAKE_CUDA_HOST_COMPILER aarch64-linux-gnu-g++)" in (render_toolchain(across) or "")
    assert not any(a.startswith("-DCMAKE_CUDA_HOST_COMPILER=") for a in across.cmake_args)


def test_gcc_14_changes_the_build_key_inputs(tmp_path):
    declared = declared_variants(tree_with(tmp_path, CMAKE))
    with_gcc = plan_of(declared, **{"build.arch": "cpu"}, **ARM64_ON_AMD64)
    without = plan_of((), **{"build.arch": "cpu"}, **ARM64_ON_AMD64)
    assert dict(with_gcc.labels)["org.llama-buildkit.flags"] != dict(without.labels)["org.llama-buildkit.flags"]


def test_a_base_without_gcc_14_is_one_line_naming_the_remedies():
    for line in ("#9 2.1 E: Unable to locate package gcc-14-aarch64-linux-gnu",
                 "E: Package 'g++-14' has no installation candidate"):
        hint = known_failure([line])
        assert hint and "GCC 14" in hint and "--cpu-level armv8.6" in hint and "\n" not in hint
    assert known_failure(["E: Unable to locate package gcc-aarch64-linux-gnu"]) is None


def test_verify_expects_the_declared_sme_variants_and_counts_sme(tmp_path):
    declared = declared_variants(tree_with(tmp_path, CMAKE))
    plan = plan_of(declared, **{"build.arch": "cpu"}, **ARM64_ON_AMD64)
    expected = expected_backends(plan)
    assert "armv9.2_1" in expected and "armv8.6_1" in expected
    assert not any(n.startswith(("android_", "apple_")) for n in expected)
    assert backend_class(plan, "armv9.2_1", set()) == "sme"
    lines = ["  10:\td503457f \tsmstart", "  14:\t80800000 \tfmopa\tza0.s, p0/m, p0/m, z0.s, z0.s",
             "  18:\t04a00000 \tadd\tz0.s, z0.s, z0.s", "  1c:\t4e208400 \tadd\tv0.16b, v0.16b, v0.16b"]
    counts = cpucode.count_lines(lines)
    assert counts["sme"] == 2 and counts["sve"] == 2 and counts["neon"] == 1
    assert cpucode.problems("sme", counts) == []  # SVE is what an armv9.2 variant must hold
    none = cpucode.count_lines(lines[2:])
    assert cpucode.summary(none, always=("sme",)) == "neon 1, sve 1, sme 0"
    assert cpucode.problems("sme", cpucode.count_lines(lines[3:])) == ["no sve instructions"]
