"""buildkit.lock: every input of a successful build, the input a later `reproduce` uses.

One JSON document holding one entry per variant and target (`cuda13.1-sm120/server`), so the
builds of a matrix share a lock. Written atomically (temporary file in the same folder, fsync,
rename) under an exclusive lock, so a crash or a concurrent build never leaves half a file.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from .errors import LockError

LOCK_VERSION = 1


@dataclass(frozen=True)
class BaseImage:
    ref: str
    digest: str  # repo digest where known, else the local image id, else ""


@dataclass(frozen=True)
class LockEntry:
    source_url: str
    ref: str
    commit: str
    build_number: int
    patches: tuple[str, ...]
    patch_set_sha256: str
    template: str
    template_sha256: str
    dockerfile_sha256: str
    base_images: tuple[BaseImage, ...]
    cuda_version: str | None
    cuda_root: dict | None  # wheel manifest of provider wheels, else None
    arch: str
    cmake_archs: str | None
    target: str
    platform: str
    no_vmm: bool
    cmake_args: tuple[str, ...]
    source_date_epoch: int
    tool_version: str
    image_name: str
    image_digest: str
    image_id: str
    tags: tuple[str, ...]
    variant: str
    version: str = ""
    build_key: str = ""  # hash of every input; the registry tag bk-<key>-<variant> finds the build again
    pushed: tuple[str, ...] = ()  # full references this build was published under
    labels: dict = field(default_factory=dict)  # the image's labels: with the fields above, every input of `reproduce`
    exporter: str = ""  # "oci" (reproducible: OCI exporter, rewrite-timestamp) or "load" (plain --load)
    cpu_level: str = ""  # build.cpu_level (cpulevels.py); "" in locks written before it existed
    bench: dict | None = None  # `buildkit bench --attach-lock` results for this image; a rebuild clears them

    @property
    def key(self) -> str:
        return f"{self.variant}/{self.target}"


def entry_from_dict(data: dict) -> LockEntry:
    """A LockEntry from its JSON form (as read_lock returns it)."""
    try:
        fields = dict(data)
        fields["base_images"] = tuple(BaseImage(**b) for b in fields.get("base_images", ()))
        for name in ("patches", "cmake_args", "tags", "pushed"):
            fields[name] = tuple(fields.get(name, ()))
        return LockEntry(**fields)
    except TypeError as exc:
        raise LockError(f"a lock entry does not have the expected fields: {exc}") from None


@contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """Serialise writers of the lock: flock on its folder, so no extra file is left behind."""
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_lock(path: Path) -> dict:
    """The whole lock document; an empty one when the file does not exist."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {"lock_version": LOCK_VERSION, "builds": {}}
    except (OSError, ValueError) as exc:
        raise LockError(f"{path}: cannot read the lock file: {exc}") from None
    if not isinstance(data, dict) or data.get("lock_version") != LOCK_VERSION or "builds" not in data:
        raise LockError(f"{path}: not a buildkit lock of version {LOCK_VERSION}")
    return data


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_lock_entry(path: Path, entry: LockEntry) -> None:
    """Add or replace the entry for entry.key, keeping the others."""
    path = path.resolve()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _exclusive(path):
            data = read_lock(path)
            data["builds"][entry.key] = asdict(entry)
            data["builds"] = dict(sorted(data["builds"].items()))
            _atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise LockError(f"{path}: cannot write the lock file: {exc}") from None
