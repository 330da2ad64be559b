"""`buildkit tags`: the tags a published build of a version gets."""

from __future__ import annotations

import json

import click

from buildkit.cli.options import config_options, handle_errors, resolve
from buildkit.core.errors import ConfigError


@click.command()
@config_options
@click.option("--version", "version", required=True, help="Semver version, X.Y.Z[-pre].")
@click.option("--commit-sha", help="Commit for the sha- tag (default: the pinned source.commit).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {repository, version, immutable, moving}.")
@handle_errors
def tags(version: str, commit_sha: str | None, as_json: bool, **kwargs):
    """Print the tags a published build of VERSION gets, immutable first."""
    from buildkit.flows.pipeline import ref_and_pin
    from buildkit.release.publish import tags_for

    cfg = resolve(kwargs)
    _, pin = ref_and_pin(cfg)
    commit = commit_sha or pin
    if not commit:
        raise ConfigError("source.commit is not a full SHA; pass --commit-sha for the sha- tag")
    tag_set = tags_for(cfg, version, commit)
    if as_json:
        click.echo(json.dumps({"repository": cfg["image.name"], "version": version, "commit": commit,
                               "immutable": list(tag_set.immutable), "moving": list(tag_set.moving)}, indent=2))
        return
    for tag in tag_set.immutable:
        click.echo(f"{cfg['image.name']}:{tag}    immutable")
    for tag in tag_set.moving:
        click.echo(f"{cfg['image.name']}:{tag}    moving")
