"""The real process table (/proc) for signal tests: a CLI started with `marked_env()` passes the mark on
to every process it starts (git and its helpers, credential helpers, docker, buildx), and
`left_behind(token)` lists those of them still alive, wherever they are: in the CLI's process group or
in one of their own."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

MARK = "SIGNAL_TEST_MARK"


def marked_env() -> tuple[dict[str, str], str]:
    """({MARK: token}, token) for one CLI run."""
    token = uuid.uuid4().hex
    return {MARK: token}, token


def left_behind(token: str) -> list[str]:
    """'pid command line' of every live (not zombie) process whose environment carries the mark."""
    needle = f"{MARK}={token}".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if state != b"Z" and needle in environ.split(b"\0"):
            found.append(f"{pid} {cmdline.replace(bytes(1), b' ').decode(errors='replace').strip()}")
    return found
