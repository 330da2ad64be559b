"""Cross-compiled CUDA images on this amd64 machine: the example fork for sm_121 (DGX Spark, arm64 only),
provider wheels, with no binfmt handler registered, so nothing of arm64 can have run; and with QEMU
registered (tests/qemu.py, for that one test), the arm64 server's --version under emulation.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import docker
import pytest

import qemu
from sass import byte_loads
from buildkit.plan.platforms import ARCHES
from buildkit.source.cudaroot import cuda_root_dir
from buildkit.verify.checks import elf_archs, find_cuobjdump
from buildkit.verify.elfdeps import read_elf
from cliutil import cli_env, run_cli, write_project
from pyindexserver import ProxyIndex, proxy_env, proxy_store

pytestmark = pytest.mark.docker

CUDA = "13.5"  # newer than buildkit's built-in list of releases: accepted because the index has it (issue 41)
AARCH64 = ARCHES["arm64"].elf_machine


@pytest.fixture(scope="module")
def pypi():
    """NVIDIA's wheels through a loopback index in front of PyPI, its files kept between runs."""
    with ProxyIndex(proxy_store()) as index:
        yield index


@pytest.fixture(scope="module")
def cross_project(tmp_path_factory, example_fork, multiarch_base_image, docker_engine, pypi):
    commit = example_fork["commit"]
    root = write_project(tmp_path_factory.mktemp("cross-project"),
                         source={"url": example_fork["url"], "commit": commit, "patch_dir": "patches"},
                         image={"name": "buildkit-test/tiny-cross"},
                         build={"cuda_version": CUDA, "jobs": 2, "progress": "plain"},
                         base={"provider": "wheels", "os_image": multiarch_base_image, "cublas": False})
    env = cli_env(tmp_path_factory.getbasetemp() / "buildkit-cache", **proxy_env(pypi))  # this checkout's buildkit
    return {"root": root, "env": env, "commit": commit, "cache": Path(env["LLAMA_BUILDKIT_CACHE_DIR"])}


def no_emulation_here() -> None:
    found = qemu.handler_for("aarch64")
    assert found is None, f"binfmt handler {found} is registered: this test would prove nothing"


def copied_out(ref: str, path: str, dest: Path) -> Path:
    client = docker.from_env()
    container = client.containers.create(ref)
    try:
        bits, _ = container.get_archive(path)
        tar = dest / "out.tar"
        with tar.open("wb") as fh:
            for chunk in bits:
                fh.write(chunk)
        subprocess.run(["tar", "-xf", str(tar), "-C", str(dest)], check=True)
        tar.unlink()
    finally:
        container.remove()
    return dest / Path(path).name


SM121 = f"buildkit-test/tiny-cross:cuda{CUDA}-sm121"


@pytest.fixture(scope="module")
def sm121_build(cross_project):
    """The example fork for sm_121 (arm64 only), cross-compiled on this machine with no handler registered."""
    no_emulation_here()
    return run_cli(cross_project["root"], "build", "--arch", "sm_121", env=cross_project["env"], timeout=1800)


def test_sm121_is_cross_compiled_for_arm64_without_emulation(cross_project, sm121_build, tmp_path):
    proc = sm121_build
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ref = SM121
    assert docker.from_env().images.get(ref).attrs["Architecture"] == "arm64"
    app = copied_out(ref, "/app", tmp_path)
    elves = [p for p in app.rglob("*") if p.is_file() and not p.is_symlink() and p.read_bytes()[:4] == b"\x7fELF"]
    assert {p.name for p in elves} >= {"llama-server", "libggml-cuda.so.0.0.1", "libggml-cpu-armv8.2_1.so"}
    assert {p.name: read_elf(p).machine for p in elves} == {p.name: AARCH64 for p in elves}
    cudart = copied_out(ref, "/usr/local/cuda/lib64/libcudart.so.13", tmp_path)
    assert read_elf(cudart).machine == AARCH64  # the target's CUDA runtime, from the aarch64 wheels
    # the device code: exactly sm_121a, read with the build machine's cuobjdump
    cuobjdump = find_cuobjdump([cuda_root_dir(CUDA, cross_project["cache"], with_cublas=False)])
    assert cuobjdump, "no cuobjdump in the laid-out CUDA root"
    assert elf_archs(cuobjdump, app / "lib" / "libggml-cuda.so.0.0.1") == {"sm_121a"}
    # plain char is unsigned on AArch64: cicc, running here on x86-64 (signed), was told so, and the
    # kernel loads the byte zero-extended (LDG.E.U8), as the arm64 host code does
    assert byte_loads(cuobjdump, app / "lib" / "libggml-cuda.so.0.0.1", "char_probe_kernel") == {"U8"}
    # and buildkit's own report said so, without running anything of arm64
    assert "verify cuda-archs: passed" in proc.stdout and "sm_121a" in proc.stdout
    assert "verify no-vmm: passed" in proc.stdout
    no_emulation_here()


def test_with_qemu_registered_the_arm64_server_reports_the_commit(cross_project, sm121_build):
    """Where a binfmt handler exists, verify also runs the arm64 llama-server --version (emulated); and the
    sm_121 image's host code, run, sees char as the cross g++ does in its CUDA half too."""
    no_emulation_here()
    assert sm121_build.returncode == 0, sm121_build.stderr[-2000:]
    args = ("build", "--arch", "cpu", "--platform", "linux/arm64", "--tag", "qemu")
    try:
        with qemu.registered("aarch64") as handler:
            proc = run_cli(cross_project["root"], *args, env=cross_project["env"], timeout=1800)
            assert qemu.handler_for("aarch64") == handler
            probe = subprocess.run(["docker", "run", "--rm", "--platform", "linux/arm64", SM121, "--char-probe"],
                                   capture_output=True, text=True, timeout=300)
    except qemu.QemuUnavailable as exc:
        pytest.fail(f"QEMU cannot be registered on this machine: {exc}")
    # cudafe++ ran here (signed char); told the target's, its host half chose the unsigned template
    assert "char-probe host: (char)200=200 is_signed=0 template=unsigned" in probe.stdout, probe.stdout + probe.stderr
    assert "char-probe cuda-host: (char)200=200 is_signed=0 template=unsigned" in probe.stdout, probe.stdout
    assert probe.returncode == 0 and "char-probe: agree" in probe.stdout
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    version = next(line for line in proc.stdout.splitlines() if line.startswith("verify version:"))
    assert version.startswith("verify version: passed") and cross_project["commit"][:7] in version, version
    no_emulation_here()  # removed again: the other tests prove "no emulation"
    # and without the handler the same image's version check is skipped, saying why
    again = run_cli(cross_project["root"], *args, env=cross_project["env"], timeout=1800)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "verify version: skipped" in again.stdout and "binfmt" in again.stdout
