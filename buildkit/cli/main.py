"""The `buildkit` command line. Every BuildkitError becomes one line on stderr and exit code 1."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from buildkit import __version__
from buildkit.plan.archs import arch_table
from buildkit.cli.options import config_options, handle_errors, resolve
from buildkit.plan.config import KEYS
from buildkit.core.errors import ConfigError

@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="buildkit")
def main():
    """Build a pinned commit of a llama.cpp fork into a tested container image for one CUDA arch.

    \b
    Typical use:
      buildkit archs                      # what can be built
      buildkit config                     # resolved settings and where each came from
      buildkit render --arch sm_120 --out ctx/
      buildkit build --arch sm_120        # fetch, patch, render, buildx, verify, lock

    Settings come from buildkit.toml, then LLAMA_BUILDKIT_* variables, then flags.
    """


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def archs(as_json: bool):
    """List the architectures buildkit can build, with CMake string and minimum CUDA."""
    rows = arch_table()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    click.echo("  ".join(c.ljust(widths[c]) for c in cols).rstrip())
    for row in rows:
        click.echo("  ".join(row[c].ljust(widths[c]) for c in cols).rstrip())


@main.command("config")
@config_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {key: {value, origin}}.")
@handle_errors
def config_cmd(as_json: bool, **kwargs):
    """Print the resolved configuration and where each value came from."""
    from buildkit.source.urlcreds import redact_url

    cfg = resolve(kwargs)
    shown = {k.name: redact_url(cfg[k.name]) if isinstance(cfg[k.name], str) else cfg[k.name] for k in KEYS}
    if as_json:
        click.echo(json.dumps({k.name: {"value": shown[k.name], "origin": cfg.origins[k.name]} for k in KEYS},
                              indent=2))
        return
    click.echo(f"# config file: {cfg.path if cfg.path else 'none (defaults)'}")
    width = max(len(k.name) for k in KEYS)
    for key in KEYS:
        value = json.dumps(shown[key.name]) if not isinstance(shown[key.name], str) else shown[key.name]
        click.echo(f"{key.name.ljust(width)}  {value}    ({cfg.origins[key.name]}; {key.env_var})")


@main.command()
@config_options
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder to write the Dockerfile and build context into (new or empty).")
@handle_errors
def render(out_dir: str, **kwargs):
    """Fetch, patch and render the Dockerfile and build context without building."""
    from buildkit.engine.buildx import buildx_argv
    from buildkit.flows.pipeline import build_options, prepare

    cfg = resolve(kwargs)
    prepared = prepare(cfg, Path(out_dir))
    argv = buildx_argv(prepared.plan, prepared.rendered, build_options(cfg),
                       Path(out_dir).resolve().parent / "metadata.json")
    click.echo(f"rendered {prepared.rendered.dockerfile} for {prepared.plan.request.variant} "
               f"at {prepared.source.commit}")
    click.echo("build it with:\n  " + shlex.join(argv))


def published_json(published) -> dict:
    """A PublishResult for --json."""
    from dataclasses import asdict

    data = asdict(published)
    data["tags"], data["added"] = list(published.tags), list(published.added)
    return data


VERSION_OPTIONS = [
    click.option("--version", "version", help="Semver version to publish (X.Y.Z[-pre]); sets the version label."),
    click.option("--bump", type=click.Choice(["patch", "minor", "major"]), default="patch", show_default=True,
                 help="With --push and no --version: bump the highest X.Y.Z-<variant> tag in the registry."),
    click.option("--force", is_flag=True, help="With --push: rebuild even if the registry has this build key."),
]


def version_options(func):
    for opt in reversed(VERSION_OPTIONS):
        func = opt(func)
    return func


@main.command()
@config_options
@version_options
@click.option("--tag", "extra_tags", multiple=True,
              help="Extra local tag (the part after ':'), repeatable; with --push also pushed (a moving tag).")
@click.option("--push", is_flag=True,
              help="Publish to the registry in image.name: skip the build if the registry has its build key, "
                   "else build, verify and push every tag (see `buildkit tags`).")
@click.option("--print", "print_only", is_flag=True,
              help="Render into a kept folder and print the exact buildx command instead of building.")
@click.option("--no-verify", is_flag=True, help="Skip the smoke checks on the built image.")
@click.option("--no-load", is_flag=True,
              help="With --push: push the built OCI archive and keep no image in the engine (loaded for the "
                   "checks only; never with --no-verify).")
@click.option("--no-preflight", is_flag=True,
              help="Skip the engine and disk checks run before anything else (`buildkit doctor` has them all).")
@click.option("--min-free-gb", type=float, default=None,
              help="Free disk space the preflight check asks for (default: 25 GB for CUDA, 4 GB for cpu).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the result as JSON on stdout (progress and buildx's output stay on stderr).")
@handle_errors
def build(version, bump, force, extra_tags: tuple[str, ...], push: bool, print_only: bool, no_verify: bool,
          no_load: bool, no_preflight: bool, min_free_gb: float | None, as_json: bool, **kwargs):
    """Fetch the pinned commit, patch, render, build with buildx, verify and write the lock."""
    from buildkit.engine.buildx import buildx_argv
    from buildkit.flows.pipeline import build as run_pipeline, build_options, cache_root, prepare

    if version:
        kwargs["image_version"] = version
    cfg = resolve(kwargs)
    if no_load and not push:
        raise ConfigError("--no-load goes with --push (a build without --push is for the engine)")
    if print_only:
        import tempfile

        base = cache_root(cfg) / "contexts"
        base.mkdir(parents=True, exist_ok=True)
        out = Path(tempfile.mkdtemp(prefix="render-", dir=base))
        prepared = prepare(cfg, out / "context", extra_tags=extra_tags)
        click.echo(shlex.join(buildx_argv(prepared.plan, prepared.rendered, build_options(cfg),
                                          out / "metadata.json")))
        return
    if not no_preflight:
        from buildkit.flows.doctor import preflight

        preflight(cfg, min_free_gb=min_free_gb, echo=lambda line: click.echo(line, err=True))
    if push:
        from buildkit.release.publish import build_and_push

        published = build_and_push(cfg, version=version, bump=bump, force=force, verify=not no_verify,
                                   load=not no_load, extra_tags=extra_tags)
        if as_json:
            click.echo(json.dumps(published_json(published), indent=2))
            return
        what = {"built": "built, verified and pushed",
                "engine": "pushed the image with this build key already in the engine, nothing built",
                "registry": "already published (the registry has this build key), nothing built"}[published.origin]
        click.echo(f"{what}: {published.repository}@{published.digest} version {published.version}")
        click.echo(f"tags: {' '.join(published.tags)}")
        click.echo(f"changed: {' '.join(published.added) or 'nothing'}")
        return
    from buildkit.core.progress import stages, summary, summary_line

    built = run_pipeline(cfg, extra_tags=extra_tags, verify=not no_verify)
    facts = summary(built.prepared.plan.request.variant, built.result.seconds,
                    built.result.tags[0] if built.result.tags else None, built.result.compressed_size,
                    built.result.ccache, stages().times, built.result.tty)
    if as_json:
        click.echo(json.dumps({
            "image": built.result.tags[0] if built.result.tags else None, "digest": built.result.digest,
            "image_id": built.result.config_digest, "tags": list(built.result.tags),
            "commit": built.prepared.source.commit, "build_key": built.prepared.build_key,
            "lock": str(built.lock_path), "verify": [vars(c) for c in built.report.checks],
            "summary": facts}, indent=2))
        return
    for check in built.report.checks:
        click.echo(f"verify {check.name}: {check.status}: {check.detail}")
    click.echo(f"built {built.result.tags[0]} ({built.result.digest or built.result.config_digest}) "
               f"from {built.prepared.source.commit} in {built.result.seconds:.0f}s")
    click.echo(f"tags: {' '.join(built.result.tags)}")
    click.echo(f"lock: {built.lock_path}")
    click.echo(summary_line(facts))


@main.command()
@config_options
@click.option("--force", is_flag=True, help="Push even if the registry has this build key already.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def push(force: bool, as_json: bool, **kwargs):
    """Publish the image of the lock's entry for this variant (built before, still in the engine).

    It gets every tag of its version (see `buildkit tags`); the tags are pushed to the registry
    named in image.name with the credentials of `docker login`.
    """
    from buildkit.release.publish import push_local

    published = push_local(resolve(kwargs), force=force)
    if as_json:
        click.echo(json.dumps(published_json(published), indent=2))
        return
    click.echo(f"pushed {published.repository}@{published.digest} version {published.version}")
    click.echo(f"tags: {' '.join(published.tags)}")
    click.echo(f"changed: {' '.join(published.added) or 'nothing'}")


@main.command()
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


from buildkit.cli.nightly import bake, ci, nightly, promote  # noqa: E402

main.add_command(nightly)
main.add_command(promote)
main.add_command(bake)
main.add_command(ci)

from buildkit.cli.bench import bench, run  # noqa: E402  (bench and runtime profiles)
main.add_command(bench); main.add_command(run)  # noqa: E702

from buildkit.cli.reproduce import diff, reproduce  # noqa: E402
main.add_command(reproduce); main.add_command(diff)  # noqa: E702

from buildkit.cli.doctor import doctor  # noqa: E402
main.add_command(doctor)

from buildkit.cli.ccache import ccache  # noqa: E402
main.add_command(ccache)


if __name__ == "__main__":  # pragma: no cover
    main()
