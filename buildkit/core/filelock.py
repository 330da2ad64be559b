"""The one advisory file lock (flock) of buildkit.

    with file_lock(path):                  # exclusive, waits
    with file_lock(path, shared=True):     # shared with other shared holders
    with file_lock(path, on_wait=say):     # say() once before waiting on a busy lock
    with try_lock(path) as held:           # exclusive if free now; held is False when it was not

path may be a folder (flocked through a read-only descriptor, so no extra file is left behind)
or a file (created when missing, parents too). The lock is released when the block ends, and by
the kernel when the process dies. OSError from opening the path reaches the caller.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def _open(path: Path) -> int:
    if path.is_dir():
        return os.open(path, os.O_RDONLY)
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)


@contextmanager
def file_lock(path: Path | str, shared: bool = False,
              on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an flock on path for the block: shared or exclusive; on_wait is called once when the
    lock is held by someone else, before waiting for it."""
    fd = _open(Path(path))
    try:
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


@contextmanager
def try_lock(path: Path | str) -> Iterator[bool]:
    """Hold an exclusive flock on path for the block if nobody holds it now (True), else hold
    nothing and do not wait (False). A second try in the same process is refused too."""
    fd = _open(Path(path))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
