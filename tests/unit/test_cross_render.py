"""Cross builds, planned and rendered (pure): both directions, every template and provider.

The property that matters: no stage of the target platform has a RUN line (it would execute the
target's programs, which needs QEMU); only stages FROM --platform=<build machine> run anything.
"""

import re

import pytest

from buildkit.core.errors import ArchError, ConfigError
from buildkit.plan.buildkey import key_of
from buildkit.plan.inputs import BaseImage, from_labels
from buildkit.plan.plantypes import plan_inputs
from buildkit.plan.platforms import cpu_arch, judge_build_machine, machine_platform
from buildkit.plan.render import render_dockerfile, render_toolchain

from test_plan_render import plan_for

AMD64_ON_ARM64 = {"build.build_platform": "linux/arm64", "build.platform": "linux/amd64"}
ARM64_ON_AMD64 = {"build.build_platform": "linux/amd64", "build.platform": "linux/arm64"}


def stages(text: str) -> dict[str, tuple[str, list[str]]]:
    """{stage name: (the platform it runs on: 'build' or 'target', its instructions)}."""
    out: dict[str, tuple[str, list[str]]] = {}
    name = None
    for line in text.splitlines():
        m = re.match(r"^FROM (?:--platform=(\S+) )?(\S+) AS (\S+)$", line)
        if m:
            platform, base, name = m.groups()
            runs_on = "build" if platform else out[base][0] if base in out else "target"
            out[name] = (runs_on, [])
        elif name and line and not line.startswith((" ", "#")):
            out[name][1].append(line.split()[0])
    return out


def assert_no_target_code(text: str) -> None:
    ran = {name: ins for name, (runs_on, ins) in stages(text).items() if runs_on == "target" and "RUN" in ins}
    assert not ran, f"stages of the target platform run programs: {sorted(ran)}"


@pytest.mark.parametrize("overrides", [
    {"build.arch": "cpu"},
    {"build.arch": "sm_120", "base.provider": "wheels", "base.os_image": "debian:bookworm"},
    {"build.arch": "sm_120", "base.provider": "nvidia"},
    {"build.arch": "sm_90", "base.provider": "wheels", "base.os_image": "debian:bookworm", "build.no_vmm": False},
    {"build.arch": "cpu", "build.user": "llama"},
], ids=["cpu", "wheels", "nvidia", "wheels-vmm", "cpu-user"])
@pytest.mark.parametrize("direction", [ARM64_ON_AMD64, AMD64_ON_ARM64], ids=["arm64-on-amd64", "amd64-on-arm64"])
def test_cross_builds_run_nothing_of_the_target(overrides, direction):
    plan = plan_for(**overrides, **direction)
    text = render_dockerfile(plan)
    target = cpu_arch(direction["build.platform"])
    assert plan.request.cross
    assert f"FROM --platform={direction['build.build_platform']} " in text
    assert "$BUILDPLATFORM" not in text  # the build machine by name: an emulated one too (emulate_build_platform)
    assert f"{target.triplet.replace('_', '-')}" in text and f"libssl-dev:{target.dpkg}" in text
    assert f"dpkg --add-architecture {target.dpkg}" in text
    assert "-DCMAKE_TOOLCHAIN_FILE=/toolchain.cmake" in text and "COPY toolchain.cmake /toolchain.cmake" in text
    assert f"id=llama-buildkit-ccache-{plan.request.variant}-{target.docker}," in text
    assert_no_target_code(text)
    # the runtime packages: resolved against the target image, unpacked, never installed by running them
    assert f"-o APT::Architecture={target.dpkg}" in text and "--download-only" in text and "dpkg-deb" in text
    assert "FROM target-base AS base" in text


def test_the_toolchain_file_names_the_target_compilers_both_ways():
    arm = render_toolchain(plan_for(**{"build.arch": "sm_121", "base.provider": "wheels",
                                       "build.build_platform": "linux/amd64"}))
    assert arm is not None
    assert "set(CMAKE_SYSTEM_PROCESSOR aarch64)" in arm and "set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)" in arm
    assert "set(CMAKE_CUDA_HOST_COMPILER aarch64-linux-gnu-g++)" in arm
    assert "set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)" in arm
    x86 = render_toolchain(plan_for(**{"build.arch": "cpu"}, **AMD64_ON_ARM64))
    assert x86 is not None
    assert "set(CMAKE_SYSTEM_PROCESSOR x86_64)" in x86 and "set(CMAKE_CXX_COMPILER x86_64-linux-gnu-g++)" in x86
    assert "CUDA" not in x86  # no nvcc in a cpu build
    assert render_toolchain(plan_for(**{"build.arch": "cpu"})) is None  # native: no toolchain file


def test_amd64_image_on_an_arm64_machine():
    text = render_dockerfile(plan_for(**{"build.arch": "sm_120", "base.provider": "nvidia"}, **AMD64_ON_ARM64))
    assert "gcc-x86-64-linux-gnu g++-x86-64-linux-gnu binutils-x86-64-linux-gnu" in text
    # NVIDIA's devel image of the target platform gives the libraries to link (copied, never run)
    assert "FROM docker.io/nvidia/cuda:13.1.0-devel-ubuntu24.04 AS cuda-target-devel" in text
    assert "COPY --from=cuda-target-devel /usr/local/cuda/targets/x86_64-linux/" in text
    # Ubuntu's amd64 packages are on archive.ubuntu.com, the arm64 machine's on ports
    assert "mirror=http://archive.ubuntu.com/ubuntu" in text and "Architectures: arm64" in text
    wheels = render_dockerfile(plan_for(**{"build.arch": "sm_120", "base.provider": "wheels"}, **AMD64_ON_ARM64))
    assert "COPY --from=cuda-target /lib64/ /usr/local/cuda/lib64/" in wheels
    assert "x86_64-linux-gnu-gcc -shared" in wheels  # the libcuda stub, for the target
    assert "x86_64-linux-gnu-objcopy --wildcard" in wheels  # nvcc's temporary names, stripped with the target's tools
    assert "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,/usr/local/cuda/lib64" in wheels


def test_native_builds_render_as_before():
    text = render_dockerfile(plan_for(**{"build.arch": "cpu"}))
    assert "--platform=" not in text and "toolchain" not in text and "dpkg-deb" not in text
    assert "FROM docker.io/library/ubuntu:24.04 AS build" in text
    assert "libgomp1 openssl ca-certificates curl" in text  # installed with apt in the runtime stage
    assert "id=llama-buildkit-ccache-cpu-amd64," in text
    arm = plan_for(**{"build.arch": "cpu", "build.platform": "linux/arm64", "build.build_platform": "linux/arm64"})
    assert not arm.request.cross and "--platform=" not in render_dockerfile(arm)


def test_the_build_machine_is_an_input_of_cross_builds_only():
    cross = plan_for(**{"build.arch": "cpu"}, **ARM64_ON_AMD64)
    native = plan_for(**{"build.arch": "cpu", "build.platform": "linux/arm64", "build.build_platform": "linux/arm64"})
    base = (BaseImage("docker.io/library/ubuntu:24.04", "sha256:" + "1" * 64),)
    ci, ni = plan_inputs(cross, base), plan_inputs(native, base)
    assert ci.build_platform == "linux/amd64" and ni.build_platform is None
    assert "build_platform" in ci.record() and "build_platform" not in ni.record()
    assert key_of(ci) != key_of(ni)  # other compilers, other bits
    assert from_labels(ci.to_labels("k"), "test").build_platform == "linux/amd64"


def test_impossible_requests_stop_before_any_work():
    with pytest.raises(ArchError, match="arm64 only"):
        plan_for(**{"build.arch": "sm_121", "build.platform": "linux/amd64"})
    with pytest.raises(ConfigError, match="native compiles for this machine"):
        plan_for(**{"build.arch": "cpu", "build.cpu_level": "native"}, **ARM64_ON_AMD64)
    with pytest.raises(ConfigError, match="linux/amd64 and linux/arm64"):
        plan_for(**{"build.arch": "cpu", "build.build_platform": "linux/riscv64"})


def test_judge_build_machine():
    assert judge_build_machine("linux/amd64", "linux/arm64", "linux/amd64") is None  # cross, natively
    assert judge_build_machine("linux/amd64", "linux/amd64", "linux/amd64") is None
    assert judge_build_machine("linux/amd64", "linux/arm64", "") is None  # engine unknown: not judged
    assert "emulation" in (judge_build_machine("linux/arm64", "linux/arm64", "linux/amd64") or "")
    with pytest.raises(ConfigError, match="engine runs on linux/arm64"):
        judge_build_machine("linux/amd64", "linux/arm64", "linux/arm64")


def test_machine_platform_names():
    assert machine_platform("x86_64") == "linux/amd64" and machine_platform("aarch64") == "linux/arm64"


def test_an_old_gcc_for_the_arm64_sme_variants_is_named_with_what_to_do():
    from buildkit.verify.buildfailure import known_failure

    line = "#13 70.24 cc1: error: unknown value 'armv9.2-a+dotprod+fp16+sve+i8mm+sve2+sme' for '-march'"
    hint = known_failure(["#13 70.20 [ 20%] Building C object x.o", line])
    assert hint is not None and "GCC is older than 14" in hint and "--cpu-level armv8.6" in hint
    assert known_failure(["cc1: error: something else"]) is None
