"""Files of an OCI layout folder opened safely: only a regular file whose real path is inside the folder
(no symlink out of it, no device, no FIFO, which would block the open), so a name in untrusted content
never reads the host's files."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO

from buildkit.core.errors import ImageSourceError


def open_inside(root: Path, name: str) -> IO[bytes]:
    """root/name for reading, when it is a regular file inside root; ImageSourceError naming it otherwise."""
    where = f"{root}: {name}"
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(root, name))
    if os.path.commonpath([real_root, real]) != real_root:
        raise ImageSourceError(f"{where} leads out of the layout; refused")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ImageSourceError(f"{where} is missing") from None
    except OSError as exc:
        raise ImageSourceError(f"{where} cannot be opened ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ImageSourceError(f"{where} is not a regular file; refused")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


__all__ = ["open_inside"]
