"""`buildkit nightly`: build and push the matrix for the head of source.branch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from buildkit.cli.options import BuildkitCommand, config_options, handle_errors, resolve
from buildkit.core.errors import ConfigError


@click.command(cls=BuildkitCommand)
@config_options
@click.option("--json", "json_path", metavar="FILE",
              help="Write the summary as JSON to FILE ('-' for stdout; the text summary then goes to stderr).")
@click.option("--date", help="Nightly date YYYYMMDD for the version (default: today, UTC).")
@click.option("--force", is_flag=True, help="Build every variant even if it is up to date.")
@click.option("--no-verify", is_flag=True, help="Skip the smoke checks on the built images.")
@handle_errors
def nightly(json_path: str | None, date: str | None, force: bool, no_verify: bool, **kwargs):
    """Build and push the matrix for the head of source.branch, unless every variant has it already.

    \b
    Resolves the branch head with git ls-remote; a variant is up to date when the registry's
    nightly-<variant> image was built from that commit with the current patch queue. Otherwise
    the variants that are not are built with docker buildx bake, verified, and pushed as
    <next patch>-nightly.<YYYYMMDD>-<variant> and nightly-<variant>; the lock is updated.
    A failing variant does not stop the others; the exit code is 1 if any failed.
    The summary goes to --json and, as Markdown, to $GITHUB_STEP_SUMMARY when set.
    """
    from buildkit.flows.nightly import run_nightly, write_summaries

    cfg = resolve(kwargs)
    if json_path and json_path != "-" and Path(json_path).is_dir():
        raise ConfigError(f"--json {json_path} is a folder; name the summary's file")
    summary = run_nightly(cfg, date=date, force=force, verify=not no_verify)
    unsaved = write_summaries(summary, json_path)
    out = sys.stderr if json_path == "-" else sys.stdout
    if json_path == "-":
        click.echo(json.dumps(summary.to_dict(), indent=2))
    click.echo(summary.headline(), file=out)
    if not summary.up_to_date and summary.new_commit:
        click.echo(f"old commit: {summary.old_commit or 'none'}", file=out)
        click.echo(f"new commit: {summary.new_commit}", file=out)
        if summary.changelog is not None:
            for commit in summary.changelog.commits:
                click.echo(f"  {commit.sha[:12]} {commit.subject}", file=out)
            if summary.changelog.note:
                click.echo(f"  ({summary.changelog.note})", file=out)
    for v in summary.variants:
        took = f" in {v.build_seconds:.0f}s" if v.build_seconds is not None else ""
        detail = f": {v.error}" if v.error else (f" {v.digest}" if v.digest else "")
        click.echo(f"{v.variant}: {v.status}{took}{detail}", file=out)
    errors = [summary.error] if summary.error else []
    if errors or unsaved:
        click.echo(f"error: {'; '.join(errors + unsaved)}", err=True)
    sys.exit(0 if summary.ok and not unsaved else 1)
