"""Reading a file that buildkit does not own (the fork's source tree, a patch, a lock, a report): by
type and size before a byte is read. Only a regular file is read (a FIFO would block until a writer
came, /dev/zero never ends, a device may act on being opened): its type is checked before it is opened,
and again on what was opened; it is opened without blocking; and no more than its limit is read, so a
file over the limit (or one that grows while it is read) costs at most the limit in memory. What is not
a regular file or is over the limit is an OSError (NotAFile, TooLarge) whose text is one line naming
the file and the limit; a file of a tree is also refused when it resolves outside the tree (a symlink to
a host file).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from buildkit.core.wholefile import NotAFile as NotAFile  # re-exported: the readers catch it from here
from buildkit.core.wholefile import kind_of

MiB = 1 << 20
TREE_FILE_LIMIT = 16 * MiB  # a source file of the fork's tree (ggml/src/CMakeLists.txt is about 20 KB)


class TooLarge(OSError):
    """The file is over the limit of what buildkit reads of it."""


class Outside(OSError):
    """A file of a tree resolves outside the tree."""


def size_text(limit: int) -> str:
    return f"{limit // MiB} MiB" if limit % MiB == 0 else f"{limit:,} bytes"


def open_regular(path: Path | str, limit: int | None = None) -> int:
    """A descriptor, open for reading, of path: a regular file (of at most limit bytes, when given). Its type is
    checked before it is opened (a FIFO would block the open) and again on what was opened, whatever path names
    by then; OSError otherwise (FileNotFoundError, PermissionError... as the system says; NotAFile, TooLarge with
    one line of their own). The caller closes it."""
    def check(st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode):
            raise NotAFile(f"{path} is {kind_of(st.st_mode)}, not a file; buildkit reads only regular files")
        if limit is not None and st.st_size > limit:
            raise TooLarge(f"{path} is over {size_text(limit)}, the most buildkit reads of it")

    check(os.stat(path))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        check(os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path | str, limit: int) -> bytes:
    """The bytes of path, a regular file of at most limit bytes; OSError otherwise (FileNotFoundError,
    PermissionError... as the system says; NotAFile, TooLarge with one line of their own)."""
    fd = open_regular(path, limit)
    try:
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(MiB, limit + 1 - total))
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > limit:
                raise TooLarge(f"{path} is over {size_text(limit)}, the most buildkit reads of it")
            chunks.append(chunk)
    finally:
        os.close(fd)


def read_tree_file(tree: Path | str, relative: str, limit: int = TREE_FILE_LIMIT) -> bytes:
    """The bytes of tree/relative, a regular file inside tree (after every symlink) of at most limit
    bytes; OSError otherwise, its text one line naming the file as `relative of the source tree TREE`."""
    tree = Path(tree)
    where = f"{relative} of the source tree {tree}"
    try:
        real, root = os.path.realpath(tree / relative), os.path.realpath(tree)
    except (OSError, ValueError) as exc:  # a symlink loop, a NUL byte
        raise NotAFile(f"{where} cannot be resolved: {exc}") from None
    if not Path(real).is_relative_to(root):
        raise Outside(f"{where} resolves outside the tree (to {real}); buildkit reads only the tree's own files")
    try:
        return read_regular(real, limit)
    except (NotAFile, TooLarge) as exc:
        raise type(exc)(str(exc).replace(real, where, 1)) from None


def read_json_object(path: Path | str, limit: int) -> dict[str, Any]:
    """The JSON object in path, read as read_regular reads (OSError as it raises); ValueError when the text is
    not JSON, or is JSON but not an object. Callers turn both into their own one-line error."""
    data = json.loads(read_regular(path, limit))
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object but {type(data).__name__}")
    return data
