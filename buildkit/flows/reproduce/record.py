"""What `buildkit reproduce` rebuilds: a `Recorded` build, read from a lock entry or an image's labels.

Both are parsed by the one parser of a build's inputs (plan/inputs.py) into a `BuildInputs`; the
record adds where it came from, what it produced and where the original can be read.
"""

from __future__ import annotations

from typing import Any, TypeVar
import json
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from buildkit.core.errors import ReproduceError
from buildkit.core.platforms import DEFAULT_PLATFORM
from buildkit.oci.imageref import name_of
from buildkit.oci.imagesource import EngineImages, open_image
from buildkit.plan.inputs import BUILD_KEY_LABEL, INPUTS_LABEL, BuildInputs, from_labels as inputs_from_labels, \
    need
from buildkit.release.lockfile import Lock

T = TypeVar("T")
REPRODUCE_NAME = "buildkit-reproduce"  # the image name is not an input (the rebuild is never tagged)


@dataclass(frozen=True)
class Recorded:
    """Every input of one recorded build, and what it produced."""
    origin: str  # "lock FILE (KEY)" or "image REF"
    inputs: BuildInputs
    image_name: str
    image_digest: str  # what the recorded build produced (manifest digest)
    originals: tuple[str, ...] = ()  # where the recorded image can be read: image specs for open_image
    dockerfile_sha256: str = ""
    build_key: str = ""
    labels: dict[str, Any] = field(default_factory=dict)
    debian_packages: dict[str, Any] = field(default_factory=dict)  # the lock's record of them: what reproduce pins


def _exact(inputs: BuildInputs, where: str) -> BuildInputs:
    for base in inputs.base_images:
        if not base.digest:
            raise ReproduceError(f"{where}: base image {base.ref} was recorded without a digest; it cannot be "
                                 "rebuilt exactly")
    return inputs


def from_labels(labels: Mapping[str, str], where: str, *, image_digest: str, originals: tuple[str, ...] = ()) \
        -> Recorded:
    """A record from an image's labels (every input is a label; the rest is in the inputs label)."""
    inputs = _exact(inputs_from_labels(labels, where), where)
    name = json.loads(labels[INPUTS_LABEL]).get("image_name") or REPRODUCE_NAME
    return Recorded(origin=where, inputs=inputs, image_name=name, image_digest=image_digest, originals=originals,
                    build_key=labels.get(BUILD_KEY_LABEL, ""), labels=dict(labels))


def select_entry(builds: Mapping[str, T], key: str | None, path: Path) -> tuple[str, T]:
    if key:
        if key not in builds:
            raise ReproduceError(f"{path} has no build {key!r}; it has: {', '.join(builds) or 'none'}")
        return key, builds[key]
    if len(builds) == 1:
        return next(iter(builds.items()))
    if not builds:
        raise ReproduceError(f"{path} records no build")
    raise ReproduceError(f"{path} records {len(builds)} builds; choose one with --build "
                         f"({', '.join(builds)})")


@dataclass(frozen=True)
class IndexRecorded:
    """A recorded multi-platform build: the index digest and each platform's own record, in the
    index's order."""
    origin: str
    index_digest: str
    platforms: tuple[tuple[str, Recorded], ...]  # (platform, its record)


def _index_of(lock: Lock, key: str | None) -> str | None:
    """The indexes[] key a reproduce of this lock means: the one named, or the only build recorded
    when that is one multi-platform build (its platforms' entries are part of it)."""
    if key is not None:
        return key if key in lock.indexes else None
    if len(lock.indexes) != 1:
        return None
    name, index = next(iter(lock.indexes.items()))
    return name if set(lock.builds) <= {p.entry for p in index.platforms} else None


def from_lock_index(path: Path, lock: Lock, name: str) -> IndexRecorded:
    index = lock.indexes[name]
    where = f"lock {path} ({name})"
    platforms = []
    for item in index.platforms:
        if item.entry not in lock.builds:
            raise ReproduceError(f"{where}: the entry {item.entry!r} of {item.platform} is missing")
        rec = from_lock(path, item.entry)
        if rec.image_digest != item.manifest_digest:
            raise ReproduceError(f"{where}: {item.entry} records {rec.image_digest}, the index "
                                 f"{item.manifest_digest}")
        platforms.append((item.platform, rec))
    return IndexRecorded(origin=where, index_digest=index.index_digest, platforms=tuple(platforms))


def from_lock(path: Path, key: str | None = None) -> Recorded:
    """A record from a lock entry: its fields, and the labels it recorded for the rest."""
    if not path.is_file():
        raise ReproduceError(f"{path}: no such lock file")
    lock = Lock.read(path)
    key, entry = select_entry(lock.builds, key, path)
    where = f"lock {path} ({key})"
    inputs = _exact(lock.inputs(key, where), where)  # (an entry lacking a key: its labels say the rest)
    digest = need(vars(entry), "image_digest", where, "image digest")
    originals = [f"docker:{entry.image_id}"] if entry.image_id else []
    for ref in entry.pushed:
        spec = f"registry:{name_of(ref)}@{digest}"
        if spec not in originals:
            originals.append(spec)
    return Recorded(origin=where, inputs=inputs, image_name=need(vars(entry), "image_name", where, "image name"),
                    image_digest=digest, originals=tuple(originals), dockerfile_sha256=entry.dockerfile_sha256,
                    build_key=entry.build_key, labels=dict(entry.labels),
                    debian_packages=dict(entry.debian_packages or {}))


def from_image(spec: str, platform: str = DEFAULT_PLATFORM, engine: EngineImages | None = None) -> Recorded:
    """A record from the labels of an image (registry reference, the engine's image or OCI archive; without an
    engine, none of its images is looked at)."""
    with ExitStack() as stack:
        image = open_image(spec, stack, platform=platform, engine=engine)
        return from_labels(image.labels, f"image {spec}", image_digest=image.manifest_digest,
                           originals=(spec,))


def load_record(target: str, key: str | None = None, engine: EngineImages | None = None) -> Recorded | IndexRecorded:
    """LOCK file or IMAGE reference (engine: the one whose images IMAGE may name)."""
    path = Path(target).expanduser()
    if path.is_file():
        # A lock is JSON (it starts with "{"); an OCI archive is a tar. A damaged lock is still a lock:
        # its error names it, rather than "not a tar archive".
        with path.open("rb") as fh:
            head = fh.read(512).lstrip()
        if head.startswith(b"{") or path.suffix == ".lock":
            if path.is_file():
                lock = Lock.read(path)
                name = _index_of(lock, key)
                if name is not None:
                    return from_lock_index(path, lock, name)
            return from_lock(path, key)
    return from_image(target, engine=engine)
