"""The contracts between the nightly's CI jobs (flows/nightly/jobs.py): the plan the plan job writes and
every job and assemble read, and the result each job writes for assemble. Frozen dataclasses with one
JSON form each, carrying their format's version (`plan_version`, `result_version`: `version` is the
night's release version): a document of another version, or of none, is one ConfigError that says so,
not a KeyError somewhere in assemble. The plan job, the jobs and assemble of one workflow run the same
buildkit, so an old document is refused rather than read.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Any, Literal, TypeVar, get_args

from buildkit.core.errors import ConfigError

PLAN_VERSION = 1
RESULT_VERSION = 2  # 2: the tests image (tests_tag, tests_digest)


class VariantStatus(StrEnum):
    """What the night did with a variant (JobResult.status, summary.VariantResult.status). The nightly's own
    set, not core/check.Status: a variant is never 'warned', and these are values of the nightly's documents."""
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"  # its nightly tag is current: nothing built tonight (never a job's result)


# where the nightly read what a variant's nightly tag was built from: the lock (it holds the registry's digest) or
# the image's labels in the registry (Previous.known_from, PlannedPrevious's, the summary's)
KnownFrom = Literal["lock", "registry"]


def _status(value: Any, where: str) -> VariantStatus:
    try:
        return VariantStatus(value)
    except ValueError:
        raise ConfigError(f"{where}: expected one of {', '.join(VariantStatus)}, got {value!r}") from None


# What each annotation of these classes takes from JSON
_CHECKS = {
    "str": lambda v: isinstance(v, str),
    "str | None": lambda v: v is None or isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "float | None": lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
    "str | tuple[str, ...]": lambda v: isinstance(v, str) or (isinstance(v, list)
                                                               and all(isinstance(s, str) for s in v)),
    "tuple[dict[str, Any], ...]": lambda v: isinstance(v, list) and all(isinstance(c, dict) for c in v),
}
_CHOICES = {"KnownFrom": get_args(KnownFrom)}  # the closed sets among them: one of their values

T = TypeVar("T")


def _from(cls: type[T], data: Any, where: str, nested: dict[str, Any] | None = None) -> T:
    """An instance of the dataclass cls from its JSON object: every field there, of its type."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(data).__name__}")
    nested = nested or {}
    values: dict[str, Any] = {}
    for spec in fields(cls):  # type: ignore[arg-type]  # (cls is a dataclass: every caller passes one)
        if spec.name not in data:
            raise ConfigError(f"{where}: the key {spec.name!r} is missing")
        value = data[spec.name]
        if spec.name in nested:
            values[spec.name] = nested[spec.name](value, f"{where}.{spec.name}")
            continue
        if (choices := _CHOICES.get(str(spec.type))) is not None:
            if value not in choices:
                raise ConfigError(f"{where}.{spec.name}: expected one of {', '.join(choices)}, got {value!r}")
        elif not _CHECKS[str(spec.type)](value):
            raise ConfigError(f"{where}.{spec.name}: expected {spec.type}, got {type(value).__name__}")
        values[spec.name] = tuple(value) if isinstance(value, list) else value
    return cls(**values)


def _many(cls: type[T]) -> Any:
    def read(value: Any, where: str) -> tuple[T, ...]:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
        return tuple(_from(cls, item, f"{where}[{i}]") for i, item in enumerate(value))
    return read


def _json(data: dict[str, Any]) -> dict[str, Any]:
    """data as JSON reads it back (tuples as lists), so a document compares equal to the file it is written to."""
    result: dict[str, Any] = json.loads(json.dumps(data))
    return result


def _version(data: Any, key: str, expected: int, what: str, where: str) -> None:
    got = data.get(key) if isinstance(data, dict) else None
    if got != expected:
        said = f"version {got!r}" if got is not None else f"no {key} (an older buildkit's, or not one)"
        raise ConfigError(f"{where}: {what} of {said}; this buildkit reads version {expected} "
                          "(the plan job, the jobs and --assemble must run the same buildkit)")


@dataclass(frozen=True)
class PlannedPrevious:
    """What the registry or the lock said a variant's nightly tag was built from (nightlyprevious.Previous)."""
    commit: str | None
    patch_set: str | None
    digest: str
    version: str | None
    known_from: KnownFrom


@dataclass(frozen=True)
class PlannedVariant:
    variant: str
    arch: str
    cuda_version: str | None
    target: str
    build: bool  # False: its nightly tag is up to date (previous says what it is)
    reason: str
    previous: PlannedPrevious | None


@dataclass(frozen=True)
class PlannedUnit:
    """One job of the GitHub matrix: a variant on one platform, and the runner that builds it."""
    id: str
    unit: str
    variant: str
    platform: str
    split: bool  # one platform of a multi-platform variant (assemble makes its index)
    runner: str | tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Excluded:
    combination: str
    reason: str


def _previous(value: Any, where: str) -> PlannedPrevious | None:
    return None if value is None else _from(PlannedPrevious, value, where)


def _variants(value: Any, where: str) -> tuple[PlannedVariant, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
    return tuple(_from(PlannedVariant, item, f"{where}[{i}]", {"previous": _previous})
                 for i, item in enumerate(value))


@dataclass(frozen=True)
class NightlyPlan:
    """What tonight's jobs are (plan.json): the head, the version, and the units to build."""
    repository: str
    url: str
    branch: str
    date: str
    commit: str
    old_commit: str | None
    patch_set_sha256: str
    version: str  # the night's release version ("" when nothing is built)
    build: bool
    variants: tuple[PlannedVariant, ...]
    units: tuple[PlannedUnit, ...]  # JSON: matrix.include (GitHub's matrix form)
    excluded: tuple[Excluded, ...]

    def to_dict(self) -> dict[str, Any]:
        """Its JSON form (plan.json; the units as GitHub's matrix, matrix.include)."""
        data = asdict(self)
        data["matrix"] = {"include": data.pop("units")}
        return _json({"plan_version": PLAN_VERSION, **data})

    @classmethod
    def from_dict(cls, data: Any, where: str = "the plan") -> NightlyPlan:
        _version(data, "plan_version", PLAN_VERSION, "a nightly plan", where)
        matrix = data.get("matrix")
        if not isinstance(matrix, dict):
            raise ConfigError(f"{where}.matrix: expected an object with include")
        body = {k: v for k, v in data.items() if k not in ("plan_version", "matrix")}
        body["units"] = matrix.get("include")
        units = _many(PlannedUnit)
        return _from(cls, body, where, {"variants": _variants, "excluded": _many(Excluded),
                                        "units": lambda value, _: units(value, f"{where}.matrix.include")})


@dataclass(frozen=True)
class JobResult:
    """What one job did with its unit (<unit id>.json, assemble's input)."""
    id: str
    unit: str
    variant: str
    platform: str
    commit: str
    version: str
    status: VariantStatus  # PASSED or FAILED
    built: bool
    digest: str  # the manifest pushed under tag, "" when none was
    build_key: str
    tag: str
    build_seconds: float | None
    checks: tuple[dict[str, Any], ...]  # verify's checks (Check.to_json)
    error: str
    tests_tag: str  # the tests image's tag (bk-<key>-<variant>-tests), "" when the unit builds none
    tests_digest: str  # the manifest pushed under tests_tag, "" when none was

    def to_dict(self) -> dict[str, Any]:
        """Its JSON form (<unit id>.json)."""
        return _json({"result_version": RESULT_VERSION, **asdict(self)})

    @classmethod
    def from_dict(cls, data: Any, where: str = "the job's result") -> JobResult:
        _version(data, "result_version", RESULT_VERSION, "a job result", where)
        return _from(cls, {k: v for k, v in data.items() if k != "result_version"}, where, {"status": _status})
