"""The one runner of engine build commands: streamed output, and always the engine turn.

The BuildKit of Docker Engine 26.1 (v0.13) can panic in Job.walkProvenance, taking dockerd
down, when a --no-cache build runs while another build solves the same steps (seen twice on
this machine; fixed upstream by moby/buildkit#5606). Two builds can only solve a step in common
when their stages start from a common image, so the turn is taken per image a build starts from
(`starting_images`: its Dockerfile's FROM images and `--from` names): a flock on one file per
image, in a folder beside $LLAMA_BUILDKIT_ENGINE_LOCK (else $TMPDIR/llama-buildkit-buildx.lock),
shared for a build and exclusive for a --no-cache one. So a --no-cache build waits only for the
builds from its own base images (and they for it); a build from another base runs beside it. A
build whose images are not known takes that file itself, as every build once did (exclusive
with --no-cache), and each keyed build holds it shared. Builds started by other tools do not
take part. Within one process the turn is re-entrant: a bake that retries its targets in parallel
threads holds it once for all of them.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypedDict

from buildkit.core import children
from buildkit.core.errors import BuildError
from buildkit.core.filelock import file_lock
from buildkit.engine.api import Finished, OutStream
from buildkit.engine.baseimages import LAYOUT_CONTEXT_PREFIX, PINNED_REPOSITORY

ENGINE_LOCK_ENV = "LLAMA_BUILDKIT_ENGINE_LOCK"
BUILDX_GRACE = 10.0  # seconds buildx gets to cancel its build (about 3 here) before SIGKILL


def engine_lock_path() -> Path:
    return Path(os.environ.get(ENGINE_LOCK_ENV) or Path(tempfile.gettempdir()) / "llama-buildkit-buildx.lock")


_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", re.I | re.M)
_FROM_NAME = re.compile(r"--(?:mount=\S*?)?from=([^\s,]+)")
# an image named by digest, whichever way baseimages.BaseSource.from_ref names it: ref@sha256:<hex>,
# the pinned 127.0.0.1:1/llama-buildkit/base:<hex>, or the layout context local-base-<hex 12>
_DIGEST = re.compile(rf"(?:@sha256:|^{re.escape(PINNED_REPOSITORY)}:|^{LAYOUT_CONTEXT_PREFIX})([0-9a-f]{{12}})")


def _image_key(ref: str) -> str:
    """One name per image: its digest's first 12 hex digits where the ref holds them, else the ref."""
    found = _DIGEST.search(ref)
    return f"sha256:{found.group(1)}" if found else ref


def starting_images(dockerfile: str) -> frozenset[str]:
    """The images a Dockerfile's stages start from or copy from: its FROM images and the `--from`
    names that are not its own stages (named contexts included), without `scratch`; an image named
    by digest as `sha256:<12 hex>`, so that two names of one image are one."""
    stages: set[str] = set()
    images: set[str] = set()
    for match in _FROM.finditer(dockerfile):
        ref, name = match.group(1), match.group(2)
        if ref not in stages and ref.lower() != "scratch":
            images.add(_image_key(ref))
        if name:
            stages.add(name)
    images.update(_image_key(n) for n in _FROM_NAME.findall(dockerfile) if n not in stages and not n.isdigit())
    return frozenset(images)


def dockerfile_images(path: Path) -> frozenset[str] | None:
    """starting_images of the Dockerfile at path; None when it cannot be read or names none."""
    try:
        return starting_images(path.read_text()) or None
    except (OSError, UnicodeDecodeError):
        return None


class _Turn(TypedDict):
    images: frozenset[str] | None  # None: the whole engine
    exclusive: bool


_held_lock = threading.Lock()
_held: list[_Turn] = []  # the turns this process holds, outermost first


def _covered(images: frozenset[str] | None, exclusive: bool) -> bool:
    """Whether a turn this process holds covers this one. A turn without images inside another is
    that one's own work (a bake's retries); with images, a held turn must hold them all, as strongly."""
    for held in _held:
        strong = held["exclusive"] or not exclusive
        if held["images"] is None and held["exclusive"]:
            return True
        if strong and (images is None or (held["images"] is not None and images <= held["images"])):
            return True
    return False


def image_lock_path(image: str) -> Path:
    path = engine_lock_path()
    return path.with_name(path.name + ".d") / (hashlib.sha256(image.encode()).hexdigest()[:24] + ".lock")


@contextmanager
def engine_turn(exclusive: bool, stream: OutStream | None = None,
                images: frozenset[str] | None = None) -> Iterator[None]:
    """Builds share the engine; a --no-cache build takes it alone, or, given the images it starts
    from, alone with those images only (see the module docstring)."""
    turn: _Turn = {"images": images or None, "exclusive": exclusive}
    with _held_lock:
        covered = _covered(turn["images"], exclusive)
        if covered:
            _held.append(turn)
    if covered:
        try:
            yield
        finally:
            with _held_lock:
                _held.remove(turn)
        return
    if turn["images"] is None:
        what = "other buildkit builds to finish (a --no-cache build runs alone)" if exclusive else \
            "a --no-cache build to finish"
    else:
        what = ("other buildkit builds from the same base image to finish (a --no-cache build runs alone with "
                "its base images)") if exclusive else "a --no-cache build from the same base image to finish"
    said: list[bool] = []

    def say_waiting() -> None:
        if not said:
            said.append(True)
            (stream or sys.stderr).write(f"buildkit: waiting for {what}\n")

    with ExitStack() as locks:
        try:
            if turn["images"] is None:
                locks.enter_context(file_lock(engine_lock_path(), shared=not exclusive, on_wait=say_waiting))
            else:
                locks.enter_context(file_lock(engine_lock_path(), shared=True, on_wait=say_waiting))
                for image in sorted(turn["images"]):  # one order for every process: no deadlock
                    locks.enter_context(file_lock(image_lock_path(image), shared=not exclusive,
                                                  on_wait=say_waiting))
        except OSError:
            locks.close()  # no lock file possible (read-only tmp): build anyway
        with _held_lock:
            _held.append(turn)
        try:
            yield
        finally:
            with _held_lock:
                _held.remove(turn)


def wants_tty(progress: str, stream: OutStream) -> bool:
    """buildx draws its own TTY display when its output is a terminal and --progress is auto or tty."""
    try:
        return progress in ("auto", "tty") and stream.isatty()
    except (AttributeError, ValueError):
        return False


def _lines_from_pty(proc: subprocess.Popen[bytes], master: int, stream: OutStream) -> Iterator[str]:
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


def _popen_tty(argv: list[str], stream: OutStream) -> tuple[subprocess.Popen[bytes], int]:
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    try:
        size = fcntl.ioctl(getattr(stream, "fileno", lambda: -1)(), termios.TIOCGWINSZ, b"\0" * 8)  # a sink: none
        fcntl.ioctl(slave, termios.TIOCSWINSZ, size)
    except (OSError, AttributeError, ValueError):
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    try:
        proc = children.start(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    finally:
        os.close(slave)
    return proc, master


def stream_command(argv: Sequence[str], on_line: Callable[[str], None], *, stream: OutStream, exclusive: bool = False,
                   images: frozenset[str] | None = None, tty: bool = False,
                   write_lock: threading.Lock | None = None) -> Finished:
    """Run argv in the engine turn (of images, when given). Without tty its output is piped to stream line
    by line (under write_lock when several run at once); with tty it runs on a pseudo-terminal that draws straight
    to stream. Every line (without its newline) goes to on_line. The command runs in a process group of
    its own (core/children.py), stopped whole on Ctrl-C, SIGTERM or SIGHUP."""
    argv = list(argv)
    with engine_turn(exclusive, stream, images):
        start = time.monotonic()
        master = -1
        proc: subprocess.Popen[Any]  # bytes from the pty, text from the pipe
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
