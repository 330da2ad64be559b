"""A matrix build: prepare every variant, bake them all, verify each loaded image.

Each variant comes resolved by the CLI (flows/unit/spec.VariantSpec: its key and its unit's UnitSpec).
A variant that fails at any stage is reported and does not stop the others. A multi-platform
variant (plan/matrix.py: one Variant per platform, platform_split) is one bake target per platform,
each tagged <variant>-<os>-<arch> locally and verified alone; `assemble_indexes` then puts the
platforms of each variant under one OCI index (oci/ociindex.py) with the variant's own tags.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TYPE_CHECKING, cast

from buildkit.core.errors import BuildkitError
from buildkit.engine.bake import TargetOutcome, run_bake
from buildkit.flows.unit.pipeline import prepare, check_build_machine, Prepared
from buildkit.flows.unit.spec import VariantSpec
from buildkit.flows.unit.buildspec import build_spec
from buildkit.flows.unit.buildunit import UnitOptions, attempt_unit, UnitResult
from buildkit.engine.buildx import check_buildx, BuildOptions, BuildResult
from buildkit.flows.matrix.multiplatform import PlatformBuild, record_index
from buildkit.oci.imageref import tag_of
from buildkit.engine.bakefile import bake_document, bake_target, write_bake_file
from buildkit.oci.ociindex import write_index_archive
from buildkit.plan.buildkey import index_key
from buildkit.plan.tags import build_tags, build_key_tag
from buildkit.verify.report import VerifyReport

if TYPE_CHECKING:
    from buildkit.engine.api import Engine, Images, OutStream


@dataclass(frozen=True)
class VariantBuild:
    variant: VariantSpec
    prepared: Prepared | None
    outcome: TargetOutcome | None
    report: VerifyReport | None
    error: str  # "" when built (and verified, locked, published: what was asked)
    unit: UnitResult | None = None  # the build unit's flow after the bake (failed: the stage that failed)

    @property
    def ok(self) -> bool:
        return not self.error


def prepare_matrix(variants: Sequence[VariantSpec], work_dir: Path, engine: Engine, *,
                   stop_on: tuple[type[BaseException], ...] = (),
                   ) -> tuple[dict[str, Prepared], dict[str, str]]:
    """Fetch, patch and render every variant into work_dir/<target>/context.

    Returns ({key: Prepared}, {key: error}); an exception of a type in stop_on is raised instead
    (the patch queue is common to every variant: one that does not apply fails them all)."""
    prepared: dict[str, Prepared] = {}
    errors: dict[str, str] = {}
    for variant in variants:
        try:
            prepared[variant.unit] = prepare(variant.spec, engine, work_dir / variant.target_name / "context")
        except stop_on:
            raise
        except BuildkitError as exc:
            errors[variant.unit] = str(exc)
    return prepared, errors


def local_name(variant: VariantSpec) -> str:
    """The name in a unit's local tags: the variant's, with the platform for one platform of several."""
    return f"{variant.key}-{variant.request.platform.replace('/', '-')}" if variant.platform_split else variant.key


def matrix_document(variants: Sequence[VariantSpec], prepared: dict[str, Prepared], options: BuildOptions,
                    work_dir: Path) -> dict[str, Any]:
    """The bake document for the prepared variants. Local tags are <image>:<variant> and
    sha-<7>-<variant>, the variant including a non-server target, so targets never share a tag."""
    targets = {}
    for variant in variants:
        if variant.unit not in prepared:
            continue
        p = prepared[variant.unit]
        spec = build_spec(p.plan, p.rendered, options, work_dir / variant.target_name / "metadata.json")
        extra = tuple(cast(str, tag_of(t)) for t in p.plan.tags[2:])  # a plan's tags are all <image>:<tag>
        tags = build_tags(variant.request.image_name, local_name(variant), p.source.commit, extra)
        targets[variant.target_name] = bake_target(spec.with_tags(tags))
    return bake_document(targets)


# prepared: a Prepared (Any: tests/unit/test_engine_seam.py passes a class with its plan and CUDA roots only)
def verify_variant(prepared: Any, outcome: TargetOutcome, engine: Engine) -> tuple[VerifyReport | None, str]:
    """(report, error): the build unit's verify stage alone (flows/unit/buildunit.py); a failed image loses its tags."""
    assert outcome.result is not None
    unit = attempt_unit(prepared, UnitOptions(stages=False), engine=engine, built=outcome.result)
    return (unit.report if unit.ok or unit.report.checks else None), unit.error


def build_matrix(variants: Sequence[VariantSpec], options: BuildOptions, work_dir: Path, *, engine: Engine,
                 verify: bool = True,
                 stream: OutStream | None = None, stop_on: tuple[type[BaseException], ...] = (),
                 finish: Callable[[VariantSpec, Prepared], UnitOptions] | None = None,
                 ) -> tuple[list[VariantBuild], Path | None]:
    """Prepare every variant, bake them all, then each built unit through the build unit's flow
    (flows/unit/buildunit.py) after its build: verify, and the lock entry and publication finish(variant,
    prepared) asks for (none without it). A variant that fails at any stage is reported and does not
    stop the others. Returns (builds in matrix order, bake file)."""
    prepared, errors = prepare_matrix(variants, work_dir, engine, stop_on=stop_on)
    builds: dict[str, VariantBuild] = {v.unit: VariantBuild(v, None, None, None, errors[v.unit])
                                       for v in variants if v.unit in errors}
    bake_file = None
    ready = [v for v in variants if v.unit in prepared]
    if ready:
        check_buildx(engine)  # after preparing: a patch queue that does not apply never runs buildx

        for v in ready:
            check_build_machine(prepared[v.unit].plan.request, engine, stream)
        document = matrix_document(ready, prepared, options, work_dir)
        bake_file = write_bake_file(work_dir / "docker-bake.json", document)
        outcomes = run_bake(engine, bake_file, [v.target_name for v in ready], options, work_dir, stream=stream)
        for variant in ready:
            outcome = outcomes[variant.target_name]
            p = prepared[variant.unit]
            if not outcome.ok:
                builds[variant.unit] = VariantBuild(variant, p, outcome, None, outcome.error)
                continue
            asked = finish(variant, p) if finish is not None else UnitOptions()
            # the unit's stages after the bake (the tests image, the build stage's packages) with the bake's options
            unit = attempt_unit(p, replace(asked, verify=verify, stages=False, stream=stream,
                                           build=asked.build or options), engine=engine, built=outcome.result)
            report = unit.report if verify and (unit.failed != "verify" or unit.report.checks) else None
            builds[variant.unit] = VariantBuild(variant, p, outcome, report, unit.error, unit)
    return [builds[v.unit] for v in variants], bake_file


@dataclass(frozen=True)
class IndexBuild:
    """The platforms of one multi-platform variant under one OCI index (loaded with the variant's tags)."""
    key: str
    units: tuple[VariantBuild, ...]
    digest: str  # "" when a platform failed
    archive: Path | None
    tags: tuple[str, ...]  # local references
    build_key: str
    error: str

    @property
    def ok(self) -> bool:
        return not self.error


def index_platforms(index: IndexBuild) -> list[PlatformBuild]:
    """The platforms of a baked multi-platform variant as flows/matrix/multiplatform's PlatformBuilds."""
    out = []
    for u in index.units:  # an index is made (index.ok) only of platforms that were built
        assert u.prepared is not None and u.outcome is not None and u.outcome.result is not None
        out.append(PlatformBuild(u.variant.request.platform, u.prepared, u.outcome.result,
                                 u.report or VerifyReport(image="", checks=())))
    return out


def assemble_indexes(builds: Sequence[VariantBuild], work_dir: Path, engine: Images, *,
                     load: bool = True) -> list[IndexBuild]:
    """One index per multi-platform variant, over its platforms in their order; a variant with a
    failed platform gets no index (its error names the platform)."""
    groups: dict[str, list[VariantBuild]] = {}
    for b in builds:
        if b.variant.platform_split:
            groups.setdefault(b.variant.key, []).append(b)
    out = []
    for key, units in groups.items():
        failed = [u for u in units if not u.ok]
        if failed:
            error = "; ".join(f"{u.variant.request.platform}: {u.error}" for u in failed)
            out.append(IndexBuild(key, tuple(units), "", None, (), "", f"not every platform was built: {error}"))
            continue
        built: list[tuple[VariantBuild, Prepared, BuildResult]] = []  # none failed: every platform was built
        for u in units:
            assert u.prepared is not None and u.outcome is not None and u.outcome.result is not None
            built.append((u, u.prepared, u.outcome.result))
        first = built[0][1]
        archives = [(u.variant.request.platform, r.oci_archive) for u, _, r in built if r.oci_archive is not None]
        if len(archives) < len(built):
            out.append(IndexBuild(key, tuple(units), "", None, (), "", "a multi-platform variant needs the OCI "
                                  "exporter (the containerd image store, build.reproducible = auto)"))
            continue
        ikey = index_key((u.variant.request.platform, pr.build_key) for u, pr, _ in built)
        # a plan's tags are all <image>:<tag>
        extra = tuple(tag for tag in (cast(str, tag_of(t)) for t in first.plan.tags[2:]) if not tag.startswith("bk-"))
        tags = build_tags(units[0].variant.request.image_name, key, first.source.commit, extra)
        tags += (f"{units[0].variant.request.image_name}:{build_key_tag(ikey, key)}",)
        archive = work_dir / f"index-{units[0].variant.target_name}.oci.tar"
        try:
            digest = write_index_archive(archives, archive, tags if load else ())
            if load:
                engine.load(archive, tags)
        except BuildkitError as exc:
            out.append(IndexBuild(key, tuple(units), "", None, (), ikey, f"the index was not made: {exc}"))
            continue
        out.append(IndexBuild(key, tuple(units), digest, archive, tags if load else (), ikey, ""))
    return out


def bake_locked(variants: Sequence[VariantSpec], options: BuildOptions, work_dir: Path, lock_path: Path, *,
                engine: Engine, verify: bool = True, stream: OutStream | None = None,
                ) -> tuple[list[VariantBuild], list[IndexBuild], Path | None]:
    """`buildkit bake`: build_matrix, each single-platform unit locked by the build unit's flow once
    verified; then one index per multi-platform variant, locked with its platforms' entries."""
    builds, bake_file = build_matrix(variants, options, work_dir, engine=engine, verify=verify, stream=stream,
                                     finish=lambda v, _: UnitOptions(lock_path=None if v.platform_split else lock_path))
    indexes = assemble_indexes(builds, work_dir, engine)
    for index in indexes:
        if index.ok:
            first = index.units[0].variant.request
            record_index(lock_path, index_platforms(index), first.target, first.image_name, index.digest,
                         index.build_key, index.tags, first.version, (), engine=engine)
    return builds, indexes, bake_file
