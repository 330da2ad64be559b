"""`buildkit promote`: give a nightly the release tags of a version, nothing rebuilt."""

from __future__ import annotations

from typing import Any

import click

from buildkit.cli.options import BuildkitCommand, config_options, handle_errors, release_option, resolve
from buildkit.cli.output import echo_published


@click.command(cls=BuildkitCommand)
@config_options(only=("image",))
@click.argument("nightly_tag", metavar="nightly-<variant>")
@release_option("Release version X.Y.Z to give the nightly (a leading v is dropped).", required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--step-summary", "step_summary", type=click.Path(dir_okay=False), metavar="FILE",
              help="Append what was promoted to FILE as Markdown (CI: \"$GITHUB_STEP_SUMMARY\").")
@handle_errors
def promote(nightly_tag: str, version: str, as_json: bool, step_summary: str | None, **kwargs: Any) -> None:
    """Turn a nightly into a release: its digest gets the release tags of --release, nothing is rebuilt."""
    from buildkit.plan.tags import normalise_version
    from buildkit.plan.tagset import DefaultVariantRule
    from buildkit.release.promote import promote as run_promote, promotion_markdown

    version = normalise_version(version)  # v1.2.3 is 1.2.3, as docker/metadata-action's type=semver

    cfg = resolve(kwargs)
    done = run_promote(cfg.image.name, DefaultVariantRule.of(cfg), nightly_tag, version)
    echo_published(done, f"promoted {done.repository}:{done.source_tag} ({done.nightly_version or 'no version label'}, "
                         f"{done.commit[:12]}) to {version}: {done.repository}@{done.digest}", as_json)
    if step_summary:
        from buildkit.core.savefile import write_or_keep

        problem = write_or_keep(step_summary, promotion_markdown(done), "the step summary", append=True)
        if problem:
            click.echo(f"warning: {problem}", err=True)
