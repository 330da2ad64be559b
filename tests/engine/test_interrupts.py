"""Ctrl-C at each stage: the CLI exits 130 with `error: interrupted`, leaves no temporary file and no
process behind, and the mirror, caches and lock stay usable.

Ctrl-C is simulated as the terminal sends it: SIGINT to the CLI's whole process group. Each stage is
held at a controlled point by a real server or real git feature: a smart HTTP server that holds the
pack request (fetch), a git smudge filter that waits (export, which runs `git archive`), a registry
that accepts and never answers (push), a llama-server stand-in that trickles (bench).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from buildkit.release.lock import LOCK_VERSION, LockEntry
from buildkit.source.fetch import fetch_source, mirror_dir
from cliutil import buildkit_env, default_sigint
from githttp import serve_http
from gitserver import commit_all, run_git
from hostile import HostileServer

ROOT = Path(__file__).resolve().parents[2]


class Cli:
    """`python -m buildkit.cli ARGS` in its own session (so SIGINT to its group is Ctrl-C)."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.out, self.err = cwd / "cli.out", cwd / "cli.err"
        self.proc = subprocess.Popen([sys.executable, "-m", "buildkit.cli", *args], cwd=cwd,
                                     env={**buildkit_env(), "PYTHONPATH": str(ROOT), **env},
                                     stdout=self.out.open("w"), stderr=self.err.open("w"), start_new_session=True,
                                     preexec_fn=default_sigint)

    def wait_for(self, condition, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.proc.poll() is None, f"the CLI ended before {what}: {self.err.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"no {what} within {timeout} s"
            time.sleep(0.05)

    def ctrl_c(self) -> tuple[int, str]:
        os.killpg(self.proc.pid, signal.SIGINT)
        code = self.proc.wait(timeout=60)
        return code, self.err.read_text()


def _assert_interrupted(code: int, stderr: str) -> None:
    assert code == 130, stderr[-2000:]
    assert stderr.rstrip().splitlines()[-1].startswith("error: interrupted")
    assert "Traceback" not in stderr


def _no_temp_files(*roots: Path) -> None:
    leftovers = []
    for root in roots:
        for path in root.rglob("*"):
            name = path.name
            if (name.endswith((".tmp", ".packs", ".probe", ".part")) or name.startswith(("tmp_pack_", "tmp_idx_"))
                    or name.endswith(".lock") and path.parent.name == "refs"
                    or name.startswith(("buildkit-context-", "buildkit-image-", "render-"))):
                leftovers.append(str(path))
    assert leftovers == []


def _upstream(tmp: Path, attributes: str = "") -> tuple[Path, str]:
    work = tmp / "work"
    run_git(tmp, "init", "-q", "-b", "main", work.name)
    if attributes:
        (work / ".gitattributes").write_text(attributes)
    for i in range(3):
        (work / f"f{i}.txt").write_text(f"{i}\n" * 100)
        head = commit_all(work, f"c{i}", 1_700_000_000 + i)
    bare = tmp / "fork.git"
    run_git(tmp, "clone", "-q", "--bare", str(work), str(bare))
    run_git(bare, "config", "uploadpack.allowFilter", "true")
    return bare, head


def test_interrupt_during_fetch(tmp_path: Path) -> None:
    bare, head = _upstream(tmp_path)
    cache = tmp_path / "cache"
    with serve_http(tmp_path, smart=True) as server:
        url = server.url_for(bare)
        server.stall_posts = True  # ls-remote answers; the pack request is held
        cli = Cli(["render", "--source", url, "--commit", "main", "--arch", "cpu", "--out", str(tmp_path / "out"),
                   "--os-image", "buildkit-test/debian:bookworm", "--cache-dir", str(cache)], tmp_path, {})
        cli.wait_for(server.stalled.is_set, "held pack request")
        _assert_interrupted(*cli.ctrl_c())
        server.release.set()
        server.stall_posts = False
        _no_temp_files(cache)
        assert not (tmp_path / "out").exists()
        info = fetch_source(url, "main", head, cache)  # the same mirror, usable
    assert info.commit == head and info.build_number == 3
    history = mirror_dir(cache, url).with_name(mirror_dir(cache, url).stem + ".history.git")
    assert "promisor" not in (history / "config").read_text()


def test_interrupt_during_export(tmp_path: Path) -> None:
    marker = tmp_path / "exporting"
    bare, head = _upstream(tmp_path, attributes="*.txt filter=slow\n")
    cache = tmp_path / "cache"
    env = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "filter.slow.smudge",
           "GIT_CONFIG_VALUE_0": f"sh -c 'touch {marker}; sleep 120; cat'"}
    out = tmp_path / "out"
    cli = Cli(["render", "--source", str(bare), "--commit", head, "--arch", "cpu", "--out", str(out),
               "--os-image", "buildkit-test/debian:bookworm", "--cache-dir", str(cache)], tmp_path, env)
    cli.wait_for(marker.exists, "git archive running its filter")
    _assert_interrupted(*cli.ctrl_c())
    assert not out.exists()  # the half-exported context is removed
    _no_temp_files(cache)
    sleepers = subprocess.run(["pgrep", "-f", f"touch {marker}"], capture_output=True, text=True).stdout.split()
    assert sleepers == []  # git and its filter went with the interrupt
    assert fetch_source(str(bare), head, head, cache).fetched is False  # the mirror is intact


def _lock_with(tmp_path: Path, image: str, image_id: str) -> Path:
    entry = {f: "x" for f in ("ref", "commit", "patch_set_sha256", "template", "template_sha256",
                              "dockerfile_sha256", "arch", "target", "platform", "tool_version", "image_digest",
                              "variant")}
    entry.update(source_url="https://example.invalid/fork.git", build_number=1, patches=[], base_images=[],
                 cuda_version=None, cuda_root=None, cmake_archs=None, no_vmm=True, cmake_args=[],
                 source_date_epoch=0, image_name=image, image_id=image_id, tags=[], variant="cpu", target="server",
                 arch="cpu", version="0.1.0", build_key="k" * 16, commit="c" * 40)
    assert set(entry) >= {f for f in LockEntry.__dataclass_fields__ if f not in ("pushed", "labels", "exporter", "build_seconds", "cpu_level",
                                                                                  "bench")}
    path = tmp_path / "buildkit.lock"
    path.write_text(json.dumps({"lock_version": LOCK_VERSION, "builds": {"cpu/server": entry}}, indent=2))
    return path


@pytest.mark.docker
def test_interrupt_during_push(tmp_path: Path, busybox_image) -> None:
    import docker

    image_id = docker.from_env().images.get(busybox_image).id
    with HostileServer("silent") as registry:
        lock = _lock_with(tmp_path, f"{registry.host}/team/app", image_id)
        before = lock.read_bytes()
        cli = Cli(["push", "--arch", "cpu", "--image", f"{registry.host}/team/app", "--lock", str(lock)],
                  tmp_path, {"DOCKER_CONFIG": str(tmp_path / "docker-config")})
        cli.wait_for(lambda: registry.connections > 0, "a connection to the registry")
        _assert_interrupted(*cli.ctrl_c())
    assert lock.read_bytes() == before  # the lock is untouched
    _no_temp_files(tmp_path)


def test_interrupt_during_bench(tmp_path: Path) -> None:
    lock = tmp_path / "buildkit.lock"
    _lock_with(tmp_path, "buildkit-test/app", "sha256:" + "0" * 64)
    before = lock.read_bytes()
    with HostileServer("trickle_body") as server:
        cli = Cli(["bench", "--url", server.url, "--timeout", "300", "--runs", "1", "--attach-lock",
                   "--lock-entry", "cpu/server", "--lock", str(lock)], tmp_path, {})
        cli.wait_for(lambda: server.connections > 0, "the benchmark request")
        _assert_interrupted(*cli.ctrl_c())
    assert lock.read_bytes() == before
    _no_temp_files(tmp_path)


@pytest.mark.docker
def test_interrupt_during_build(tmp_path: Path, debian_base_image) -> None:
    """A fork whose CMake configure step announces itself and then waits: the build is interrupted
    inside BuildKit; no image, no lock, no build context is left."""
    work = tmp_path / "work"
    run_git(tmp_path, "init", "-q", "-b", "main", work.name)
    (work / "CMakeLists.txt").write_text('cmake_minimum_required(VERSION 3.14)\nproject(held C)\n'
                                         'message(STATUS "buildkit-interrupt-test: holding")\n'
                                         'execute_process(COMMAND sleep 300)\n')
    head = commit_all(work, "held", 1_700_000_000)
    temp = tmp_path / "tmp"
    temp.mkdir()
    lock = tmp_path / "buildkit.lock"
    image = "buildkit-test/interrupted"
    cli = Cli(["build", "--source", str(work), "--commit", head, "--arch", "cpu", "--os-image", debian_base_image,
               "--image", image, "--cache-dir", str(tmp_path / "cache"), "--lock", str(lock), "--progress", "plain",
               "--no-verify"], tmp_path, {"TMPDIR": str(temp)})
    cli.wait_for(lambda: "buildkit-interrupt-test: holding" in cli.err.read_text(), "the held CMake step", 900)
    _assert_interrupted(*cli.ctrl_c())
    assert not lock.exists()
    # the build context went with it (the engine-turn lock file stays: it is shared, by design)
    assert [p.name for p in temp.iterdir() if p.name != "llama-buildkit-buildx.lock"] == []
    tags = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", image],
                          capture_output=True, text=True, check=True).stdout.split()
    assert tags == []
    _no_temp_files(tmp_path / "cache")
