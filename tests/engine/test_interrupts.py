"""Signals at each stage: Ctrl-C (SIGINT to the CLI's whole process group, as a terminal sends it), and
SIGTERM and SIGHUP to the CLI alone (`kill`, `timeout`, a CI cancel, a closed terminal). The CLI exits
128 + the signal with one line, leaves no temporary file and no process behind (the real process
table: tests/proctable.py), and the mirror, caches and lock stay usable.

Each stage is held at a controlled point by a real server or real git feature: a smart HTTP server that
holds the pack request (fetch), a git smudge filter that waits (export, which runs `git archive`), a
credential helper that waits or leaves a child behind, a registry that accepts and never answers (push,
promote), a llama-server stand-in that trickles (bench), a cache registry that BuildKit waits for (buildx).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from buildkit.release.lock import LockEntry
from buildkit.release.lockfile import LOCK_VERSION
from buildkit.source.fetch import fetch_source, mirror_dir
from cliutil import buildkit_env, default_sigint
from githttp import serve_http
from gitserver import commit_all, run_git
from hostile import HostileServer
from proctable import left_behind, marked_env

ROOT = Path(__file__).resolve().parents[2]


SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
signals = pytest.mark.parametrize("sig", SIGNALS, ids=[s.name for s in SIGNALS])


class Cli:
    """`python -m buildkit.cli ARGS` in its own session (so SIGINT to its group is Ctrl-C), its processes
    marked (tests/proctable.py)."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.out, self.err = cwd / "cli.out", cwd / "cli.err"
        mark, self.token = marked_env()
        self.proc = subprocess.Popen([sys.executable, "-m", "buildkit.cli", *args], cwd=cwd,
                                     env={**buildkit_env(), "PYTHONPATH": str(ROOT), **mark, **env},
                                     stdout=self.out.open("w"), stderr=self.err.open("w"), start_new_session=True,
                                     preexec_fn=default_sigint)

    def wait_for(self, condition, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.proc.poll() is None, f"the CLI ended before {what}: {self.err.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"no {what} within {timeout} s"
            time.sleep(0.05)

    def send(self, sig: int) -> tuple[int, str]:
        """SIGINT to the CLI's group (a terminal's Ctrl-C), the others to the CLI alone; (exit code, stderr)
        once it exited, after checking that no process it started is left."""
        if sig == signal.SIGINT:
            os.killpg(self.proc.pid, sig)
        else:
            os.kill(self.proc.pid, sig)
        code = self.proc.wait(timeout=60)
        stderr = self.err.read_text()
        assert left_behind(self.token) == [], stderr[-2000:]
        return code, stderr


def _assert_interrupted(code: int, stderr: str, sig: int = signal.SIGINT) -> None:
    assert code == 128 + sig, stderr[-2000:]
    said = "error: interrupted" + ("" if sig == signal.SIGINT else f" by {signal.Signals(sig).name}")
    assert stderr.rstrip().splitlines()[-1].startswith(said)
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


@pytest.mark.docker
@signals
def test_interrupt_during_fetch(tmp_path: Path, busybox_image, sig: int) -> None:
    bare, head = _upstream(tmp_path)
    cache = tmp_path / "cache"
    with serve_http(tmp_path, smart=True) as server:
        url = server.url_for(bare)
        server.stall_posts = True  # ls-remote answers; the pack request is held
        cli = Cli(["render", "--source", url, "--commit", "main", "--arch", "cpu", "--out", str(tmp_path / "out"),
                   "--os-image", busybox_image, "--cache-dir", str(cache)], tmp_path, {})
        cli.wait_for(server.stalled.is_set, "held pack request")
        _assert_interrupted(*cli.send(sig), sig)
        server.release.set()
        server.stall_posts = False
        _no_temp_files(cache)
        assert not (tmp_path / "out").exists()
        info = fetch_source(url, "main", head, cache)  # the same mirror, usable
    assert info.commit == head and info.build_number == 3
    history = mirror_dir(cache, url).with_name(mirror_dir(cache, url).stem + ".history.git")
    assert "promisor" not in (history / "config").read_text()


@pytest.mark.docker
@signals
def test_interrupt_during_export(tmp_path: Path, busybox_image, sig: int) -> None:
    marker = tmp_path / "exporting"
    bare, head = _upstream(tmp_path, attributes="*.txt filter=slow\n")
    cache = tmp_path / "cache"
    env = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "filter.slow.smudge",
           "GIT_CONFIG_VALUE_0": f"sh -c 'touch {marker}; sleep 120; cat'"}
    out = tmp_path / "out"
    cli = Cli(["render", "--source", str(bare), "--commit", head, "--arch", "cpu", "--out", str(out),
               "--os-image", busybox_image, "--cache-dir", str(cache)], tmp_path, env)
    cli.wait_for(marker.exists, "git archive running its filter")
    _assert_interrupted(*cli.send(sig), sig)  # git and its filter went with the signal
    assert not out.exists()  # the half-exported context is removed
    _no_temp_files(cache)
    assert fetch_source(str(bare), head, head, cache).fetched is False  # the mirror is intact


def _lock_with(tmp_path: Path, image: str, image_id: str | None) -> Path:
    entry: dict[str, Any] = {f: "x" for f in ("ref", "commit", "patch_set_sha256", "template", "template_sha256",
                              "dockerfile_sha256", "arch", "target", "platform", "tool_version", "image_digest",
                              "variant")}
    entry.update(source_url="https://example.invalid/fork.git", build_number=1, patches=[], base_images=[],
                 cuda_version=None, cuda_root=None, cmake_archs=None, no_vmm=True, cmake_args=[],
                 source_date_epoch=0, image_name=image, image_id=image_id, tags=[], variant="cpu", target="server",
                 arch="cpu", version="0.1.0", build_key="k" * 16, commit="c" * 40, platform="linux/amd64")
    defaulted = ("pushed", "labels", "exporter", "build_seconds", "cpu_level", "bench", "gpu_check", "workload",
                 "debian_packages", "patch_sha256", "build_started", "build_finished")
    assert set(entry) >= {f for f in LockEntry.__dataclass_fields__ if f not in defaulted}
    path = tmp_path / "buildkit.lock"
    path.write_text(json.dumps({"lock_version": LOCK_VERSION, "builds": {"cpu/server": entry}}, indent=2))
    return path


@pytest.mark.docker
@signals
def test_interrupt_during_push(tmp_path: Path, busybox_image, sig: int) -> None:
    import docker

    image_id = docker.from_env().images.get(busybox_image).id
    with HostileServer("silent") as registry:
        lock = _lock_with(tmp_path, f"{registry.host}/team/app", image_id)
        before = lock.read_bytes()
        cli = Cli(["push", "--arch", "cpu", "--image", f"{registry.host}/team/app", "--lock", str(lock)],
                  tmp_path, {"DOCKER_CONFIG": str(tmp_path / "docker-config")})
        cli.wait_for(lambda: registry.connections > 0, "a connection to the registry")
        _assert_interrupted(*cli.send(sig), sig)
    assert lock.read_bytes() == before  # the lock is untouched
    _no_temp_files(tmp_path)


@signals
def test_interrupt_during_bench(tmp_path: Path, sig: int) -> None:
    lock = tmp_path / "buildkit.lock"
    _lock_with(tmp_path, "buildkit-test/app", "sha256:" + "0" * 64)
    before = lock.read_bytes()
    with HostileServer("trickle_body") as server:
        cli = Cli(["bench", "--url", server.url, "--timeout", "300", "--runs", "1", "--attach-lock",
                   "--lock-entry", "cpu/server", "--lock", str(lock)], tmp_path, {})
        cli.wait_for(lambda: server.connections > 0, "the benchmark request")
        _assert_interrupted(*cli.send(sig), sig)
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
    _assert_interrupted(*cli.send(signal.SIGINT))
    assert not lock.exists()
    # the build context went with it (the engine-turn lock files stay: they are shared, by design)
    assert [p.name for p in temp.iterdir()
            if p.name not in ("llama-buildkit-buildx.lock", "llama-buildkit-buildx.lock.d")] == []
    tags = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", image],
                          capture_output=True, text=True, check=True).stdout.split()
    assert tags == []
    _no_temp_files(tmp_path / "cache")


def _credential_helper(tmp_path: Path, body: str) -> dict[str, str]:
    """DOCKER_CONFIG naming credential helper `held` (docker-credential-held, a shell script: body)."""
    bindir, config = tmp_path / "bin", tmp_path / "docker-config"
    bindir.mkdir()
    config.mkdir()
    helper = bindir / "docker-credential-held"
    helper.write_text("#!/bin/sh\n" + body)
    helper.chmod(0o755)
    (config / "config.json").write_text(json.dumps({"credsStore": "held"}))
    return {"DOCKER_CONFIG": str(config), "PATH": f"{bindir}:{os.environ['PATH']}"}


@signals
@pytest.mark.parametrize("helper", ["waits", "answers"])
def test_interrupt_with_a_credential_helper(tmp_path: Path, sig: int, helper: str) -> None:
    """A helper that starts a child of its own and then waits (the signal comes while buildkit waits for
    it), or answers and leaves that child running (the signal comes while the registry is asked): no
    helper and no child of it outlives buildkit."""
    asked = tmp_path / "asked"
    then = f"touch {asked}; sleep 300\n" if helper == "waits" else \
        'echo \'{"ServerURL": "r", "Username": "u", "Secret": "s"}\'\n'
    env = _credential_helper(tmp_path, f"cat > /dev/null\nsleep 300 > /dev/null 2>&1 &\n{then}")
    with HostileServer("silent") as registry:
        cli = Cli(["promote", "nightly-cpu", "--release", "1.0.0", "--image", f"{registry.host}/team/app"],
                  tmp_path, env)
        cli.wait_for(asked.exists if helper == "waits" else lambda: registry.connections > 0,
                     "the credential helper" if helper == "waits" else "a connection to the registry")
        _assert_interrupted(*cli.send(sig), sig)


class _CacheRegistry(HostileServer):
    """A cache registry BuildKit waits for: a TLS hello is answered as a plain HTTP server answers it, so
    BuildKit asks again over http:// (127.0.0.1 is an insecure registry to dockerd), and that request is
    held."""

    def __init__(self) -> None:
        super().__init__("silent")
        self.held = threading.Event()

    def _serve(self, client) -> None:
        try:
            first = client.recv(65536)
            if first[:1] == b"\x16":  # a TLS record: a handshake
                client.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")
                client.close()
                return
            self.held.set()
            self._stop.wait()
        except OSError:
            pass


@pytest.mark.docker
@signals
def test_interrupt_during_buildx(tmp_path: Path, busybox_image, sig: int) -> None:
    """buildx held by BuildKit importing a cache (before any step runs, so the smallest base image will
    do): buildx and everything in its process group go with the signal; no image, lock or context stays."""
    work = tmp_path / "work"
    run_git(tmp_path, "init", "-q", "-b", "main", work.name)
    (work / "CMakeLists.txt").write_text("project(held C)\n")
    head = commit_all(work, "held", 1_700_000_000)
    temp = tmp_path / "tmp"
    temp.mkdir()
    lock, image = tmp_path / "buildkit.lock", "buildkit-test/interrupted-buildx"
    with _CacheRegistry() as cache:
        cli = Cli(["build", "--source", str(work), "--commit", head, "--arch", "cpu", "--os-image", busybox_image,
                   "--image", image, "--cache-dir", str(tmp_path / "cache"), "--lock", str(lock), "--progress",
                   "plain", "--no-verify", "--no-preflight", "--cache-from", f"type=registry,ref={cache.host}/c"],
                  tmp_path, {"TMPDIR": str(temp), "LLAMA_BUILDKIT_ENGINE_LOCK": str(tmp_path / "engine.lock")})
        cli.wait_for(cache.held.is_set, "BuildKit asking the cache registry", 300)
        _assert_interrupted(*cli.send(sig), sig)
    assert not lock.exists() and list(temp.iterdir()) == []
    tags = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", image],
                          capture_output=True, text=True, check=True).stdout.split()
    assert tags == []
