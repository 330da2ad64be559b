"""`buildkit render`: fetch, patch and render a build context without building."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click

from buildkit.cli.options import BuildkitCommand, config_options, handle_errors, resolve
from buildkit.engine.current import get_engine

METADATA_FILE = "metadata.json"


@click.command(cls=BuildkitCommand)
@config_options
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder to write the Dockerfile and build context into (new or empty).")
@handle_errors
def render(out_dir: str, **kwargs: Any) -> None:
    """Fetch, patch and render the Dockerfile and build context without building."""
    from buildkit.flows.unit.buildspec import build_command
    from buildkit.flows.unit.cudacontexts import missing_roots
    from buildkit.flows.unit.pipeline import prepare
    from buildkit.cli.unitspecs import unit_spec

    cfg = resolve(kwargs)
    out = Path(out_dir).resolve()
    engine = get_engine()
    spec = unit_spec(cfg, engine)
    prepared = prepare(spec, engine, out, lay_out=False)  # CUDA wheels resolved from the index, none downloaded
    # the command writes only into DIR (its metadata file, an OCI archive), which is also its context:
    # the context's .dockerignore leaves those out (plan/render.py)
    argv = build_command(prepared.plan, prepared.rendered, spec.build, out / METADATA_FILE, engine)
    click.echo(f"rendered {prepared.rendered.dockerfile} for {prepared.plan.request.variant} "
               f"at {prepared.source.commit}")
    click.echo("build it with:\n  " + shlex.join(argv))
    for root in missing_roots(prepared.rendered.named_contexts):
        click.echo(f"(nothing was downloaded: the CUDA root {root} is laid out from the wheels the lock records "
                   "by the first `buildkit build` of this release)")
