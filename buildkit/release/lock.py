"""The entries of buildkit.lock: every input of a successful build, the input a later `reproduce` uses.

An entry (LockEntry, a plain frozen dataclass that mypy checks) holds the inputs declared `lock` in
plan/inputs.py (BuildInputs.lock_fields; tests/unit/test_lock_types.py keeps the two in step), read back by
plan/inputs.py from_lock_entry, and what the build produced.

A multi-platform build has an IndexEntry. The document holding them (one entry per variant and target,
`cuda13.1-sm120/server`, so the builds of a matrix share a lock) is release/lockfile.py's Lock, its only
reader and writer.
"""

from __future__ import annotations

import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Literal

from buildkit.core.errors import LockError
from buildkit.core.platforms import DEFAULT_PLATFORM
from buildkit.plan.archs import ARCHS, default_platform
from buildkit.plan.inputs import BaseImage, BuildInputs, from_lock_entry
from buildkit.plan.schema import JSON_TYPES, JsonType, json_type
from buildkit.plan.plantypes import BuildPlan
from buildkit.plan.tags import artifact_variant

# How buildx exported the image: "oci" (reproducible: OCI exporter, rewrite-timestamp, then loaded) or "load".
# LockEntry.exporter stays str: a lock is read as written ("" in one written before the field).
Exporter = Literal["oci", "load"]


@dataclass(frozen=True)
class BuildOutcome:
    """What a build of a plan produced (flows/unit/pipeline.Prepared.outcome): all a lock entry holds beside the plan.
    An image the registry already has (nothing built here) has its digest only."""
    dockerfile_sha256: str  # the rendered Dockerfile's
    image_digest: str = ""
    image_id: str = ""  # the engine's id of the loaded image
    tags: tuple[str, ...] = ()
    exporter: Exporter = "load"  # LockEntry.exporter
    build_seconds: float = 0.0
    build_started: str = ""  # RFC 3339, UTC ("" without a build here)
    build_finished: str = ""
    debian_packages: dict[str, Any] | None = None  # flows/unit/debpackages.py, when read


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
    # version}, "runtime": {...}}, flows/unit/debpackages.py); known after the apt steps, so in no build key.
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
    cpu/server: Lock.find reads it only for an arm64 build, write_lock_entry moves it to its new key."""
    known = ARCHS.get(arch)  # the arch's own default platform is unsuffixed (sm_121: arm64)
    default = default_platform(known) if known is not None else DEFAULT_PLATFORM
    return f"{artifact_variant(variant, platform, cpu_level, default)}/{target}"


def json_kind(value: Any) -> str:
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
        raise LockError(f"{where}: expected an object, got {json_kind(data)}")
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
            raise LockError(f"{where}.{name}: expected {expect.expect}, got {json_kind(data[name])}")


def entry_from_dict(data: dict[str, Any], where: str = "lock entry", complete: bool = True) -> LockEntry:
    """A LockEntry from its JSON form (as the lock holds it). Not complete: an entry checked with
    check_entry(complete=False) (a hand-made one, or one of a newer buildkit), its unknown keys left out and each
    missing key without a default given its type's empty value ("", 0, (), None); lockfile.Lock.builds."""
    check_entry(data, where, complete)
    try:
        values = {}
        for spec in fields(LockEntry):
            if spec.name not in data:
                if not complete and spec.default is MISSING and spec.default_factory is MISSING:
                    values[spec.name] = _empty(str(spec.type))
            elif spec.type == "tuple[BaseImage, ...]":
                values[spec.name] = tuple(BaseImage(**b) for b in data[spec.name])
            elif spec.type == "tuple[str, ...]":
                values[spec.name] = tuple(data[spec.name])
            else:
                values[spec.name] = data[spec.name]
        return LockEntry(**values)
    except TypeError as exc:
        raise LockError(f"a lock entry does not have the expected fields: {exc}") from None


def _empty(annotation: str) -> Any:
    """The empty value of a field's annotation (the value of a key an incomplete entry lacks)."""
    if "None" in annotation:
        return None
    return {"str": "", "int": 0, "bool": False}.get(annotation, ())


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
        raise LockError(f"{where}: expected an object, got {json_kind(data)}")
    for name in ("variant", "target", "image_name", "index_digest", "build_key"):
        if not isinstance(data.get(name), str):
            raise LockError(f"{where}.{name}: expected a string, got {json_kind(data.get(name))}")
    platforms = data.get("platforms")
    if not isinstance(platforms, list) or not platforms:
        raise LockError(f"{where}.platforms: expected a non-empty list, got {json_kind(platforms)}")
    for i, item in enumerate(platforms):
        names = {f.name for f in fields(PlatformRecord)}
        if not isinstance(item, dict) or set(item) != names or not all(isinstance(v, str) for v in item.values()):
            raise LockError(f"{where}.platforms[{i}]: expected an object of {', '.join(sorted(names))} (strings)")
    for name in ("tags", "pushed"):
        if name in data and not _STRS.ok(data[name]):
            raise LockError(f"{where}.{name}: expected {_STRS.expect}, got {json_kind(data[name])}")


def index_from_dict(data: dict[str, Any], where: str = "lock index") -> IndexEntry:
    check_index(data, where)
    values = {f.name: data[f.name] for f in fields(IndexEntry) if f.name in data}
    values["platforms"] = tuple(PlatformRecord(**p) for p in data["platforms"])
    for name in ("tags", "pushed"):
        values[name] = tuple(values.get(name, ()))
    return IndexEntry(**values)


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
