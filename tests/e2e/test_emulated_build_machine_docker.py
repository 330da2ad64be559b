"""The seed's direction, run: amd64 CUDA images of the example fork compiled on an arm64 build machine.

An arm64 Mac's Docker runs an arm64 VM; buildkit cross-compiles the amd64 image there with the aarch64
nvcc and the x86-64 g++. This amd64 machine stands in for it with `--emulate-build-platform`: the build
stage (and every program it runs: apt, CMake, nvcc, cicc, ptxas, the cross g++) is linux/arm64 under
QEMU, registered for this module only (tests/qemu.py). The images are then checked for what a native
build would give: verify (ELF x86-64, cuobjdump's archs, NEEDED, CPU code), `--version` run natively,
plain char as the host compiler, the CUDA host half and the kernel's SASS see it (signed on x86-64).
One arch, the seed's own (sm_120): the build machine and the char flags do not depend on it, and each
build under QEMU costs minutes of the CI budget. scripts/gpu_run.py ran an sm_90 image built this way
on an H200 (README, cross builds; docs/gpu-runs/2026-12-02).
"""

from __future__ import annotations

import subprocess

import docker
import pytest

import images
import qemu
from quiet import compiling
from sass import byte_loads
from buildkit.source.cudaroot import cuda_root_dir
from buildkit.verify.checks import find_cuobjdump
from cliutil import cli_env, run_cli, write_project

# the arm64 base made and the seed built under QEMU: 6-8 minutes alone on 2 cores, 14 beside other test
# processes on a cold engine. It is one of the e2e tier's long builds (`make test-e2e`), so `make test` stays
# a newcomer's loop; it runs there in turn with the arm64 cross build (tests/conftest.py, BINFMT_MODULES).
pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.timeout(2400)]

CUDA = "13.1"
IMAGE = "buildkit-test/tiny-seed"
# one CPU level (its backend is one library): the CPU variants prove nothing here and cost minutes under QEMU
SEED = ("--platform", "linux/amd64", "--build-platform", "linux/arm64", "--cpu-level", "x86-64-v3")
ARCHS = {"sm_120": "sm_120a"}


@pytest.fixture(scope="module")
def seed_project(tmp_path_factory, example_fork, debian_base_image, docker_engine):
    root = write_project(tmp_path_factory.mktemp("seed-project"),
                         source={"url": example_fork["url"], "commit": example_fork["commit"], "patch_dir": "patches"},
                         image={"name": IMAGE},
                         build={"cuda_version": CUDA, "jobs": 2, "progress": "plain"},
                         base={"provider": "wheels", "os_image": images.CONFIGURED_MULTIARCH_IMAGE, "cublas": False})
    env = cli_env(tmp_path_factory.getbasetemp() / "buildkit-cache")  # this checkout's buildkit
    return {"root": root, "env": env, "commit": example_fork["commit"]}


@pytest.fixture(scope="module")
def seed_builds(seed_project):
    """sm_120 for linux/amd64, compiled in a linux/arm64 build stage under QEMU, on a base whose arm64 half
    is configured (made under QEMU too)."""
    procs = {}
    try:
        # a compile under QEMU: the bench gate's runs wait for it (tests/quiet.py)
        with qemu.registered("aarch64"), compiling("the seed's build under QEMU"):
            images.ensure_multiarch_image(images.CONFIGURED_MULTIARCH_IMAGE, configured=True)
            for arch in ARCHS:
                procs[arch] = run_cli(seed_project["root"], "build", "--arch", arch, *SEED, "--emulate-build-platform",
                                      env=seed_project["env"], timeout=3000)
    except qemu.QemuUnavailable as exc:
        pytest.fail(f"QEMU cannot be registered on this machine: {exc}")
    assert qemu.handler_for("aarch64") is None  # removed again: the other tests prove "no emulation"
    return procs


def test_the_emulated_arm64_build_machine_makes_verified_amd64_images(seed_builds, seed_project):
    for arch, proc in seed_builds.items():
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-4000:]
        assert "the build machine is emulated" in proc.stderr
        assert "-Xcudafe=--signed_chars -Xcicc=--signed_chars" in out  # the compile step told nvcc
        for check in ("elf-machine", "needed-libraries", "cuda-archs", "no-vmm", "cpu-code"):
            assert f"verify {check}: passed" in proc.stdout, (arch, check, proc.stdout[-3000:])
        assert ARCHS[arch] in next(ln for ln in proc.stdout.splitlines() if ln.startswith("verify cuda-archs:"))
        version = next(ln for ln in proc.stdout.splitlines() if ln.startswith("verify version:"))
        # run natively: an amd64 image on this amd64 engine, no emulator named
        assert version.startswith("verify version: passed") and seed_project["commit"][:7] in version
        assert "emulated" not in version
        ref = f"{IMAGE}:cuda13.1-{arch.replace('_', '')}-cpu-x86-64-v3"
        assert docker.from_env().images.get(ref).attrs["Architecture"] == "amd64"


def test_host_and_device_see_a_signed_char_like_the_target(seed_builds, seed_project, tmp_path):
    assert all(p.returncode == 0 for p in seed_builds.values())
    ref = f"{IMAGE}:cuda13.1-sm120-cpu-x86-64-v3"
    probe = subprocess.run(["docker", "run", "--rm", ref, "--char-probe"], capture_output=True, text=True, timeout=120)
    assert "char-probe host: (char)200=-56 is_signed=1 template=signed" in probe.stdout, probe.stdout
    # cudafe++ ran on arm64 (unsigned char there): told otherwise, its host half chose the signed template
    assert "char-probe cuda-host: (char)200=-56 is_signed=1 template=signed" in probe.stdout, probe.stdout
    assert probe.returncode == 0 and "char-probe: agree" in probe.stdout
    # and cicc's device code loads the byte sign-extended, as x86-64's host code does
    container = docker.from_env().containers.create(ref)
    try:
        bits, _ = container.get_archive("/app/lib")
        with (tmp_path / "lib.tar").open("wb") as fh:
            for chunk in bits:
                fh.write(chunk)
    finally:
        container.remove()
    subprocess.run(["tar", "-xf", str(tmp_path / "lib.tar"), "-C", str(tmp_path)], check=True)
    library = next(p for p in (tmp_path / "lib").glob("libggml-cuda.so*") if p.is_file() and not p.is_symlink())
    cache = seed_project["env"]["LLAMA_BUILDKIT_CACHE_DIR"]
    cuobjdump = find_cuobjdump([cuda_root_dir(CUDA, cache, with_cublas=False)])  # the x86-64 (target's) root
    assert cuobjdump is not None
    assert byte_loads(cuobjdump, library, "char_probe_kernel") == {"S8"}


def test_another_build_machine_is_refused_before_any_work_unless_emulated_with_a_handler(seed_project):
    assert qemu.handler_for("aarch64") is None
    plain = run_cli(seed_project["root"], "build", "--arch", "sm_90", *SEED, env=seed_project["env"], timeout=300)
    assert plain.returncode == 1 and "--emulate-build-platform" in plain.stderr.strip().splitlines()[-1]
    asked = run_cli(seed_project["root"], "build", "--arch", "sm_90", *SEED, "--emulate-build-platform",
                    env=seed_project["env"], timeout=300)
    last = asked.stderr.strip().splitlines()[-1]
    assert asked.returncode == 1 and "no binfmt_misc handler runs AArch64 programs" in last, asked.stderr
    assert "stage fetch" not in asked.stderr + asked.stdout  # nothing fetched or laid out


def test_an_amd64_only_base_for_an_arm64_image_is_one_line_before_any_work(seed_project, debian_base_image):
    proc = run_cli(seed_project["root"], "build", "--arch", "cpu", "--platform", "linux/arm64",
                   "--os-image", debian_base_image, env=seed_project["env"], timeout=300)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert last.startswith("error: base image ") and f"{debian_base_image} offers linux/amd64, not linux/arm64" in last
    assert "stage fetch" not in proc.stderr + proc.stdout and "Traceback" not in proc.stderr
