"""CPU levels on the real engine with the example fork (marker docker; seconds per build).

The example fork mirrors ggml's CPU backend CMake (SOURCE_DATE_EPOCH turns the instruction-set
defaults off; GGML_BACKEND_DL modules chosen by score; upstream's x86 variant list), so these
check buildkit's side fast: the default image carries every variant and loads the best for this
machine, a single level carries one backend with its code, and a backend without the code its
level asked for fails the build and leaves no image and no lock entry.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from buildkit.verify.cpuhost import host_cpu_flags
from forkrepo import make_fork_repo
from cliutil import buildkit_env, write_project

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-fork"
IMAGE = "buildkit-test/tiny-cpu-levels"


@pytest.fixture(scope="module")
def project(tmp_path_factory, git_daemon, debian_base_image, docker_engine):
    repo = tmp_path_factory.mktemp("upstream") / "tiny-fork"
    _, fork_sha = make_fork_repo(repo, EXAMPLE)
    root = tmp_path_factory.mktemp("project")
    write_project(root,
                  source={"url": git_daemon.url_for(repo), "commit": fork_sha},
                  image={"name": IMAGE},
                  build={"arch": "cpu", "jobs": 2, "progress": "plain"},
                  base={"os_image": debian_base_image})
    env = buildkit_env()
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(tmp_path_factory.getbasetemp() / "cpu-levels-cache")
    env["PYTHONPATH"] = str(ROOT)
    yield {"root": root, "env": env}
    client = docker.from_env()
    for image in client.images.list(name=IMAGE):
        for tag in image.tags:
            client.images.remove(tag, force=True)


def buildkit(project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *args], cwd=project["root"], env=project["env"],
                          capture_output=True, text=True, timeout=1800)


def lib_files(ref: str, tmp_path: Path) -> dict[str, Path]:
    client = docker.from_env()
    container = client.containers.create(ref)
    try:
        stream, _ = container.get_archive("/app/lib")
        (tmp_path / "lib.tar").write_bytes(b"".join(stream))
    finally:
        container.remove()
    subprocess.run(["tar", "-xf", str(tmp_path / "lib.tar"), "-C", str(tmp_path)], check=True)
    return {p.name: p for p in (tmp_path / "lib").glob("libggml-cpu*") if not p.is_symlink()}


def count(objdump_pattern: str, path: Path) -> int:
    out = subprocess.run(["objdump", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return out.count(objdump_pattern)


def test_default_image_holds_every_variant_and_loads_the_best_here(project, tmp_path):
    proc = buildkit(project, "build")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for check in ("cpu-backends", "cpu-code"):
        assert f"verify {check}: passed" in proc.stdout, proc.stdout[-3000:]
    libs = lib_files(f"{IMAGE}:cpu", tmp_path)
    assert {"libggml-cpu-x64.so", "libggml-cpu-haswell.so", "libggml-cpu-skylakex.so",
            "libggml-cpu-sapphirerapids.so"} <= set(libs) and "libggml-cpu.so" not in libs
    assert count("%ymm", libs["libggml-cpu-x64.so"]) == 0
    assert count("%ymm", libs["libggml-cpu-haswell.so"]) > 0 and count("%zmm", libs["libggml-cpu-haswell.so"]) == 0
    assert count("%zmm", libs["libggml-cpu-skylakex.so"]) > 0
    out = docker.from_env().containers.run(f"{IMAGE}:cpu", ["--list-devices"], remove=True, stderr=True).decode()
    if "avx2" in host_cpu_flags() and "avx512f" not in host_cpu_flags():
        assert "loaded CPU backend from /app/lib/libggml-cpu-haswell.so" in out, out
        assert "verify cpu-load: passed: loaded /app/lib/libggml-cpu-haswell.so" in proc.stdout
    assert "loaded CPU backend from /app/lib/libggml-cpu-" in out, out
    # verify read which variant stayed loaded from the dynamic loader's trace (verify/loadertrace.py)
    assert "verify cpu-load: passed: loaded /app/lib/libggml-cpu-" in proc.stdout, proc.stdout[-3000:]
    lock = json.loads((project["root"] / "buildkit.lock").read_text())["builds"]["cpu/server"]
    assert lock["cpu_level"] == "all" and "-DGGML_CPU_ALL_VARIANTS=ON" in lock["cmake_args"]


def test_single_level_holds_one_backend_with_its_code(project, tmp_path):
    proc = buildkit(project, "build", "--cpu-level", "x86-64-v3")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ref = f"{IMAGE}:cpu-x86-64-v3"
    libs = lib_files(ref, tmp_path)
    assert set(libs) == {"libggml-cpu.so"}
    assert count("%ymm", libs["libggml-cpu.so"]) > 0 and count("%zmm", libs["libggml-cpu.so"]) == 0
    labels = docker.from_env().images.get(ref).attrs["Config"]["Labels"]
    assert labels["org.llama-buildkit.cpu-level"] == "x86-64-v3"
    assert labels["org.llama-buildkit.variant"] == "cpu-x86-64-v3"
    entry = json.loads((project["root"] / "buildkit.lock").read_text())["builds"]["cpu-x86-64-v3/server"]
    assert entry["cpu_level"] == "x86-64-v3"


def test_a_backend_without_the_code_of_its_level_fails_the_build(project):
    """x86-64-v3 asked for, but later -D flags turn AVX off again (FMA and F16C imply it in GCC):
    verify names the library, the image is removed and the lock is left as it was."""
    lock = project["root"] / "buildkit.lock"
    before = lock.read_bytes() if lock.exists() else b""
    off = [a for f in ("AVX", "AVX2", "FMA", "F16C") for a in ("--cmake-arg", f"-DGGML_{f}=OFF")]
    proc = buildkit(project, "build", "--cpu-level", "x86-64-v3", "--tag", "nosimd", *off)
    assert proc.returncode == 1
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "cpu-code" in errors[0] and "no avx2 instructions" in errors[0], proc.stderr[-2000:]
    with pytest.raises(docker.errors.ImageNotFound):
        docker.from_env().images.get(f"{IMAGE}:nosimd")
    assert (lock.read_bytes() if lock.exists() else b"") == before


def test_a_level_named_for_a_cpu_compiles_for_it_on_any_machine(project, tmp_path):
    """--cpu-level sapphirerapids (issue 25): one libggml-cpu.so compiled with -march=sapphirerapids, whatever
    CPU builds it; verify passes (the load check only where the CPU has AMX and AVX-VNNI), and the library holds
    AVX-512 code."""
    proc = buildkit(project, "build", "--cpu-level", "sapphirerapids")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for check in ("cpu-backends", "cpu-code"):
        assert f"verify {check}: passed" in proc.stdout, proc.stdout[-3000:]
    load = next(ln for ln in proc.stdout.splitlines() if ln.startswith("verify cpu-load: "))
    if {"amx_tile", "amx_int8", "avx_vnni", "avx512_vnni"} <= host_cpu_flags():
        assert load.startswith("verify cpu-load: passed"), load
    else:
        assert load.startswith("verify cpu-load: skipped: this machine lacks"), load
    ref = f"{IMAGE}:cpu-sapphirerapids"
    libs = lib_files(ref, tmp_path)
    assert set(libs) == {"libggml-cpu.so"}
    assert count("%zmm", libs["libggml-cpu.so"]) > 0
    labels = docker.from_env().images.get(ref).attrs["Config"]["Labels"]
    assert labels["org.llama-buildkit.cpu-level"] == "sapphirerapids"
    assert "-DCMAKE_C_FLAGS=-march=sapphirerapids" in labels["org.llama-buildkit.flags"]
    entry = json.loads((project["root"] / "buildkit.lock").read_text())["builds"]["cpu-sapphirerapids/server"]
    assert entry["cpu_level"] == "sapphirerapids" and "-DCMAKE_CXX_FLAGS=-march=sapphirerapids" in entry["cmake_args"]
