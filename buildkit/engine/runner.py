"""The one runner of engine build commands: streamed output, and always the engine turn.

The BuildKit of Docker Engine 26.1 (v0.13) can panic in Job.walkProvenance, taking dockerd
down, when a --no-cache build runs while another build solves the same steps (seen twice on
this machine; fixed upstream by moby/buildkit#5606). Every build buildkit starts (build, bake,
nightly, the ccache helpers) holds a shared flock on one file ($LLAMA_BUILDKIT_ENGINE_LOCK, else
$TMPDIR/llama-buildkit-buildx.lock); a --no-cache build holds it exclusively. Builds started by
other tools do not take part. Within one process the turn is re-entrant: a bake that retries its
targets in parallel threads holds it once for all of them.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypedDict

from buildkit.core import children
from buildkit.core.errors import BuildError
from buildkit.core.filelock import file_lock
from buildkit.engine.api import Finished

ENGINE_LOCK_ENV = "LLAMA_BUILDKIT_ENGINE_LOCK"
BUILDX_GRACE = 10.0  # seconds buildx gets to cancel its build (about 3 here) before SIGKILL


def engine_lock_path() -> Path:
    return Path(os.environ.get(ENGINE_LOCK_ENV) or Path(tempfile.gettempdir()) / "llama-buildkit-buildx.lock")


class _Held(TypedDict):
    depth: int  # the turns this process holds, one within another
    exclusive: bool  # the outermost of them is exclusive


_held_lock = threading.Lock()
_held: _Held = {"depth": 0, "exclusive": False}


@contextmanager
def _reenter(exclusive: bool) -> Iterator[bool]:
    """True (and the depth counted) when this process already holds a turn that covers this one."""
    with _held_lock:
        covered = _held["depth"] > 0 and (_held["exclusive"] or not exclusive)
        if covered:
            _held["depth"] += 1
    try:
        yield covered
    finally:
        if covered:
            with _held_lock:
                _held["depth"] -= 1


@contextmanager
def engine_turn(exclusive: bool, stream=None) -> Iterator[None]:
    """Builds share the engine; a --no-cache build takes it alone (see the module docstring)."""
    with _reenter(exclusive) as covered:
        if covered:
            yield
            return
        what = "other buildkit builds to finish (a --no-cache build runs alone)" if exclusive else \
            "a --no-cache build to finish"

        def say_waiting() -> None:
            (stream or sys.stderr).write(f"buildkit: waiting for {what}\n")

        try:
            lock = file_lock(engine_lock_path(), shared=not exclusive, on_wait=say_waiting)
            lock.__enter__()
        except OSError:
            yield  # no lock file possible (read-only tmp): build anyway
            return
        with _held_lock:
            _held["depth"] += 1
            _held["exclusive"] = exclusive
        try:
            yield
        finally:
            with _held_lock:
                _held["depth"] -= 1
            lock.__exit__(None, None, None)


def wants_tty(progress: str, stream) -> bool:
    """buildx draws its own TTY display when its output is a terminal and --progress is auto or tty."""
    try:
        return progress in ("auto", "tty") and stream.isatty()
    except (AttributeError, ValueError):
        return False


def _lines_from_pty(proc: subprocess.Popen, master: int, stream) -> Iterator[str]:
    """Pass buildx's TTY output through to the terminal byte for byte; yield it as text lines."""
    out = getattr(stream, "buffer", None)
    pending = ""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            data = b""
        if not data:
            break
        if out is not None:
            out.write(data)
            out.flush()
        else:
            stream.write(data.decode("utf-8", "replace"))
        pending += data.decode("utf-8", "replace")
        *lines, pending = pending.split("\n")
        yield from lines
    if pending:
        yield pending


def _popen_tty(argv: list[str], stream) -> tuple[subprocess.Popen, int]:
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    try:
        size = fcntl.ioctl(stream.fileno(), termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, size)
    except (OSError, AttributeError, ValueError):
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    try:
        proc = children.start(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    finally:
        os.close(slave)
    return proc, master


def stream_command(argv: Sequence[str], on_line: Callable[[str], None], *, stream, exclusive: bool = False,
                   tty: bool = False, write_lock: threading.Lock | None = None) -> Finished:
    """Run argv in the engine turn. Without tty its output is piped to stream line by line (under
    write_lock when several run at once); with tty it runs on a pseudo-terminal that draws straight
    to stream. Every line (without its newline) goes to on_line. The command runs in a process group of
    its own (core/children.py), stopped whole on Ctrl-C, SIGTERM or SIGHUP."""
    argv = list(argv)
    with engine_turn(exclusive, stream):
        start = time.monotonic()
        master = -1
        try:
            if tty:
                proc, master = _popen_tty(argv, stream)
                lines: Iterator[str] = _lines_from_pty(proc, master, stream)
            else:
                proc = children.start(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      errors="replace", bufsize=1)
                assert proc.stdout is not None
                lines = iter(proc.stdout)
        except FileNotFoundError:
            raise BuildError(f"cannot run {argv[0]!r}: not found") from None
        try:
            for line in lines:
                if not tty:
                    if write_lock is not None:
                        with write_lock:
                            stream.write(line)
                    else:
                        stream.write(line)
                on_line(line.rstrip("\n"))
            code = proc.wait()
        except BaseException:  # Ctrl-C, SIGTERM, SIGHUP (core/interrupts.py), a failing on_line
            children.stop(proc, grace=BUILDX_GRACE)
            raise
        finally:
            if master >= 0:
                os.close(master)
        children.finish(proc)
        return Finished(code=code, seconds=time.monotonic() - start, tty=tty)
