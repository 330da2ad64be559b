"""A matrix build: prepare every variant, bake them all, verify each loaded image.

A variant that fails at any stage is reported and does not stop the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from buildkit.engine.bake import TargetOutcome, run_bake
from buildkit.oci.imageref import tag_of
from buildkit.engine.bakefile import bake_document, bake_target_from_argv, retag, write_bake_file
from buildkit.plan.matrix import Variant

if TYPE_CHECKING:
    from buildkit.engine.buildx import BuildOptions
    from buildkit.flows.pipeline import Prepared
    from buildkit.verify.checks import VerifyReport


@dataclass(frozen=True)
class VariantBuild:
    variant: Variant
    prepared: "Prepared | None"
    outcome: TargetOutcome | None
    report: "VerifyReport | None"
    error: str  # "" when built (and verified)

    @property
    def ok(self) -> bool:
        return not self.error


def prepare_matrix(variants: Sequence[Variant], work_dir: Path, *, stop_on: tuple[type, ...] = ()):
    """Fetch, patch and render every variant into work_dir/<target>/context.

    Returns ({key: Prepared}, {key: error}); an exception of a type in stop_on is raised instead
    (the patch queue is common to every variant: one that does not apply fails them all)."""
    from buildkit.core.errors import BuildkitError
    from buildkit.flows.pipeline import prepare

    prepared, errors = {}, {}
    for variant in variants:
        try:
            prepared[variant.key] = prepare(variant.cfg, work_dir / variant.target_name / "context")
        except stop_on:
            raise
        except BuildkitError as exc:
            errors[variant.key] = str(exc)
    return prepared, errors


def matrix_document(variants: Sequence[Variant], prepared: dict, options: BuildOptions, work_dir: Path) -> dict:
    """The bake document for the prepared variants. Local tags are <image>:<variant> and
    sha-<7>-<variant>, the variant including a non-server target, so targets never share a tag."""
    from buildkit.engine.buildx import buildx_argv
    from buildkit.plan.tags import build_tags

    targets = {}
    for variant in variants:
        if variant.key not in prepared:
            continue
        p = prepared[variant.key]
        argv = buildx_argv(p.plan, p.rendered, options, work_dir / variant.target_name / "metadata.json")
        target = bake_target_from_argv(argv)
        extra = tuple(tag_of(t) for t in p.plan.tags[2:])
        tags = list(build_tags(variant.request.image_name, variant.key, p.source.commit, extra))
        targets[variant.target_name] = retag(target, tags)
    return bake_document(targets)


def verify_variant(prepared, outcome: TargetOutcome):
    """(report, error): buildkit's smoke checks on the loaded image; a failed image loses its tags."""
    from buildkit.core.errors import BuildkitError
    from buildkit.verify.gate import FailedVerification, verified_or_removed

    assert outcome.result is not None
    try:
        return verified_or_removed(prepared.plan, outcome.result.tags, prepared.cuda_root), ""
    except FailedVerification as exc:
        return exc.report, str(exc)
    except BuildkitError as exc:
        return None, str(exc)


def build_matrix(variants: Sequence[Variant], options: BuildOptions, work_dir: Path, *, verify: bool = True,
                 stream=None, stop_on: tuple[type, ...] = ()) -> tuple[list[VariantBuild], Path | None]:
    """Prepare every variant, bake them all, verify each loaded image. A variant that fails at any
    stage is reported and does not stop the others. Returns (builds in matrix order, bake file)."""
    prepared, errors = prepare_matrix(variants, work_dir, stop_on=stop_on)
    builds: dict[str, VariantBuild] = {v.key: VariantBuild(v, None, None, None, errors[v.key])
                                       for v in variants if v.key in errors}
    bake_file = None
    ready = [v for v in variants if v.key in prepared]
    if ready:
        from buildkit.engine.buildx import check_buildx

        check_buildx(options.docker)  # after preparing: a patch queue that does not apply never runs buildx
        from buildkit.flows.pipeline import check_build_machine

        for v in ready:
            check_build_machine(prepared[v.key].plan.request, stream)
        document = matrix_document(ready, prepared, options, work_dir)
        bake_file = write_bake_file(work_dir / "docker-bake.json", document)
        outcomes = run_bake(bake_file, [v.target_name for v in ready], options, work_dir, stream=stream)
        for variant in ready:
            outcome = outcomes[variant.target_name]
            p = prepared[variant.key]
            if not outcome.ok:
                builds[variant.key] = VariantBuild(variant, p, outcome, None, outcome.error)
                continue
            report, error = verify_variant(p, outcome) if verify else (None, "")
            builds[variant.key] = VariantBuild(variant, p, outcome, report, error)
    return [builds[v.key] for v in variants], bake_file
