"""The processes buildkit starts (git, credential helpers, buildx): each in a process group of its own
(a new session), remembered while it runs, and stopped with everything in its group.

* `start(argv, ...)` (or `adopt(proc)` for one started elsewhere: GitPython) registers the group;
* `finish(proc)` after the command ended: whatever it left in its group (a helper's background
  child) is stopped, and the group forgotten;
* `stop(proc)` when buildkit gives up on it (a deadline, an error, a signal): SIGTERM to the group,
  SIGKILL to what is left after `grace` seconds;
* `stop_all()`, which the CLI runs on every way out, stops every group still registered (builds that
  other threads were running when the signal came).

A process that starts a session of its own (a daemon) leaves the group, and is not ours to stop.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

STOP_GRACE = 3.0  # seconds between SIGTERM (git removes its temporary files, buildx cancels) and SIGKILL
KILL_WAIT = 5.0  # seconds to wait for a SIGKILLed group to be gone

_lock = threading.Lock()
_groups: dict[int, subprocess.Popen[Any]] = {}  # pgid (= the leader's pid) -> the leader


def group_size(pgid: int) -> int:
    """Live (not zombie) processes in process group pgid (Linux /proc)."""
    count = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    wanted = str(pgid).encode()
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == wanted and fields[0] != b"Z":
            count += 1
    return count


def start(argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
    """subprocess.Popen(argv, **popen) in a new session (its own process group), registered."""
    return adopt(subprocess.Popen(list(argv), start_new_session=True, **popen))


def adopt(proc: subprocess.Popen[Any]) -> subprocess.Popen[Any]:
    """Register proc, which was started in a new session."""
    with _lock:
        _groups[proc.pid] = proc
    return proc


def _wait_empty(pgid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while group_size(pgid) > 0:
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)
    return True


def stop(proc: subprocess.Popen[Any], grace: float = STOP_GRACE) -> None:
    """SIGTERM proc's group, SIGKILL whatever is left after grace seconds; proc is reaped."""
    pgid = proc.pid
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, KILL_WAIT)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            break
        if _wait_empty(pgid, wait):
            break
    try:
        proc.wait(timeout=KILL_WAIT)
    except subprocess.TimeoutExpired:
        pass  # a process SIGKILL did not end is the kernel's to reap; we do not wait longer
    with _lock:
        _groups.pop(pgid, None)


def finish(proc: subprocess.Popen[Any]) -> None:
    """proc has ended: stop what it left running in its group, and forget the group."""
    if proc.poll() is not None and group_size(proc.pid) == 0:
        with _lock:
            _groups.pop(proc.pid, None)
        return
    stop(proc)


def stop_all() -> None:
    """Stop every group still registered (the CLI's last step, whatever ended the command)."""
    with _lock:
        procs = list(_groups.values())
    for proc in procs:
        stop(proc)
