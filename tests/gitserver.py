"""Real git for tests: build upstream repositories and serve them with `git daemon` on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

GIT_DAEMON = "/usr/lib/git-core/git-daemon"


def run_git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run git in cwd with a fixed identity; return stdout stripped."""
    full_env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid", **(env or {})}
    done = subprocess.run(["git", *args], cwd=cwd, env=full_env, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def commit_all(repo: Path, message: str, epoch: int) -> str:
    """Commit everything in repo's work tree at a fixed time (author an hour before the committer)."""
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-q", "--allow-empty", "-m", message,
            env={"GIT_AUTHOR_DATE": f"@{epoch - 3600} +0000", "GIT_COMMITTER_DATE": f"@{epoch} +0000"})
    return run_git(repo, "rev-parse", "HEAD")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class GitDaemon:
    """A running `git daemon`; every repository under root is served at url + its path below root."""

    url: str
    root: Path

    def url_for(self, repo: Path) -> str:
        return f"{self.url}/{repo.resolve().relative_to(self.root).as_posix()}"

    def __str__(self) -> str:
        return self.url


@contextmanager
def serve(root: Path, timeout: float = 10.0) -> Iterator[GitDaemon]:
    """Serve every repository under root over git:// on 127.0.0.1 until the block ends."""
    root = root.resolve()
    port = free_port()
    argv = [GIT_DAEMON, "--reuseaddr", f"--base-path={root}", "--export-all", "--listen=127.0.0.1",
            f"--port={port}", "--enable=upload-pack", "--informative-errors", str(root)]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(proc, port, timeout)
        yield GitDaemon(url=f"git://127.0.0.1:{port}", root=root)
    finally:
        proc.terminate()
        proc.wait(timeout=timeout)


def _wait_listening(proc: subprocess.Popen, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"git daemon exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"git daemon did not listen on 127.0.0.1:{port} within {timeout}s")
