"""Commands for the build matrix: `nightly`, `promote`, `bake` and `ci github`."""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import click

from buildkit.cli.options import config_options, handle_errors, resolve


@click.command()
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
    summary = run_nightly(cfg, date=date, force=force, verify=not no_verify)
    write_summaries(summary, json_path)
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
    if summary.error:
        click.echo(f"error: {summary.error}", err=True)
    sys.exit(0 if summary.ok else 1)


@click.command()
@config_options
@click.argument("nightly_tag", metavar="nightly-<variant>")
@click.option("--version", "version", required=True, help="Release version X.Y.Z to give the nightly.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def promote(nightly_tag: str, version: str, as_json: bool, **kwargs):
    """Turn a nightly into a release: its digest gets the release tags of VERSION, nothing is rebuilt."""
    from dataclasses import asdict

    from buildkit.release.promote import promote as run_promote

    done = run_promote(resolve(kwargs), nightly_tag, version)
    if as_json:
        data = asdict(done)
        data["tags"], data["added"] = list(done.tags), list(done.added)
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"promoted {done.repository}:{done.source_tag} ({done.nightly_version or 'no version label'}, "
               f"{done.commit[:12]}) to {version}: {done.repository}@{done.digest}")
    click.echo(f"tags: {' '.join(done.tags)}")
    click.echo(f"changed: {' '.join(done.added) or 'nothing'}")


@click.command()
@config_options
@click.option("--print", "print_only", is_flag=True,
              help="Render every variant into a kept folder and print docker-bake.json instead of building.")
@click.option("--file", "bake_path", type=click.Path(dir_okay=False),
              help="Also write the bake file to this path.")
@click.option("--no-verify", is_flag=True, help="Skip the smoke checks on the built images.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the result as JSON: {lock, variants: [{variant, status, image, digest, seconds, error}]}.")
@handle_errors
def bake(print_only: bool, bake_path: str | None, no_verify: bool, as_json: bool, **kwargs):
    """Build the matrix (matrix.archs x matrix.cuda_versions x matrix.targets) with docker buildx bake.

    One bake target per variant, so BuildKit builds them in parallel and a multi-node builder
    (--builder) spreads them. Each image is verified and locked; a failing variant does not stop
    the others, and the exit code is 1 if any failed.
    """
    from buildkit.engine.bakefile import write_bake_file
    from buildkit.flows.matrix import build_matrix, matrix_document, prepare_matrix
    from buildkit.plan.matrix import matrix_variants
    from buildkit.core.errors import BuildkitError
    from buildkit.release.lock import write_lock_entry
    from buildkit.flows.pipeline import build_options, cache_root, lock_entry

    cfg = resolve(kwargs)
    variants, excluded = matrix_variants(cfg)
    for combination, reason in excluded:
        click.echo(f"left out of the matrix: {combination}: {reason}", err=True)
    options = build_options(cfg)
    if print_only:
        base = cache_root(cfg) / "contexts"
        base.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="bake-", dir=base))
        prepared, errors = prepare_matrix(variants, work)
        if errors:
            raise BuildkitError("; ".join(f"{k}: {e}" for k, e in errors.items()))
        document = matrix_document(variants, prepared, options, work)
        path = write_bake_file(Path(bake_path) if bake_path else work / "docker-bake.json", document)
        click.echo(json.dumps(document, indent=2))
        click.echo(f"# written to {path}; build it with: docker buildx bake --file {path}"
                   f"{' --builder ' + options.builder if options.builder else ''}", err=True)
        return
    with tempfile.TemporaryDirectory(prefix="buildkit-bake-") as tmp:
        builds, bake_file = build_matrix(variants, options, Path(tmp), verify=not no_verify)
        if bake_path and bake_file:
            Path(bake_path).write_text(bake_file.read_text())
        lock_path = cfg.path_value("lock.path")
        failed = 0
        rows = []
        for b in builds:
            seconds = round(b.outcome.seconds, 1) if b.outcome else None
            if not b.ok:
                failed += 1
                rows.append({"variant": b.variant.key, "status": "failed", "image": None, "digest": None,
                             "seconds": seconds, "error": b.error})
                if not as_json:
                    click.echo(f"{b.variant.key}: failed: {b.error}")
                continue
            result = b.outcome.result
            write_lock_entry(lock_path, lock_entry(b.prepared, result))
            rows.append({"variant": b.variant.key, "status": "built", "image": result.tags[0] if result.tags else None,
                         "digest": result.digest or result.config_digest, "seconds": seconds, "error": ""})
            if not as_json:
                click.echo(f"{b.variant.key}: built {result.tags[0]} ({result.digest or result.config_digest})")
    if as_json:
        click.echo(json.dumps({"lock": str(lock_path), "ok": not failed, "variants": rows,
                               "excluded": [{"combination": c, "reason": r} for c, r in excluded]}, indent=2))
    else:
        click.echo(f"lock: {lock_path}")
    sys.exit(1 if failed else 0)


@click.group()
def ci():
    """Generate CI configuration that runs buildkit."""


@ci.command("github")
@config_options
@click.option("--out", "out_path", type=click.Path(dir_okay=False),
              help="Workflow file to write [default: .github/workflows/buildkit-nightly.yml].")
@click.option("--cron", default=None, help="Schedule, 5-field cron in UTC [default: 17 3 * * *].")
@click.option("--username-secret", default="REGISTRY_USERNAME", show_default=True,
              help="Name of the secret holding the registry user (GITHUB_TOKEN: use the workflow's actor).")
@click.option("--password-secret", default="REGISTRY_PASSWORD", show_default=True,
              help="Name of the secret holding the registry password or token.")
@click.option("--python", "python_version", default="3.11", show_default=True, help="Python for the runner.")
@click.option("--install", "install_spec", default=None,
              help="What pip installs on the runner, verbatim [default: git+URL@REF, see --buildkit-repo].")
@click.option("--buildkit-repo", default=None, metavar="URL",
              help="Git repository of buildkit for the runner's pip install [default: the one this buildkit was "
                   "installed from with pip install git+URL@REF].")
@click.option("--buildkit-ref", default=None, metavar="REF",
              help="Tag or commit of --buildkit-repo [default: v<this version>, or the installed commit].")
@click.option("--runner", default=None,
              help="runs-on label [default: ubuntu-latest; ubuntu-24.04-arm when build.platform is linux/arm64].")
@click.option("--layer-cache", type=click.Choice(["gha", "registry", "none"]), default="gha", show_default=True,
              help="Where BuildKit's layer cache is kept between runs: the GitHub Actions cache, or "
                   "<image.name>:buildcache-<variant> tags in the registry.")
@click.option("--no-ccache", is_flag=True, help="Do not carry the ccache from run to run.")
@click.option("--no-free-disk", is_flag=True, help="Leave out the step that frees disk space on the runner.")
@click.option("--force", is_flag=True, help="Overwrite a workflow file that differs.")
@click.option("--stdout", "to_stdout", is_flag=True, help="Print the workflow instead of writing it.")
@handle_errors
def github(out_path, cron, username_secret, password_secret, python_version, install_spec, buildkit_repo,
           buildkit_ref, runner, layer_cache, no_ccache, no_free_disk, force, to_stdout, **kwargs):
    """Write the GitHub Actions workflow running `buildkit nightly` daily and on demand.

    Run it at the root of the repository that holds buildkit.toml: --config is kept as a path
    relative to here, and --image is passed on to the nightly.
    """
    from buildkit.flows.ciworkflow import (DEFAULT_CRON, DEFAULT_PATH, WorkflowOptions, check_cron, config_in_repo,
                             install_spec as default_install, render_workflow, runner_for, write_workflow)
    from buildkit.flows.nightly import repository_of

    cfg = resolve(kwargs)
    check_cron(cron or DEFAULT_CRON)
    repository = repository_of(cfg)
    options = WorkflowOptions(registry=repository.registry, cron=cron or DEFAULT_CRON,
                              username_secret=username_secret, password_secret=password_secret,
                              python_version=python_version,
                              install=install_spec or default_install(buildkit_repo, buildkit_ref),
                              runner=runner or runner_for(cfg["build.platform"]), layer_cache=layer_cache,
                              cache_ref=repository.name if layer_cache == "registry" else "",
                              ccache=not no_ccache, free_disk=not no_free_disk)
    if cfg.origins["image.name"] == "--image":
        options = replace(options, image=cfg["image.name"])
    if cfg.path is not None:
        options = replace(options, config=config_in_repo(cfg.path, Path.cwd()))
    text = render_workflow(options)
    if to_stdout:
        click.echo(text, nl=False)
        return
    path = Path(out_path) if out_path else DEFAULT_PATH
    what = write_workflow(path, text, force=force)
    click.echo(f"{what} {path}: daily at '{options.cron}' (UTC) and on workflow_dispatch; "
               f"set the secrets {username_secret} and {password_secret}"
               if username_secret != "GITHUB_TOKEN" else f"{what} {path}")
