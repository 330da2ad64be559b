"""`buildkit push`: publish the image of the lock's entry for this variant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from buildkit.cli.options import BuildkitCommand, config_options, handle_errors, resolve
from buildkit.cli.output import echo_published
from buildkit.cli.signing import make_signer, sign_key_option
from buildkit.engine.current import get_engine


@click.command(cls=BuildkitCommand)
@config_options
@click.option("--force", is_flag=True, help="Push even if the registry has this build key already.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@sign_key_option
@handle_errors
def push(force: bool, as_json: bool, sign_key: Path | None, **kwargs: Any) -> None:
    """Publish the image of the lock's entry for this variant (built before, still in the engine).

    It gets every tag of its version (see `buildkit tags`); the tags are pushed to the registry
    named in image.name with the credentials of `docker login`. With a signing key, its digest is
    signed before any moving tag points at it, with its provenance and SBOM attached.
    """
    from buildkit.flows.unit.publishing import push_local
    from buildkit.cli.unitspecs import unit_spec

    cfg = resolve(kwargs)
    engine = get_engine()
    signer = make_signer(sign_key, cfg)  # (before the request is checked, as it was)
    published = push_local(unit_spec(cfg, engine), engine, force=force, signer=signer)
    echo_published(published, f"pushed {published.repository}@{published.digest} version {published.version}", as_json)
