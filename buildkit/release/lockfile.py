"""buildkit.lock, the document: Lock, its only reader (Lock.read) and, through update_lock, its only writer.

A Lock is frozen and typed: builds (a LockEntry per key, release/lock.py), indexes (an IndexEntry per
multi-platform build) and nightly's record; lookups (find, entry, by_digest, index_by_digest, describing,
digests_of, inputs); changes return a new Lock (with_entry, without, with_index, with_attached, with_nightly).
It keeps the JSON it was read from, so an entry nothing changed is written back as it was (an older lock's
keys, a newer buildkit's), and it writes that document with sorted keys, indented by 2: the bytes of the
buildkits before it. Written atomically (temporary file in the same folder, fsync, rename) under an exclusive
lock, so a crash or a concurrent build never leaves half a file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from buildkit.core.boundedread import MiB, read_regular
from buildkit.core.errors import ConfigError, LockError
from buildkit.core.filelock import file_lock
from buildkit.core.platforms import cpu_arch
from buildkit.core.wholefile import write_whole
from buildkit.plan.inputs import BuildInputs, from_lock_entry
from buildkit.release.artifact import Published
from buildkit.release.lock import (IndexEntry, LockEntry, check_entry, check_index, entry_dict, entry_from_dict,
                                   entry_key, index_from_dict, json_kind)

LOCK_VERSION = 1
LOCK_LIMIT = 256 * MiB  # read whole: a lock of thousands of builds is a few MB
Attachment = Literal["bench", "gpu_check", "workload"]  # what a later command attaches to a build's entry


def _checked(data: Any, path: Path) -> dict[str, Any]:
    """The lock document, checked: version, builds (an object of entries), each entry's keys and types."""
    if not isinstance(data, dict):
        raise LockError(f"{path}: expected a JSON object with lock_version and builds, got {json_kind(data)}")
    if data.get("lock_version") != LOCK_VERSION:
        raise LockError(f"{path}: lock_version: expected {LOCK_VERSION}, got {data.get('lock_version')!r:.40}"
                        f" (not a buildkit lock of version {LOCK_VERSION})")
    builds = data.get("builds")
    if not isinstance(builds, dict):
        raise LockError(f"{path}: builds: expected an object of variant/target entries, got {json_kind(builds)}")
    for key, entry in builds.items():
        check_entry(entry, f"{path}: builds[{key!r}]", complete=False)  # users of an entry need its keys
    indexes = data.get("indexes")
    if indexes is not None:
        if not isinstance(indexes, dict):
            raise LockError(f"{path}: indexes: expected an object of variant/target entries, "
                            f"got {json_kind(indexes)}")
        for key, entry in indexes.items():
            check_index(entry, f"{path}: indexes[{key!r}]")
    nightly = data.get("nightly")
    if nightly is not None and not isinstance(nightly, dict):
        raise LockError(f"{path}: nightly: expected an object, got {json_kind(nightly)}")
    return data


def _same_platform(entry: LockEntry | None, platform: str) -> bool:
    """Whether a lock's entry was built for platform's CPU architecture."""
    try:
        return entry is not None and cpu_arch(entry.platform).docker == cpu_arch(platform).docker
    except ConfigError:  # no platform, or one no catalogue names: not this platform's build
        return False


@dataclass(frozen=True)
class Lock:
    """One buildkit.lock. builds holds every entry: one a hand or a newer buildkit left without a key has
    that key's empty value there, and entry() refuses it (the users that need every key)."""
    path: Path
    _document: Mapping[str, Any] = field(repr=False)  # the checked JSON, never changed in place

    @classmethod
    def read(cls, path: Path) -> Lock:
        """The lock at path; an empty one when the file does not exist. LockError (one line) for a folder, an
        unreadable file, or a document that is not a lock."""
        if Path(path).is_dir():
            raise LockError(f"{path}: is a folder, not a lock file")
        try:
            data = json.loads(read_regular(path, LOCK_LIMIT))  # a FIFO or a device is refused, not waited on
        except FileNotFoundError:
            return cls.empty(path)
        except (OSError, ValueError, RecursionError) as exc:
            raise LockError(f"{path}: cannot read the lock file (it is left as it is): "
                            f"{(str(exc).splitlines() or ['nested too deeply'])[0][:200]}") from None
        return cls(Path(path), _checked(data, path))

    @classmethod
    def empty(cls, path: Path) -> Lock:
        """The lock of no build (what a missing file reads as)."""
        return cls(Path(path), {"lock_version": LOCK_VERSION, "builds": {}})

    @property
    def version(self) -> int:
        return int(self._document["lock_version"])

    @property
    def _builds(self) -> Mapping[str, Any]:
        builds: Mapping[str, Any] = self._document["builds"]
        return builds

    @cached_property
    def builds(self) -> Mapping[str, LockEntry]:
        return MappingProxyType({key: entry_from_dict(data, f"{self.path}: builds[{key!r}]", complete=False)
                                 for key, data in self._builds.items()})

    @cached_property
    def indexes(self) -> Mapping[str, IndexEntry]:
        return MappingProxyType({key: index_from_dict(data, f"{self.path}: indexes[{key!r}]")
                                 for key, data in (self._document.get("indexes") or {}).items()})

    @property
    def nightly(self) -> Mapping[str, Any]:
        """nightly's record (flows/nightly/previous.py checks its shape); {} when there is none."""
        return self._document.get("nightly") or {}

    # ------------------------------------------------------------------ lookups

    def entry(self, key: str, where: str | None = None) -> LockEntry:
        """The complete entry of key (every key there, none unknown): LockError naming where (`<path>:
        builds['<key>']`) and what is wrong with one that is not; LockError when the lock has none."""
        if key not in self._builds:
            raise LockError(f"{self.path} has no build {key!r}")
        return entry_from_dict(self._builds[key], where or f"{self.path}: builds[{key!r}]")

    def find(self, variant: str, target: str, platform: str, cpu_level: str = "",
             arch: str = "") -> tuple[str, LockEntry] | None:
        """The key and entry of the build of this variant, target and platform, under its key or, for an older
        lock, under the key without the platform suffix; never an entry of another platform."""
        for key in dict.fromkeys((entry_key(variant, target, platform, cpu_level, arch), f"{variant}/{target}")):
            entry = self.builds.get(key)
            if _same_platform(entry, platform):
                return key, self.builds[key]
        return None

    def by_digest(self, digest: str) -> str | None:
        """The key of the (first, by key) entry that recorded the image at digest."""
        return next((k for k, e in sorted(self.builds.items()) if digest and e.image_digest == digest), None)

    def index_by_digest(self, digest: str) -> tuple[str, IndexEntry] | None:
        """The key and index of the (first, by key) multi-platform build whose index is at digest."""
        return next(((k, i) for k, i in sorted(self.indexes.items()) if i.index_digest == digest), None)

    def describing(self, image_ref: str, image_id: str | None = None) -> str | None:
        """The key of the entry describing image_ref (by tag, else by image id or digest)."""
        wanted = {image_ref, image_ref.removeprefix("docker.io/"), image_ref.removeprefix("docker.io/library/")}
        for key, entry in self.builds.items():
            if wanted & (set(entry.tags) | set(entry.pushed)):
                return key
        if image_id:
            for key, entry in self.builds.items():
                if image_id in (entry.image_id, entry.image_digest):
                    return key
        return None

    def digests_of(self, build_key: str) -> list[str]:
        """The digests recorded for build_key: its entries' images, then its indexes."""
        found = [e.image_digest for e in self.builds.values() if e.build_key == build_key]
        found += [i.index_digest for i in self.indexes.values() if i.build_key == build_key]
        return [d for d in found if d]

    def inputs(self, key: str, where: str) -> BuildInputs:
        """The inputs of the entry of key (an incomplete one too: its labels say the rest); InputsError."""
        return from_lock_entry(self._builds[key], where)

    # ------------------------------------------------------------------ changes (each a new Lock)

    def _with_builds(self, builds: Mapping[str, Any]) -> Lock:
        return Lock(self.path, {**self._document, "builds": dict(sorted(builds.items()))})

    def with_entry(self, entry: LockEntry, key: str | None = None) -> Lock:
        """entry added under key (entry.key when not given), replacing the one there."""
        return self._with_builds({**self._builds, key or entry.key: _json(entry_dict(entry))})

    def without(self, key: str) -> Lock:
        return self._with_builds({k: v for k, v in self._builds.items() if k != key})

    def with_attached(self, key: str, name: Attachment, record: Mapping[str, Any]) -> Lock:
        """The entry of key (already there) with name set to record; its other keys as they were."""
        return self._with_builds({**self._builds, key: {**self._builds[key], name: _json(record)}})

    def with_index(self, index: IndexEntry) -> Lock:
        indexes = {**(self._document.get("indexes") or {}), index.key: _json(asdict(index))}
        return Lock(self.path, {**self._document, "indexes": dict(sorted(indexes.items()))})

    def with_nightly(self, record: Mapping[str, Any]) -> Lock:
        return Lock(self.path, {**self._document, "nightly": _json(record)})

    def text(self) -> str:
        """The file's text."""
        return json.dumps(self._document, indent=2, sort_keys=True) + "\n"


def _json(value: Mapping[str, Any]) -> dict[str, Any]:
    """value as the file holds it (tuples as lists), so the Lock reads it back as it reads the file."""
    data: dict[str, Any] = json.loads(json.dumps(value))
    return data


def _sweep_legacy(path: Path) -> None:
    """The temporaries (`.buildkit.lock.XXXXXXXX.tmp`) that killed writes of earlier versions left; the
    caller holds the folder's lock, which those writers held too, so none of them is being written."""
    legacy = re.compile(re.escape(f".{path.name}.") + r"[A-Za-z0-9_]{8}\.tmp")
    for stale in path.parent.iterdir():
        if legacy.fullmatch(stale.name) and stale.is_file() and not stale.is_symlink():
            stale.unlink(missing_ok=True)


def update_lock(path: Path, change: Callable[[Lock], Lock]) -> Lock:
    """The one read-modify-write of a lock file: under an exclusive flock on its folder (so no extra
    file is left behind), read the lock (an empty one when there is none), write the Lock change()
    returns atomically, and return it. An exception from change() leaves the file as it was."""
    path = Path(path).resolve()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(path.parent):
            lock = change(Lock.read(path))
            _sweep_legacy(path)
            write_whole(path, lock.text())  # also sweeps its own
    except OSError as exc:
        raise LockError(f"{path}: cannot write the lock file: {exc}") from None
    return lock


def write_index_entry(path: Path, index: IndexEntry, entries: Mapping[str, LockEntry]) -> None:
    """The index and each platform's entry (builds[<variant>/<target>@<platform>]), in one write."""
    def change(lock: Lock) -> Lock:
        for key, entry in entries.items():
            lock = lock.with_entry(entry, key)
        return lock.with_index(index)

    update_lock(path, change)


def write_lock_entry(path: Path, entry: LockEntry) -> None:
    """Add or replace the entry for entry.key, keeping the others."""
    def change(lock: Lock) -> Lock:
        old = f"{entry.variant}/{entry.target}"  # an older lock's key for this platform's build: moved
        if old != entry.key and _same_platform(lock.builds.get(old), entry.platform):
            lock = lock.without(old)
        return lock.with_entry(entry)

    update_lock(path, change)


def record(path: Path, entry: LockEntry, published: Published, version: str) -> LockEntry:
    """The one record of a publication: the build's entry with the version it was published as, the digest
    the registry holds and every reference it has, written to the lock at path (replacing that build's)."""
    entry = replace(entry, version=version, image_digest=published.digest, pushed=published.pushed)
    write_lock_entry(path, entry)
    return entry
