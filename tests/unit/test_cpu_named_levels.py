"""CPU levels named for a CPU (issue 25): sapphirerapids and znver4 (linux/amd64: -march=<name> for every C/C++
compile, with the ggml features it turns on), neoverse-v2 (linux/arm64: its -march through GGML_CPU_ARM_ARCH).
Their exact CMake flags, the labels, lock and reproduce record that carry them, what verify expects of their
library (judged on code compiled here), GCC 14 for znver4 said before the build in one line, and the levels
listed with their descriptions in --help and in the error of an unknown one."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest

from buildkit.core.errors import BuildError
from buildkit.engine.api import Finished
from buildkit.engine.current import use_engine
from buildkit.verify.buildfailure import known_failure, run_build_explained
from buildkit.engine.specs import BuildSession, BuildSpec
from buildkit.flows.unit.pipeline import check_build_machine, inputs_record
from buildkit.flows.reproduce.record import from_labels
from buildkit.cli.reproducespecs import overrides_for
from buildkit.plan import cpulevels
from buildkit.plan.buildkey import key_of
from buildkit.plan.inputs import BaseImage
from buildkit.plan.plantypes import plan_inputs
from buildkit.plan.render import render_dockerfile
from buildkit.release.lock import LockEntry
from buildkit.release.lockfile import Lock, write_lock_entry
from buildkit.verify import cpucode
from buildkit.verify.checks import _check_code, backend_class, expected_backends
from cliutil import run_cli
from fakeengine import FakeEngine
from test_plan_render import plan_for
from test_reproduce_unit import labels_of

DIGEST = "sha256:" + "ab" * 32
BASES = (BaseImage("buildkit-test/debian:bookworm", DIGEST),)
COMMON = ("-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=OFF", "-DGGML_BACKEND_DIR=/app/lib")
X86_OFF = {f: "OFF" for f in ("SSE42", "AVX", "AVX2", "BMI2", "AVX_VNNI", "FMA", "F16C", "AVX512", "AVX512_VBMI",
                              "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8", "AMX_BF16")}


def x86(on: str, march: str) -> tuple[str, ...]:
    values = {**X86_OFF, **{f: "ON" for f in on.split()}}
    return COMMON + tuple(f"-DGGML_{f}={v}" for f, v in values.items()) + (
        f"-DCMAKE_C_FLAGS=-march={march}", f"-DCMAKE_CXX_FLAGS=-march={march}")


EXPECTED = {
    "sapphirerapids": ("linux/amd64", x86("SSE42 AVX AVX2 BMI2 AVX_VNNI FMA F16C AVX512 AVX512_VBMI AVX512_VNNI "
                                          "AVX512_BF16 AMX_TILE AMX_INT8 AMX_BF16", "sapphirerapids")),
    "znver4": ("linux/amd64", x86("SSE42 AVX AVX2 BMI2 FMA F16C AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16",
                                  "znver4")),
    "neoverse-v2": ("linux/arm64", COMMON + ("-DGGML_CPU_ARM_ARCH=armv9-a+dotprod+fp16+sve+i8mm+sve2+bf16",)),
}


def plan_of(level: str, **more):
    platform = EXPECTED[level][0] if level in EXPECTED else "linux/amd64"
    return plan_for(**{"build.arch": "cpu", "build.cpu_level": level, "build.platform": platform, **more})


@pytest.mark.parametrize("level", sorted(EXPECTED))
def test_the_cmake_flags_of_each_named_level_exactly(level):
    platform, flags = EXPECTED[level]
    assert cpulevels.cmake_flags(cpulevels.get_level(level, platform), platform) == flags
    args = plan_of(level).cmake_args
    start = args.index("-DGGML_NATIVE=OFF")
    assert args[start:start + len(flags)] == flags  # in the build's argv as they are, nothing else among them
    assert not any("-mtune" in a for a in args)


def test_cmake_c_flags_of_build_cmake_args_are_kept_after_the_march():
    plan = plan_of("sapphirerapids", **{"build.cmake_args": ["-DCMAKE_C_FLAGS=-O3", "-DFOO=1"]})
    assert "-DCMAKE_CXX_FLAGS=-march=sapphirerapids" in plan.cmake_args
    assert [a for a in plan.cmake_args if a.startswith("-DCMAKE_C_FLAGS=")] == \
        ["-DCMAKE_C_FLAGS=-march=sapphirerapids -O3"]
    assert plan.cmake_args[-1] == "-DFOO=1"
    assert "'-DCMAKE_C_FLAGS=-march=sapphirerapids -O3'" in render_dockerfile(plan)  # one argument of cmake
    # every other level leaves build.cmake_args as given, after everything
    v4 = plan_of("x86-64-v4", **{"build.cmake_args": ["-DCMAKE_C_FLAGS=-O3"]})
    assert v4.cmake_args[-1] == "-DCMAKE_C_FLAGS=-O3"


@pytest.mark.parametrize("level", sorted(EXPECTED))
def test_labels_lock_and_reproduce_record_carry_the_level(level, tmp_path):
    plan = plan_of(level)
    labels = dict(plan.labels)
    assert labels["org.llama-buildkit.cpu-level"] == level
    march = "-DGGML_CPU_ARM_ARCH=armv9-a+" if level == "neoverse-v2" else f"-DCMAKE_CXX_FLAGS=-march={level}"
    assert march in labels["org.llama-buildkit.flags"]
    assert plan.request.variant == f"cpu-{level}" and any(t.endswith(f":cpu-{level}") for t in plan.tags)
    assert inputs_record(plan, BASES, None)["cpu_level"] == level
    rec = from_labels(labels_of(plan, BASES), "image x", image_digest=DIGEST)
    assert rec.inputs.cpu_level == level and overrides_for(rec)["build.cpu_level"][0] == level
    inputs = plan_inputs(plan, BASES, None)
    key = key_of(inputs)
    entry = LockEntry(**inputs.lock_fields(), ref="main", template="t.j2", dockerfile_sha256="d" * 64,
                      cuda_root=None, cmake_archs=None, image_name="x/y", image_digest="sha256:" + "e" * 64,
                      image_id="sha256:" + "f" * 64, tags=(f"x/y:cpu-{level}",), build_key=key,
                      labels=inputs.to_labels(key))
    write_lock_entry(tmp_path / "buildkit.lock", entry)
    again = Lock.read(tmp_path / "buildkit.lock").entry(entry.key)
    assert again.cpu_level == level and key_of(again.inputs()) == key
    assert any(f"-march={level}" in a or "armv9-a" in a for a in again.cmake_args)


def test_each_level_has_a_build_key_of_its_own():
    keys = {lv: key_of(plan_inputs(plan_of(lv), BASES, None)) for lv in ("sapphirerapids", "znver4", "x86-64-v4",
                                                                           "all")}
    assert len(set(keys.values())) == 4


@pytest.mark.parametrize("level,simd", [("sapphirerapids", "avx512"), ("znver4", "avx512"), ("neoverse-v2", "sve")])
def test_verify_expects_one_library_of_the_levels_simd_class(level, simd):
    plan = plan_of(level)
    assert expected_backends(plan) == ("",)
    assert backend_class(plan, "", set()) == simd


def test_verify_loads_the_backend_only_on_a_cpu_with_its_features():
    sapphire = cpulevels.level_features(cpulevels.LEVELS["sapphirerapids"])
    assert {"AMX_INT8", "AMX_TILE", "AVX_VNNI", "AVX512_VNNI", "AVX512_BF16"} <= set(sapphire)
    zen4 = {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2", "avx512f", "avx512cd", "avx512vl", "avx512dq",
            "avx512bw", "avx512vbmi", "avx512_vnni", "avx512_bf16"}
    supported = cpulevels.host_features(zen4, "linux/amd64")
    assert set(cpulevels.level_features(cpulevels.LEVELS["znver4"])) <= supported
    assert {f for f in sapphire if f not in supported} == {"AVX_VNNI", "AMX_TILE", "AMX_INT8", "AMX_BF16"}
    grace = cpulevels.level_features(cpulevels.LEVELS["neoverse-v2"])
    assert set(grace) == {"DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE", "MATMUL_INT8", "SVE2"}


# the way ggml writes its kernels: intrinsics of the widest registers the compiler's -march defines
VECTOR_C = """
#include <immintrin.h>
float dot(const float *a, const float *b, int n) {
    float s = 0; int i = 0;
#if defined(__AVX512F__)
    __m512 acc = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    s = _mm512_reduce_add_ps(acc);
#endif
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}
"""


def compiled(tmp_path: Path, march: str) -> Path:
    """A shared library of a kernel, compiled here with -march (no engine)."""
    src = tmp_path / "v.c"
    src.write_text(VECTOR_C)
    out = tmp_path / march / "libggml-cpu.so"
    out.parent.mkdir()
    subprocess.run(["gcc", f"-march={march}", "-O2", "-shared", "-fPIC", "-o", str(out), str(src)],
                   check=True, capture_output=True)
    return out


@pytest.mark.skipif(not (shutil.which("gcc") and cpucode.find_objdump("amd64")), reason="needs gcc and objdump")
def test_verify_judges_the_library_by_its_code(tmp_path):
    if subprocess.run(["gcc", "-dumpmachine"], capture_output=True, text=True).stdout.split("-")[0] != "x86_64":
        pytest.skip("needs an x86-64 gcc")
    plan = plan_of("sapphirerapids")
    objdump = cpucode.find_objdump("amd64")
    assert objdump is not None
    good = _check_code(plan, {"": compiled(tmp_path, "sapphirerapids")}, objdump, set())
    assert good.status == "passed" and good.detail.startswith("libggml-cpu.so (avx512): ") and "avx512" in good.detail
    bad = _check_code(plan, {"": compiled(tmp_path, "x86-64-v3")}, objdump, set())
    assert bad.status == "failed" and "no avx512 instructions" in bad.detail


def test_sve_code_is_what_neoverse_v2_must_show():
    counts = cpucode.count_lines(["  18:\t04a00000 \tadd\tz0.s, z0.s, z0.s", "  1c:\t4e208400 \tadd\tv0.16b, v0.16b"])
    assert cpucode.problems("sve", counts) == []
    assert cpucode.problems("sve", cpucode.count_lines(["  1c:\t4e208400 \tadd\tv0.16b, v0.16b"])) == \
        ["no sve instructions"]


def test_znver4_installs_gcc_14_and_says_so_in_one_line_before_the_build():
    """GCC 13 added -march=znver4; the build installs 14, which Ubuntu 24.04 and Debian 13 both carry."""
    plan = plan_of("znver4")
    assert plan.gcc_major == 14
    assert "-DCMAKE_C_COMPILER=gcc-14" in plan.cmake_args and "-DCMAKE_CXX_COMPILER=g++-14" in plan.cmake_args
    assert "ca-certificates gcc-14 g++-14 \\" in render_dockerfile(plan)
    assert "-DCMAKE_C_COMPILER=gcc-14" in dict(plan.labels)["org.llama-buildkit.flags"]
    out = io.StringIO()
    with use_engine(FakeEngine()) as engine:
        check_build_machine(plan.request, engine, out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert "-march=znver4" in lines[0] and "GCC 14" in lines[0] and "--cpu-level x86-64-v4" in lines[0]
    # the levels the base's own GCC 12 knows: no other compiler, nothing said
    for level in ("sapphirerapids", "neoverse-v2", "x86-64-v4"):
        other = plan_of(level)
        assert other.gcc_major is None and not any("CMAKE_C_COMPILER" in a for a in other.cmake_args)
        said = io.StringIO()
        with use_engine(FakeEngine()) as engine:
            check_build_machine(other.request, engine, said)
        assert said.getvalue() == ""


def test_a_base_or_gcc_without_the_march_fails_in_one_line_naming_the_remedy():
    for line in ("#9 2.1 E: Unable to locate package gcc-14", "E: Package 'g++-14' has no installation candidate"):
        hint = known_failure([line])
        assert hint and "GCC 14" in hint and "\n" not in hint
        assert "cpu level znver4 (else --cpu-level x86-64-v4)" in hint and "--cpu-level armv8.6" in hint
    hint = known_failure(["#12 3.4 cc1: error: bad value ‘znver4’ for ‘-march=’ switch"])
    assert hint and "-march" in hint and "\n" not in hint
    assert known_failure(["E: Unable to locate package gcc-12"]) is None


def test_a_level_of_the_other_platform_is_refused_before_any_work_in_one_line(tmp_path):
    proc = run_cli(tmp_path, "build", "--arch", "cpu", "--cpu-level", "znver4", "--platform", "linux/arm64",
                   "--print")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert errors(proc) == ["error: build.cpu_level znver4 is for linux/amd64, but build.platform is linux/arm64"]
    proc = run_cli(tmp_path, "build", "--arch", "cpu", "--cpu-level", "neoverse-v2", "--platform", "linux/amd64",
                   "--print")
    assert proc.returncode == 1 and len(errors(proc)) == 1
    assert "neoverse-v2 is for linux/arm64" in proc.stderr


def errors(proc) -> list[str]:
    """The error lines of stderr (a note about the missing buildkit.toml may come before)."""
    lines = proc.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("error: ")
    return [line for line in lines if not line.startswith("buildkit: ")]


def test_help_and_the_error_of_an_unknown_level_describe_every_level(tmp_path):
    help_text = run_cli(tmp_path, "build", "--help", env=None).stdout
    unknown = run_cli(tmp_path, "build", "--arch", "cpu", "--cpu-level", "znver5", "--print")
    assert unknown.returncode == 1 and len(errors(unknown)) == 1
    assert "Traceback" not in unknown.stderr
    for level in cpulevels.LEVELS.values():
        assert f"{level.name}: {level.description}" in " ".join(help_text.split())
        assert f"{level.name}: {level.description}" in unknown.stderr
    assert "neoverse-v2: (linux/arm64) armv9-a+dotprod+fp16+sve+i8mm+sve2+bf16 (Neoverse V2: NVIDIA Grace" \
        in unknown.stderr


class AptFails(FakeEngine):
    """A build whose apt step finds no gcc-14 package, the way buildx prints it."""

    def build(self, spec, session, on_line, *, stream, tty=False):
        for line in ("#9 [build 2/6] RUN apt-get update && apt-get install -y gcc-14 g++-14",
                     "#9 2.104 E: Unable to locate package gcc-14", "#9 2.104 E: Unable to locate package g++-14",
                     "#9 ERROR: process \"/bin/sh -c apt-get update\" did not complete successfully: exit code: 100",
                     "ERROR: failed to solve: process did not complete successfully: exit code: 100"):
            on_line(line)
        return Finished(code=1, seconds=1.0, tty=False)


def test_the_build_error_of_a_base_without_gcc_14_is_the_one_line_remedy(tmp_path):
    spec = BuildSpec(context=tmp_path, dockerfile=tmp_path / "Dockerfile", tags=("x:cpu-znver4",))
    with use_engine(AptFails()) as engine, pytest.raises(BuildError) as failed:
        run_build_explained(spec, BuildSession(progress="plain"), stream=io.StringIO(), engine=engine)
    message = str(failed.value)
    assert "\n" not in message and "GCC 14" in message and "cpu level znver4" in message
