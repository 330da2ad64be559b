"""`buildkit tags`: the tags a published build of a version gets, and the rules of those named only then.

The sha- tag's commit is --commit (source.commit), 7 to 40 hex digits: one option, no --commit-sha."""

from __future__ import annotations

import re
from typing import Any

import click

from buildkit.cli.options import BuildkitCommand, config_options, handle_errors, release_option, resolve
from buildkit.cli.output import emit_json
from buildkit.core.errors import ConfigError
from buildkit.plan.buildplan import make_request
from buildkit.plan.config import ResolvedConfig
from buildkit.plan.tagset import TagTarget

_SHA = re.compile(r"[0-9a-fA-F]{7,40}")


def tag_target(cfg: ResolvedConfig, commit: str) -> TagTarget:
    """What a build of cfg at commit is published as: its variant's name, and whether it is the default."""
    return TagTarget.of(cfg, make_request(cfg).artifact_variant, commit)


@click.command(cls=BuildkitCommand)
@config_options(only=("variant", "image"), also=("commit",))
@release_option("Semver version of the release, X.Y.Z[-pre] (a leading v is dropped).", required=True)
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: {repository, version, commit, variant, immutable, moving, rules}.")
@handle_errors
def tags(version: str, as_json: bool, **kwargs: Any) -> None:
    """Print the tags a published build of a --release gets, immutable first, then the rules of the tags a
    publish names only then (the build key's, the nightly's). --commit gives the sha- tag's commit."""
    from buildkit.plan.tags import normalise_version, parse_version, publish_rules
    from buildkit.plan.tagset import publication_tags

    version = normalise_version(version)
    parse_version(version)
    cfg = resolve(kwargs)
    commit = cfg.source.commit.strip()
    if not _SHA.fullmatch(commit):
        raise ConfigError(f"the sha- tag needs a commit SHA (7 to 40 hex digits); source.commit is {commit!r} "
                          f"({cfg.origins['source.commit']}): pass --commit SHA")
    commit = commit.lower()
    target = tag_target(cfg, commit)
    tag_set = publication_tags(target, version)
    name = target.variant
    rules = publish_rules(name, commit)
    repo = cfg.image.name
    if as_json:
        emit_json({"repository": repo, "version": version, "commit": commit, "variant": name,
                   "immutable": list(tag_set.immutable), "moving": list(tag_set.moving),
                   "rules": [{"tag": r.pattern, "kind": r.kind, "when": r.when} for r in rules]})
        return
    for tag in tag_set.immutable:
        click.echo(f"{repo}:{tag}    immutable")
    for tag in tag_set.moving:
        click.echo(f"{repo}:{tag}    moving")
    click.echo("# and, named only when published:")
    for rule in rules:
        click.echo(f"# {repo}:{rule.pattern}    {rule.kind}: {rule.when}")
