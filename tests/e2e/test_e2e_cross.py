"""The real llama.cpp tree built for linux/arm64 on this amd64 machine by cross-compiling (marker e2e).

No binfmt handler is registered here, so no arm64 program can have run at any step: the build passing
is the proof. Every default, the CPU level `all` included: the tree declares upstream's armv9.2 (SME)
variants, so the build stage installs GCC 14's cross compilers (the base is Debian 13, whose archive has
them, as Ubuntu 24.04's does) and builds every variant; verify counts each one's SVE and SME code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import docker
import pytest

import qemu
from quiet import compiling
from buildkit.plan.platforms import ARCHES
from buildkit.verify import cpucode
from buildkit.verify.elfdeps import read_elf
from cliutil import buildkit_env, write_project
from forkrepo import make_fork_repo
from realsource import ensure_llama_cpp_tree

pytestmark = [pytest.mark.e2e, pytest.mark.docker]


def test_real_llama_cpp_cross_compiles_for_arm64_with_every_default(tmp_path, git_daemon,
                                                                     trixie_multiarch_base_image):
    assert qemu.handler_for("aarch64") is None, "an aarch64 binfmt handler is registered: this would prove nothing"
    cache = Path(os.environ.get("LLAMA_BUILDKIT_TEST_CACHE", Path.home() / ".cache" / "llama-buildkit-tests"))
    tree = ensure_llama_cpp_tree(cache)
    repo = tmp_path / "buun-llama-cpp"
    _, fork_commit = make_fork_repo(repo, tree, fork_message="fork: DFlash speculative decoding")
    project = write_project(tmp_path / "project",
                            source={"url": git_daemon.url_for(repo), "commit": fork_commit},
                            image={"name": "buildkit-test/llama-cpp-arm64"},
                            build={"arch": "cpu", "platform": "linux/arm64", "jobs": 2, "progress": "plain"},
                            base={"os_image": trixie_multiarch_base_image})
    env = buildkit_env()
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(tmp_path / "cache")
    tag = f"e2e-{uuid.uuid4().hex[:8]}"
    # --no-cache: every step runs in this test, on this machine without a handler, even on an engine
    # that holds the layers from an earlier run (the compile too: a clean build's ccache mount is its own)
    with compiling("the arm64 cross build"):  # the bench gate's test measures after it, not beside it
        proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "build", "--no-cache", "--tag", tag],
                              cwd=project, env=env, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "aarch64-linux-gnu-g++-14" in proc.stderr  # CMake's compiler: GCC 14's cross g++, on this machine
    # verify judged every variant the tree declares for arm64 Linux, the SME ones with their SME count
    code = next(line for line in proc.stdout.splitlines() if line.startswith("verify cpu-code: passed"))
    for variant in ("armv8.0_1", "armv8.2_1", "armv8.6_1", "armv9.2_1", "armv9.2_2"):
        assert f"{variant} (" in code, code
    assert re.search(r"armv9\.2_1 \(sme\): [^|]*sve \d+[^|]*sme \d+", code), code

    client = docker.from_env()
    ref = f"buildkit-test/llama-cpp-arm64:{tag}"
    try:
        assert client.images.get(ref).attrs["Architecture"] == "arm64"
        out = tmp_path / "app"
        out.mkdir()
        container = client.containers.create(ref)
        try:
            with (tmp_path / "app.tar").open("wb") as fh:
                for chunk in container.get_archive("/app")[0]:
                    fh.write(chunk)
        finally:
            container.remove()
        subprocess.run(["tar", "-xf", str(tmp_path / "app.tar"), "-C", str(out)], check=True)
        elves = [p for p in (out / "app").rglob("*") if p.is_file() and p.read_bytes()[:4] == b"\x7fELF"]
        names = {p.name for p in elves}
        assert "llama-server" in names and "libllama.so" in {p.name for p in (out / "app" / "lib").iterdir()}
        assert {"libggml-cpu-armv8.0_1.so", "libggml-cpu-armv9.2_1.so", "libggml-cpu-armv9.2_2.so"} <= names
        assert {read_elf(p).machine for p in elves} == {ARCHES["arm64"].elf_machine}, names
        # the armv9.2 backend holds SVE code, the armv8.0 one none (read with the cross objdump, not run)
        objdump = cpucode.find_objdump("arm64")
        assert objdump, "no objdump for arm64 code (binutils-aarch64-linux-gnu; make setup installs it)"
        backend = {p.name: p for p in elves}
        assert cpucode.disassembly_counts(objdump, backend["libggml-cpu-armv9.2_1.so"]).get("sve", 0) > 0
        assert cpucode.disassembly_counts(objdump, backend["libggml-cpu-armv8.0_1.so"]).get("sve", 0) == 0
    finally:
        for name in (ref, "buildkit-test/llama-cpp-arm64:cpu-arm64",
                     f"buildkit-test/llama-cpp-arm64:sha-{fork_commit[:7]}-cpu-arm64"):
            try:
                client.images.remove(name, force=True)
            except docker.errors.ImageNotFound:
                pass
