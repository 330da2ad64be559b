"""CPU instruction-set levels without Docker: flag mapping, variant names, labels, build key, inputs
record, lock, reproduce record, `buildkit config`, the score ggml uses to pick a variant, and the
disassembly classes verify checks. The variant tables are compared with the real llama.cpp CMake
(when the tree is cached) and with the example fork."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from buildkit.verify import cpucode

from buildkit.core import ggmlcpu
from buildkit.plan import cpulevels
from buildkit.plan.buildkey import build_key
from buildkit.verify.cpuhost import host_cpu_flags, host_cpu_id
from buildkit.core.errors import ConfigError
from buildkit.plan.inputs import BaseImage
from buildkit.release.lock import entry_from_dict
from buildkit.flows.unit.pipeline import inputs_record
from buildkit.flows.reproduce.record import from_labels
from buildkit.cli.reproducespecs import overrides_for
from buildkit.verify.checks import cpu_libraries, expected_backends
from test_plan_render import plan_for
from test_reproduce_unit import labels_of

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32
FLAG_RE = re.compile(r"^-D(GGML_[A-Z0-9_]+)=(.*)$")


def ggml_flags(plan) -> dict[str, str]:
    found: dict[str, str] = {}
    for arg in plan.cmake_args:
        m = FLAG_RE.match(arg)
        if m and m.group(1) != "GGML_CUDA" and not m.group(1).startswith("GGML_CUDA_"):
            assert m.group(1) not in found, f"{m.group(1)} passed twice"
            found[m.group(1)] = m.group(2)
    return found


@pytest.mark.parametrize("level", list(cpulevels.LEVELS))
def test_every_instruction_set_flag_is_explicit_whatever_source_date_epoch_does(level):
    """ggml's defaults for these change with SOURCE_DATE_EPOCH: each must be passed, ON or OFF."""
    platform = f"linux/{cpulevels.LEVELS[level].platform_arch or 'amd64'}"
    flags = ggml_flags(plan_for(**{"build.arch": "cpu", "build.cpu_level": level, "build.platform": platform}))
    for name in ("GGML_NATIVE", "GGML_BACKEND_DL", "GGML_CPU_ALL_VARIANTS"):
        assert flags[name] in ("ON", "OFF"), name
    if platform == "linux/amd64":
        assert {f"GGML_{f}" for f in ggmlcpu.X86_FEATURES} <= set(flags)
        assert "GGML_CPU_ARM_ARCH" not in flags
    else:
        assert "GGML_CPU_ARM_ARCH" in flags and "GGML_AVX2" not in flags


def on(flags: dict[str, str]) -> set[str]:
    return {k for k, v in flags.items() if v == "ON"}


def test_default_is_all_variants_loaded_at_run_time_from_app_lib():
    plan = plan_for(**{"build.arch": "cpu"})
    flags = ggml_flags(plan)
    assert on(flags) == {"GGML_BACKEND_DL", "GGML_CPU_ALL_VARIANTS"}
    assert flags["GGML_BACKEND_DIR"] == "/app/lib" and flags["GGML_NATIVE"] == "OFF"
    assert plan.request.variant == "cpu" and plan.request.cpu_level.name == "all"


@pytest.mark.parametrize("level,features", [
    ("x86-64-v2", {"SSE42"}),
    ("x86-64-v3", {"SSE42", "AVX", "AVX2", "BMI2", "FMA", "F16C"}),
    ("x86-64-v4", {"SSE42", "AVX", "AVX2", "BMI2", "FMA", "F16C", "AVX512"}),
    ("none", set()),
])
def test_single_x86_levels_turn_on_exactly_their_features(level, features):
    flags = ggml_flags(plan_for(**{"build.arch": "cpu", "build.cpu_level": level}))
    assert on(flags) == {"GGML_BACKEND_DL"} | {f"GGML_{f}" for f in features}
    assert flags["GGML_CPU_ALL_VARIANTS"] == "OFF" and flags["GGML_BACKEND_DIR"] == "/app/lib"


def test_native_is_ggml_native_without_backend_dl():
    """ggml refuses GGML_NATIVE with GGML_BACKEND_DL on x86: native links libggml-cpu."""
    flags = ggml_flags(plan_for(**{"build.arch": "cpu", "build.cpu_level": "native"}))
    assert on(flags) == {"GGML_NATIVE"} and "GGML_BACKEND_DIR" not in flags
    assert cpulevels.LEVELS["native"].reproducible is False


@pytest.mark.parametrize("level,arch", [("armv8.2", "armv8.2-a+dotprod+fp16"),
                                        ("armv8.6", "armv8.6-a+dotprod+fp16+sve+i8mm"),
                                        ("none", "armv8-a"), ("all", "")])
def test_arm64_levels_use_ggml_cpu_arm_arch(level, arch):
    flags = ggml_flags(plan_for(**{"build.arch": "cpu", "build.cpu_level": level, "build.platform": "linux/arm64"}))
    assert flags["GGML_CPU_ARM_ARCH"] == arch


@pytest.mark.parametrize("level,platform,message", [
    ("x86-64-v3", "linux/arm64", "is for linux/amd64"),
    ("armv8.2", "linux/amd64", "is for linux/arm64"),
    ("avx2", "linux/amd64", "must be one of all, x86-64-v2"),
    ("all", "linux/ppc64le", "not linux/ppc64le"),
])
def test_a_level_the_platform_cannot_take_stops_before_any_work(level, platform, message):
    with pytest.raises(ConfigError, match=message):
        plan_for(**{"build.arch": "cpu", "build.cpu_level": level, "build.platform": platform})


def test_variant_and_tags_name_a_non_default_level_and_share_the_ccache():
    default = plan_for(**{"build.arch": "cpu"})
    v3 = plan_for(**{"build.arch": "cpu", "build.cpu_level": "x86-64-v3"})
    cuda = plan_for(**{"build.arch": "sm_120", "build.cpu_level": "x86-64-v3"})
    assert v3.request.variant == "cpu-x86-64-v3"
    assert cuda.request.variant == "cuda13.1-sm120-cpu-x86-64-v3"
    assert plan_for(**{"build.arch": "sm_120"}).request.variant == "cuda13.1-sm120"
    assert any(t.endswith(":cpu-x86-64-v3") for t in v3.tags)
    assert v3.ccache_id == default.ccache_id == "llama-buildkit-ccache-cpu-amd64"
    assert cuda.ccache_id == "llama-buildkit-ccache-cuda13.1-sm120-amd64"


def test_cuda_images_get_the_same_cpu_backend_flags():
    cuda = ggml_flags(plan_for(**{"build.arch": "sm_120"}))
    cpu = ggml_flags(plan_for(**{"build.arch": "cpu"}))
    assert cuda == cpu


def test_level_is_in_labels_build_key_inputs_record_lock_and_reproduce_record():
    bases = (BaseImage("buildkit-test/debian:bookworm", DIGEST),)
    plans = {lv: plan_for(**{"build.arch": "cpu", "build.cpu_level": lv}) for lv in ("all", "x86-64-v3", "none")}
    for level, plan in plans.items():
        assert dict(plan.labels)["org.llama-buildkit.cpu-level"] == level
        assert inputs_record(plan, bases, None)["cpu_level"] == level
        rec = from_labels(labels_of(plan, bases), "image x", image_digest=DIGEST)
        assert rec.inputs.cpu_level == level and overrides_for(rec)["build.cpu_level"][0] == level
    assert len({build_key(p, bases, None) for p in plans.values()}) == 3
    entry = entry_from_dict({**_lock_fields(), "cpu_level": "x86-64-v3"})
    assert entry.cpu_level == "x86-64-v3"
    assert entry_from_dict(_lock_fields()).cpu_level == ""  # a lock written before the key existed


def test_native_build_key_and_record_name_the_build_machine():
    plan = plan_for(**{"build.arch": "cpu", "build.cpu_level": "native"})
    bases = (BaseImage("x", DIGEST),)
    assert build_key(plan, bases, None, cpu_host="cpu A") != build_key(plan, bases, None, cpu_host="cpu B")
    assert inputs_record(plan, bases, None)["cpu_host"] == host_cpu_id()
    assert "cpu_host" not in inputs_record(plan_for(**{"build.arch": "cpu"}), bases, None)


def _lock_fields() -> dict:
    return dict(source_url="u", ref="r", commit="c" * 40, build_number=1, patches=[], patch_set_sha256="p",
                template="cpu.Dockerfile.j2", template_sha256="t", dockerfile_sha256="d", base_images=[],
                cuda_version=None, cuda_root=None, arch="cpu", cmake_archs=None, target="server",
                platform="linux/amd64", no_vmm=True, cmake_args=[], source_date_epoch=1, tool_version="1",
                image_name="x", image_digest="sha256:1", image_id="sha256:2", tags=[], variant="cpu")


# --------------------------------------------------------------------------- which variant ggml loads

ZEN3 = {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2"}
ZEN4 = ZEN3 | {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw", "avx512vbmi", "avx512_vnni", "avx512_bf16"}
SAPPHIRE = ZEN4 | {"amx_tile", "amx_int8", "avx_vnni"}


@pytest.mark.parametrize("flags,best", [(set(), "x64"), ({"sse4_2"}, "sse42"), ({"sse4_2", "avx"}, "sandybridge"),
                                        (ZEN3, "haswell"), (ZEN4, "zen4"), (SAPPHIRE, "sapphirerapids"),
                                        (ZEN3 | {"avx_vnni"}, "alderlake")])
def test_best_variant_follows_ggml_score(flags, best):
    supported = cpulevels.host_features(flags, "linux/amd64")
    assert cpulevels.best_variant(list(ggmlcpu.X86_VARIANTS), supported, "linux/amd64") == best


def test_this_machine_gets_a_simd_variant():
    flags = host_cpu_flags()
    if "avx2" not in flags:
        pytest.skip("this machine has no AVX2")
    best = cpulevels.best_variant(list(ggmlcpu.X86_VARIANTS), cpulevels.host_features(flags, "linux/amd64"),
                                  "linux/amd64")
    assert best is not None
    assert cpulevels.simd_class(ggmlcpu.X86_VARIANTS[best], "linux/amd64") in ("avx2", "avx512")


# --------------------------------------------------------------------------- the tables are ggml's

VARIANT_RE = re.compile(r"^\s*ggml_add_cpu_backend(?:_variant)?\((\w[\w.]*)((?:\s+\w+)*)\)", re.M)


def x86_variants_in(cmake_text: str) -> dict[str, tuple[str, ...]]:
    block = cmake_text[cmake_text.index("ggml_add_cpu_backend(x64)" if "ggml_add_cpu_backend(x64)" in cmake_text
                                        else "ggml_add_cpu_backend_variant(x64)"):]
    block = block[:block.index("ARM") if "ARM" in block else len(block)]
    return {m.group(1): tuple(m.group(2).split()) for m in VARIANT_RE.finditer(block)}


def test_tables_match_the_example_fork():
    text = (ROOT / "examples/tiny-fork/ggml/src/CMakeLists.txt").read_text()
    assert {k: set(v) for k, v in x86_variants_in(text).items()} == \
        {k: set(v) for k, v in ggmlcpu.X86_VARIANTS.items()}


def test_tables_match_the_real_llama_cpp_cmake():
    from realserver import test_cache_dir
    from realsource import LLAMA_CPP_PYTHON_VERSION

    tree = test_cache_dir() / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"
    if not tree.is_dir():
        pytest.skip(f"real llama.cpp tree not cached at {tree} (the e2e tier fetches it)")
    text = (tree / "ggml/src/CMakeLists.txt").read_text()
    assert {k: set(v) for k, v in x86_variants_in(text).items()} == \
        {k: set(v) for k, v in ggmlcpu.X86_VARIANTS.items()}
    start = text.index("ggml_add_cpu_backend_variant(armv8.0_1)")
    arm = text[start:text.index("Android", start)]
    assert {m.group(1): set(m.group(2).split()) for m in VARIANT_RE.finditer(arm)} == \
        {k: set(v) for k, v in ggmlcpu.ARM_VARIANTS.items()}
    options = set(re.findall(r"option\(GGML_(\w+)\s+\"ggml: enable (?:SSE|AVX|FMA|F16C|BMI|AMX)",
                             (tree / "ggml/CMakeLists.txt").read_text()))
    assert options == set(ggmlcpu.X86_FEATURES)
    feats = (tree / "ggml/src/ggml-cpu/arch/x86/cpu-feats.cpp").read_text()
    bits = {name: int(bit or 0) for name, bit in
            re.findall(r"#ifdef GGML_(\w+)\n(?:(?!#endif).)*?score \+= (?:1<<(\d+)|1);", feats, re.S)}
    assert bits == ggmlcpu.X86_SCORE_BITS


# --------------------------------------------------------------------------- what verify counts

DISASM = """
0000000000001000 <f>:
    1000:\tvpmaddubsw %ymm1,%ymm2,%ymm3
    1005:\tvfmadd231ps %ymm0,%ymm1,%ymm2
    100a:\tpshufb %xmm1,%xmm2
0000000000002000 <g>:
    2000:\tvaddps %zmm0,%zmm1,%zmm2
"""


def test_disassembly_classes():
    counts = cpucode.count_lines(DISASM.splitlines())
    assert counts["avx"] == 2 and counts["avx2"] == 1 and counts["sse42"] == 1 and counts["avx512"] == 1
    assert cpucode.problems("avx512", counts) == []
    assert cpucode.problems("avx2", counts) == ["1 avx512 instructions (above its level)"]
    empty = cpucode.count_lines(["    1000:\tmovaps %xmm0,%xmm1"])
    assert cpucode.problems("avx2", empty) == ["no avx2 instructions"]
    assert cpucode.problems("baseline", empty) == []


def test_verify_expects_the_libraries_of_the_level(tmp_path):
    for name in ("libggml-cpu-x64.so", "libggml-cpu-haswell.so", "libggml-base.so.0.0.1"):
        (tmp_path / name).write_bytes(b"\x7fELF")
    (tmp_path / "libggml-cpu.so.0.0.1").write_bytes(b"\x7fELF")
    (tmp_path / "libggml-cpu.so.0").symlink_to("libggml-cpu.so.0.0.1")
    libs = cpu_libraries(tmp_path)
    assert set(libs) == {"x64", "haswell", ""} and libs[""].name == "libggml-cpu.so.0.0.1"
    assert "haswell" in expected_backends(plan_for(**{"build.arch": "cpu"}))
    assert expected_backends(plan_for(**{"build.arch": "cpu", "build.cpu_level": "x86-64-v3"})) == ("",)
