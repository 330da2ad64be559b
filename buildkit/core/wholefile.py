"""Every file buildkit writes is replaced whole: the new bytes go to a temporary file in the same folder
(named `.buildkit-tmp-<pid>-<random>-<name>`), are flushed to the disk (fsync), and the temporary is
renamed over the file. A crash, a `kill -9` or a full disk at any instant leaves the file either as it
was or as it is meant to be, never half; a failed write removes its temporary.

A temporary that a killed run left behind (nothing can remove it then) is removed by the next write
into the same folder: a writer holds an exclusive flock on its temporary for as long as it writes, so a
temporary whose lock is free and whose writer (the pid in its name) is gone, or is this very process,
is stale. A temporary of a live process other than this one is left alone (it may be between creating
the file and locking it). Scratch folders (scratch_dir) are named, held and swept the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from buildkit.core.errors import BuildkitError
from buildkit.core.treewalk import remove_tree

PREFIX = ".buildkit-tmp-"
_NAME = re.compile(re.escape(PREFIX) + r"(\d{1,12})-[0-9a-f]{8}-")
_MINE: set[str] = set()  # temporaries this process is writing now (another thread's write: not stale)
_MINE_LOCK = threading.Lock()
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


class NotAFile(OSError):
    """The path names something that is not a regular file (a FIFO, a device, a folder): buildkit does
    not write into it (a FIFO would block until a reader came) and does not replace it."""


def kind_of(mode: int) -> str:
    """What a file of this st_mode is, in words ("a FIFO"); "a file" for a regular file."""
    return "a file" if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _alive(pid: int) -> bool:
    if not 0 < pid < 1 << 22:  # Linux's pid_max is at most 2**22; 0 would name our own process group
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, as another user
        return True
    return True


def _stale(folder: Path, name: str, pid: int) -> bool:
    if pid != os.getpid() and _alive(pid):
        return False
    with _MINE_LOCK:
        if name in _MINE:
            return False
    try:
        fd = os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a writer: BlockingIOError
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _remove_quietly(path: Path) -> None:
    remove_tree(path, ignore_errors=True)


def sweep(folder: Path | str, *, prefix: str = PREFIX, remove: Callable[[Path], None] = remove_tree) -> list[str]:
    """Remove the temporaries that killed writes left in folder (names `<prefix><pid>-<random>-...`, with
    `remove`); the names removed (nothing raised: what cannot go stays)."""
    folder = Path(folder)
    pattern = _NAME if prefix == PREFIX else re.compile(re.escape(prefix) + r"(\d{1,12})-[0-9a-f]{8}-")
    removed = []
    try:
        entries = [e.name for e in os.scandir(folder) if e.name.startswith(prefix)]
    except OSError:
        return []
    for name in entries:
        match = pattern.match(name)
        if match and _stale(folder, name, int(match.group(1))):
            try:
                remove(folder / name)
                removed.append(name)
            except (OSError, BuildkitError):
                pass
    return removed


@contextlib.contextmanager
def scratch_dir(parent: Path | str, name: str, *, prefix: str = PREFIX,
                remove: Callable[[Path], None] = _remove_quietly) -> Iterator[Path]:
    """A scratch folder `<prefix><pid>-<random>-<name>` in parent (which must exist; the prefix
    `.buildkit-tmp-` unless given), flocked while in use and removed after with `remove` (unless it was
    renamed into place); the ones killed runs left in parent are swept first, as write_whole sweeps files.
    A remove that raises (a folder that must not be removed yet) raises from the block's end."""
    parent = Path(parent)
    sweep(parent, prefix=prefix, remove=remove)
    folder_name = f"{prefix}{os.getpid()}-{secrets.token_hex(4)}-{name[:100]}"
    folder = parent / folder_name
    with _MINE_LOCK:
        _MINE.add(folder_name)
    try:
        os.mkdir(folder, 0o700)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield folder
        finally:
            os.close(fd)
            remove(folder)
    finally:
        with _MINE_LOCK:
            _MINE.discard(folder_name)


def _target(path: Path) -> tuple[Path, int | None]:
    """The file to replace (a symlink's target: the link stays, as `open(path, "w")` kept it) and the
    mode to give the new file (the old one's; None: the default, 0666 less the umask)."""
    real = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return real, None
    if not stat.S_ISREG(st.st_mode):
        raise NotAFile(f"it is {kind_of(st.st_mode)}, not a file: buildkit replaces the files it writes "
                       "whole (a temporary beside it, renamed over it); name a regular file")
    return real, stat.S_IMODE(st.st_mode)


def write_whole(path: Path | str, data: str | bytes, *, private: bool = False, mode: int | None = None,
                replace: bool = True) -> None:
    """Replace path with data (text is written as UTF-8), whole or not at all. Raises OSError: the
    file is then as it was, and no temporary is left. private: mode 0600 from its creation (a secret key);
    mode: this mode whatever the umask; replace=False: FileExistsError when path exists (or is a link),
    checked by the link that puts the file in place, so a file made meanwhile is never replaced either."""
    path = Path(path)
    if not replace:
        target, old = path, None
    else:
        target, old = _target(path)
    mode = 0o600 if private else mode if mode is not None else old
    folder = target.parent
    sweep(folder)
    name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}-{target.name[:100]}"
    tmp = folder / name
    body = data.encode("utf-8") if isinstance(data, str) else data
    with _MINE_LOCK:
        _MINE.add(name)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600 if private else 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            if replace:
                os.replace(tmp, target)
            else:  # link(2) never replaces: EEXIST for a file, a link or a folder already there
                os.link(tmp, target, follow_symlinks=False)
                os.unlink(tmp)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        finally:
            os.close(fd)
    finally:
        with _MINE_LOCK:
            _MINE.discard(name)
    _sync_folder(folder)


def _sync_folder(folder: Path) -> None:
    """The rename itself on the disk (best effort: not every file system lets a folder be fsynced)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def append_text(path: Path | str, text: str) -> None:
    """Append text to path, a file another program reads (GitHub's $GITHUB_OUTPUT, $GITHUB_STEP_SUMMARY:
    appending is their protocol, so the file is not replaced; what was there stays whatever happens).
    A FIFO or device is refused at once instead of blocking until a reader comes. Raises OSError."""
    def refuse(mode: int) -> None:
        if not stat.S_ISREG(mode):
            raise NotAFile(f"it is {kind_of(mode)}, not a file")

    try:
        refuse(os.stat(path).st_mode)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    try:
        refuse(os.fstat(fd).st_mode)
        view = memoryview(text.encode("utf-8"))
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
