"""buildkit.lock: every input of a successful build, the input a later `reproduce` uses.

An entry (LockEntry, a plain frozen dataclass that mypy checks) holds the inputs declared `lock` in
plan/inputs.py (BuildInputs.lock_fields; tests/unit/test_lock_types.py keeps the two in step), read back by
plan/inputs.py from_lock_entry, and what the build produced.

One JSON document holding one entry per variant and target (`cuda13.1-sm120/server`), so the
builds of a matrix share a lock. Written atomically (temporary file in the same folder, fsync,
rename) under an exclusive lock, so a crash or a concurrent build never leaves half a file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from buildkit.core.boundedread import MiB, read_regular
from buildkit.core.errors import ConfigError, LockError
from buildkit.core.filelock import file_lock
from buildkit.core.wholefile import write_whole
from buildkit.plan.inputs import BaseImage, BuildInputs, from_lock_entry
from buildkit.plan.schema import JSON_TYPES, JsonType, json_type
from buildkit.core.platforms import DEFAULT_PLATFORM, cpu_arch
from buildkit.plan.archs import ARCHS, default_platform
from buildkit.plan.buildplan import BuildPlan
from buildkit.plan.tags import artifact_variant
from buildkit.release.artifact import Published

LOCK_VERSION = 1
LOCK_LIMIT = 256 * MiB  # read whole: a lock of thousands of builds is a few MB


@dataclass(frozen=True)
class BuildOutcome:
    """What a build of a plan produced (flows/pipeline.Prepared.outcome): all a lock entry holds beside the plan.
    An image the registry already has (nothing built here) has its digest only."""
    dockerfile_sha256: str  # the rendered Dockerfile's
    image_digest: str = ""
    image_id: str = ""  # the engine's id of the loaded image
    tags: tuple[str, ...] = ()
    exporter: str = "load"  # "oci" or "load" (LockEntry.exporter)
    build_seconds: float = 0.0
    build_started: str = ""  # RFC 3339, UTC ("" without a build here)
    build_finished: str = ""
    debian_packages: dict[str, Any] | None = None  # flows/debpackages.py, when read


@dataclass(frozen=True)
class LockEntry:
    """One build of buildkit.lock: its inputs and what it produced.

    The input fields (source_url ... base_images, version, cpu_level) are BuildInputs' fields declared
    `lock` in plan/inputs.py, with the same names, annotations and lock defaults (tests/unit/test_lock_types.py
    holds the two together); the rest is what the build produced and where it was published."""
    # the inputs (plan/inputs.py, lock=True)
    source_url: str
    commit: str
    source_date_epoch: int
    arch: str
    cuda_version: str | None
    variant: str
    target: str
    cmake_args: tuple[str, ...]
    build_number: int
    patch_set_sha256: str
    template_sha256: str
    tool_version: str
    platform: str
    no_vmm: bool
    patches: tuple[str, ...]
    base_images: tuple[BaseImage, ...]
    # what the build produced
    ref: str
    template: str
    dockerfile_sha256: str
    cuda_root: dict[str, Any] | None  # wheel manifest of provider wheels, else None
    cmake_archs: str | None
    image_name: str
    image_digest: str
    image_id: str
    tags: tuple[str, ...]
    # inputs with the value locks written before them hold
    version: str = ""
    cpu_level: str = ""
    # produced, with defaults
    build_key: str = ""  # hash of every input; the registry tag bk-<key>-<variant> finds it
    pushed: tuple[str, ...] = ()  # full references this build was published under
    labels: dict[str, str] = field(default_factory=dict)  # the image's labels: with the inputs, all `reproduce` needs
    exporter: str = ""  # "oci" (reproducible: OCI exporter, rewrite-timestamp) or "load"
    bench: dict[str, Any] | None = None  # `buildkit bench --attach-lock` results; a rebuild clears them
    gpu_check: dict[str, Any] | None = None  # `buildkit gpu-check --attach-lock`; a rebuild clears it
    workload: dict[str, Any] | None = None  # `buildkit workload-check --attach-lock`; a rebuild clears it
    build_seconds: float = 0.0  # wall time of the buildx run (the next build's estimate)
    # every Debian package of the build stage and of the runtime image with its version ({"build": {pkg:
    # version}, "runtime": {...}}, flows/debpackages.py); known after the apt steps, so in no build key.
    # `reproduce` installs these versions (plan/aptpins.py); "architectures" ({"build": {pkg: arch}, ...}) and
    # "os" ({"build": {"id", "version_id"}, ...}) say the rest the provenance lists. None: a lock written
    # before it, or not read
    debian_packages: dict[str, Any] | None = None
    # each patch file's sha256 (hex), in the order of `patches` (patch_set_sha256 is the queue's as one)
    patch_sha256: tuple[str, ...] = ()
    # when the buildx run began and ended (RFC 3339, UTC): the provenance's startedOn and finishedOn, also when
    # a later `push` signs it; "" for a lock written before them, or an image pushed without a build here
    build_started: str = ""
    build_finished: str = ""

    @classmethod
    def of(cls, plan: BuildPlan, outcome: BuildOutcome) -> LockEntry:
        """The lock entry of plan's build (the one maker of an entry from a plan): the plan's inputs, build key,
        labels and source, and what the build produced."""
        req = plan.request
        return cls(**plan.inputs.lock_fields(), ref=plan.source.ref, template=req.template,
                   dockerfile_sha256=outcome.dockerfile_sha256, cuda_root=plan.cuda_manifest,
                   cmake_archs=req.arch.cmake_archs, image_name=req.image_name, build_key=plan.build_key,
                   image_digest=outcome.image_digest, image_id=outcome.image_id, tags=outcome.tags,
                   labels=dict(plan.labels), exporter=outcome.exporter, build_seconds=outcome.build_seconds,
                   patch_sha256=plan.source.patch_sha256, build_started=outcome.build_started,
                   build_finished=outcome.build_finished, debian_packages=outcome.debian_packages)

    @property
    def key(self) -> str:
        return entry_key(self.variant, self.target, self.platform, self.cpu_level, self.arch)

    def inputs(self) -> BuildInputs:
        """The build's inputs, parsed back from this entry (its fields and the labels it kept)."""
        return from_lock_entry(asdict(self), f"lock entry {self.key}")


def entry_key(variant: str, target: str, platform: str, cpu_level: str = "", arch: str = "") -> str:
    """A single-platform build's key in builds: cpu/server for the default platform, cpu-arm64/server for
    linux/arm64 (plan/tags.py platform_suffix). Locks written before the suffix keep an arm64 build under
    cpu/server: find_entry reads it only for an arm64 build, write_lock_entry moves it to its new key."""
    known = ARCHS.get(arch)  # the arch's own default platform is unsuffixed (sm_121: arm64)
    default = default_platform(known) if known is not None else DEFAULT_PLATFORM
    return f"{artifact_variant(variant, platform, cpu_level, default)}/{target}"


def _same_platform(entry: object, platform: str) -> bool:
    """Whether a lock's entry (a dict, maybe malformed) was built for platform's CPU architecture."""
    try:
        return isinstance(entry, dict) and cpu_arch(str(entry.get("platform"))).docker == cpu_arch(platform).docker
    except ConfigError:  # no platform, or one no catalogue names: not this platform's build
        return False


def find_entry(builds: dict[str, Any], variant: str, target: str, platform: str,
               cpu_level: str = "", arch: str = "") -> tuple[str, dict[str, Any]] | None:
    """The key and entry of the lock's build of this variant, target and platform, under its key or, for an
    older lock, under the key without the platform suffix; never an entry of another platform."""
    for key in dict.fromkeys((entry_key(variant, target, platform, cpu_level, arch), f"{variant}/{target}")):
        entry = builds.get(key)
        if isinstance(entry, dict) and _same_platform(entry, platform):
            return key, entry
    return None


def _kind(value: Any) -> str:
    return {bool: "true/false", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


# What each field of an entry must be: the schema's JSON type check of its annotation; base images are
# the lock's own form of them ({ref, digest} objects; the inputs label has [ref, digest] pairs).
_BASE_IMAGES = JsonType("a list of {ref, digest} objects",
                        lambda v: isinstance(v, list) and all(isinstance(b, dict) and set(b) == {"ref", "digest"}
                                                              and all(isinstance(s, str) for s in b.values())
                                                              for b in v))
_STRS = JSON_TYPES["tuple[str, ...]"]


def _expected(annotation: str) -> JsonType | None:
    """The JSON check of a field's annotation (a dict's key and value types are not checked)."""
    if annotation == "tuple[BaseImage, ...]":
        return _BASE_IMAGES
    return json_type(re.sub(r"dict\[[^]]*\]", "dict", annotation))


def check_entry(data: Any, where: str, complete: bool = True) -> None:
    """LockError naming where, the key and what was expected, unless data is a well-formed entry
    (complete: with every key that has no default; else only the keys it has are checked)."""
    if not isinstance(data, dict):
        raise LockError(f"{where}: expected an object, got {_kind(data)}")
    known = {f.name: f for f in fields(LockEntry)}
    for name in data:
        if complete and name not in known:  # (a lock from a newer buildkit is still read and written)
            raise LockError(f"{where}: unknown key {name!r}")
    for name, spec in known.items():
        if name not in data:
            if complete and spec.default is MISSING and spec.default_factory is MISSING:
                raise LockError(f"{where}: the key {name!r} is missing")
            continue
        expect = _expected(str(spec.type))
        if expect is not None and not expect.ok(data[name]):
            raise LockError(f"{where}.{name}: expected {expect.expect}, got {_kind(data[name])}")


def check_lock(data: Any, path: Path) -> dict[str, Any]:
    """The lock document, checked: version, builds (an object of entries), each entry's keys and types."""
    if not isinstance(data, dict):
        raise LockError(f"{path}: expected a JSON object with lock_version and builds, got {_kind(data)}")
    if data.get("lock_version") != LOCK_VERSION:
        raise LockError(f"{path}: lock_version: expected {LOCK_VERSION}, got {data.get('lock_version')!r:.40}"
                        f" (not a buildkit lock of version {LOCK_VERSION})")
    builds = data.get("builds")
    if not isinstance(builds, dict):
        raise LockError(f"{path}: builds: expected an object of variant/target entries, got {_kind(builds)}")
    for key, entry in builds.items():
        check_entry(entry, f"{path}: builds[{key!r}]", complete=False)  # users of an entry need its keys
    indexes = data.get("indexes")
    if indexes is not None:
        if not isinstance(indexes, dict):
            raise LockError(f"{path}: indexes: expected an object of variant/target entries, got {_kind(indexes)}")
        for key, entry in indexes.items():
            check_index(entry, f"{path}: indexes[{key!r}]")
    nightly = data.get("nightly")
    if nightly is not None and not isinstance(nightly, dict):
        raise LockError(f"{path}: nightly: expected an object, got {_kind(nightly)}")
    return data


def entry_from_dict(data: dict[str, Any], where: str = "lock entry") -> LockEntry:
    """A LockEntry from its JSON form (as read_lock returns it)."""
    check_entry(data, where)
    try:
        values = dict(data)
        for spec in fields(LockEntry):
            if spec.name in values and spec.type == "tuple[BaseImage, ...]":
                values[spec.name] = tuple(BaseImage(**b) for b in values[spec.name])
            elif spec.name in values and spec.type == "tuple[str, ...]":
                values[spec.name] = tuple(values[spec.name])
        return LockEntry(**values)
    except TypeError as exc:
        raise LockError(f"a lock entry does not have the expected fields: {exc}") from None


def read_lock(path: Path) -> dict[str, Any]:
    """The whole lock document; an empty one when the file does not exist."""
    if Path(path).is_dir():
        raise LockError(f"{path}: is a folder, not a lock file")
    try:
        data = json.loads(read_regular(path, LOCK_LIMIT))  # a FIFO or a device is refused, not waited on
    except FileNotFoundError:
        return {"lock_version": LOCK_VERSION, "builds": {}}
    except (OSError, ValueError, RecursionError) as exc:
        raise LockError(f"{path}: cannot read the lock file (it is left as it is): "
                        f"{(str(exc).splitlines() or ['nested too deeply'])[0][:200]}") from None
    return check_lock(data, path)


def _sweep_legacy(path: Path) -> None:
    """The temporaries (`.buildkit.lock.XXXXXXXX.tmp`) that killed writes of earlier versions left; the
    caller holds the folder's lock, which those writers held too, so none of them is being written."""
    legacy = re.compile(re.escape(f".{path.name}.") + r"[A-Za-z0-9_]{8}\.tmp")
    for stale in path.parent.iterdir():
        if legacy.fullmatch(stale.name) and stale.is_file() and not stale.is_symlink():
            stale.unlink(missing_ok=True)


def update_lock(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """The one read-modify-write of a lock file: under an exclusive flock on its folder (so no extra
    file is left behind), read the document (an empty one when there is none), let change() edit it
    in place, write it back atomically. An exception from change() leaves the file as it was."""
    path = Path(path).resolve()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(path.parent):
            data = read_lock(path)
            change(data)
            data["builds"] = dict(sorted(data["builds"].items()))
            _sweep_legacy(path)
            write_whole(path, json.dumps(data, indent=2, sort_keys=True) + "\n")  # also sweeps its own
    except OSError as exc:
        raise LockError(f"{path}: cannot write the lock file: {exc}") from None


# --------------------------------------------------------------------------- multi-platform builds

@dataclass(frozen=True)
class PlatformRecord:
    """One platform of a multi-platform build: its own complete entry in builds[entry]."""
    platform: str
    manifest_digest: str
    build_key: str
    entry: str  # the key of its LockEntry in builds: <variant>/<target>@<platform>


@dataclass(frozen=True)
class IndexEntry:
    """A multi-platform build (indexes[<variant>/<target>]): the OCI index the tags point at and
    each platform's manifest, in the index's order."""
    variant: str
    target: str
    image_name: str
    index_digest: str
    build_key: str  # index_key over the platforms' build keys
    platforms: tuple[PlatformRecord, ...]
    tags: tuple[str, ...] = ()
    version: str = ""
    pushed: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.variant}/{self.target}"


def platform_entry_key(variant: str, target: str, platform: str) -> str:
    return f"{variant}/{target}@{platform}"


def check_index(data: Any, where: str) -> None:
    if not isinstance(data, dict):
        raise LockError(f"{where}: expected an object, got {_kind(data)}")
    for name in ("variant", "target", "image_name", "index_digest", "build_key"):
        if not isinstance(data.get(name), str):
            raise LockError(f"{where}.{name}: expected a string, got {_kind(data.get(name))}")
    platforms = data.get("platforms")
    if not isinstance(platforms, list) or not platforms:
        raise LockError(f"{where}.platforms: expected a non-empty list, got {_kind(platforms)}")
    for i, item in enumerate(platforms):
        names = {f.name for f in fields(PlatformRecord)}
        if not isinstance(item, dict) or set(item) != names or not all(isinstance(v, str) for v in item.values()):
            raise LockError(f"{where}.platforms[{i}]: expected an object of {', '.join(sorted(names))} (strings)")
    for name in ("tags", "pushed"):
        if name in data and not _STRS.ok(data[name]):
            raise LockError(f"{where}.{name}: expected {_STRS.expect}, got {_kind(data[name])}")


def index_from_dict(data: dict[str, Any], where: str = "lock index") -> IndexEntry:
    check_index(data, where)
    values = {f.name: data[f.name] for f in fields(IndexEntry) if f.name in data}
    values["platforms"] = tuple(PlatformRecord(**p) for p in data["platforms"])
    for name in ("tags", "pushed"):
        values[name] = tuple(values.get(name, ()))
    return IndexEntry(**values)


def write_index_entry(path: Path, index: IndexEntry, entries: dict[str, LockEntry]) -> None:
    """The index and each platform's entry (builds[<variant>/<target>@<platform>]), in one write."""
    def change(data: dict[str, Any]) -> None:
        for key, entry in entries.items():
            data["builds"][key] = entry_dict(entry)
        indexes = data.setdefault("indexes", {})
        indexes[index.key] = asdict(index)
        data["indexes"] = dict(sorted(indexes.items()))

    update_lock(path, change)


def write_lock_entry(path: Path, entry: LockEntry) -> None:
    """Add or replace the entry for entry.key, keeping the others."""
    def change(data: dict[str, Any]) -> None:
        old = f"{entry.variant}/{entry.target}"  # an older lock's key for this platform's build: moved
        if old != entry.key and _same_platform(data["builds"].get(old), entry.platform):
            del data["builds"][old]
        data["builds"][entry.key] = entry_dict(entry)

    update_lock(path, change)


def record(path: Path, entry: LockEntry, published: Published, version: str) -> LockEntry:
    """The one record of a publication: the build's entry with the version it was published as, the digest
    the registry holds and every reference it has, written to the lock at path (replacing that build's)."""
    entry = replace(entry, version=version, image_digest=published.digest, pushed=published.pushed)
    write_lock_entry(path, entry)
    return entry


def entry_dict(entry: LockEntry) -> dict[str, Any]:
    """An entry as the lock holds it; no gpu_check key until `buildkit gpu-check --attach-lock` writes one, so a
    lock written before that key existed is written back the same."""
    data = asdict(entry)
    for name in ("gpu_check", "workload", "debian_packages"):  # (absent until known: an older lock the same)
        if data.get(name) is None:
            data.pop(name, None)
    for name in LATER_FIELDS:
        if data.get(name) in ("", ()):
            data.pop(name, None)
    return data


LATER_FIELDS = ("patch_sha256", "build_started", "build_finished")  # absent while empty (older locks, as above)
