"""buildkit/core/filelock.py: exclusive and shared flocks on files and folders."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

from buildkit.core.filelock import file_lock, try_lock


def _held_elsewhere(path, shared: bool) -> bool:
    """Whether another process can NOT take the lock (exclusive when shared is False) right now."""
    mode = "fcntl.LOCK_SH" if shared else "fcntl.LOCK_EX"
    code = ("import fcntl, os, sys\n"
            f"fd = os.open({str(path)!r}, os.O_RDONLY)\n"
            f"try:\n    fcntl.flock(fd, {mode} | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(3)\n")
    return subprocess.run([sys.executable, "-c", code]).returncode == 3


def test_exclusive_lock_on_a_new_file_blocks_others_until_released(tmp_path):
    path = tmp_path / "sub" / "x.lock"
    with file_lock(path):
        assert path.exists()
        assert _held_elsewhere(path, shared=True)
    assert not _held_elsewhere(path, shared=False)


def test_shared_locks_coexist_but_exclude_a_writer(tmp_path):
    path = tmp_path / "x.lock"
    with file_lock(path, shared=True):
        assert not _held_elsewhere(path, shared=True)
        assert _held_elsewhere(path, shared=False)


def test_a_folder_is_locked_without_leaving_a_file(tmp_path):
    with file_lock(tmp_path):
        assert _held_elsewhere(tmp_path, shared=False)
    assert list(tmp_path.iterdir()) == []


def test_on_wait_is_called_only_when_the_lock_is_busy(tmp_path):
    path = tmp_path / "x.lock"
    calls = []
    with file_lock(path, on_wait=lambda: calls.append("free")):
        pass
    assert calls == []
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)  # another open file description holds it shared

    def release():
        calls.append("busy")
        os.close(fd)  # let the waiter in
    with file_lock(path, on_wait=release):
        pass
    assert calls == ["busy"]


def test_try_lock_takes_a_free_lock_and_never_waits_for_a_busy_one(tmp_path):
    path = tmp_path / "x.lock"
    with try_lock(path) as held:
        assert held and _held_elsewhere(path, shared=False)
        with try_lock(path) as again:  # the same process, another descriptor: refused, not waited for
            assert again is False
    assert not _held_elsewhere(path, shared=False)
