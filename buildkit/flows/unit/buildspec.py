"""A plan and its rendered context as the engine's build spec (engine/specs.py), and its command line.

The one translation of a BuildPlan into what buildx is told: `buildkit build` (the pipeline),
`build --print`, `render`, `reproduce` and each bake target of `buildkit bake` use it.
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence

from buildkit.engine.api import Builder
from buildkit.engine.buildx import BuildOptions, oci_archive_path
from buildkit.engine.specs import BuildSpec
from buildkit.plan.plantypes import BuildPlan
from buildkit.plan.render import RenderResult


def build_spec(plan: BuildPlan, rendered: RenderResult, options: BuildOptions, metadata_file: Path,
               extra_tags: Sequence[str] = ()) -> BuildSpec:
    """What buildx builds for plan. The reproducible exporter's archive lies next to metadata_file
    unless options name one."""
    cache_name = plan.request.cache_name
    return BuildSpec(
        context=rendered.context_dir, dockerfile=rendered.dockerfile,
        platform=plan.request.platform, target=plan.request.target,
        build_args=(("SOURCE_DATE_EPOCH", str(plan.source_date_epoch)),),
        labels=tuple(plan.labels), annotations=plan.annotations, tags=(*plan.tags, *extra_tags),
        named_contexts=tuple((name, str(path)) for name, path in rendered.named_contexts),
        # {variant}: one cache per build unit (BuildRequest.cache_name)
        cache_from=tuple(entry.replace("{variant}", cache_name) for entry in options.cache_from),
        cache_to=tuple(entry.replace("{variant}", cache_name) for entry in options.cache_to),
        provenance=options.provenance, no_cache=options.no_cache,
        oci_archive=oci_archive_path(options, metadata_file) if options.reproducible else None,
        load=options.load, push=options.push)


def build_command(plan: BuildPlan, rendered: RenderResult, options: BuildOptions, metadata_file: Path,
                  engine: Builder) -> list[str]:
    """The exact command line the engine runs for plan (`buildkit build --print` and `render` show it)."""
    return engine.build_command(build_spec(plan, rendered, options, metadata_file),
                                      options.session(metadata_file))
