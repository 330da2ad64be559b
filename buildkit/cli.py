"""The `buildkit` command line. Every BuildkitError becomes one line on stderr and exit code 1."""

from __future__ import annotations

import functools
import json
import os
import shlex
import sys
from pathlib import Path

import click

from . import __version__
from .archs import arch_table
from .config import KEYS, find_config_file, load_config, parse_set_option
from .errors import BuildkitError, ConfigError

# CLI flag -> config key. Each flag overrides buildkit.toml and LLAMA_BUILDKIT_* variables.
FLAG_KEYS = {
    "source": "source.url", "commit": "source.commit", "patches": "source.patch_dir",
    "arch": "build.arch", "cuda": "build.cuda_version", "target": "build.target",
    "platform": "build.platform", "vmm": "build.no_vmm", "jobs": "build.jobs",
    "cmake_arg": "build.cmake_args", "builder": "build.builder", "progress": "build.progress",
    "cache_from": "build.cache_from", "cache_to": "build.cache_to", "provider": "base.provider",
    "os_image": "base.os_image", "devel_image": "base.devel_image", "runtime_image": "base.runtime_image",
    "cuda_root": "base.cuda_root", "image": "image.name", "image_version": "image.version",
    "cache_dir": "cache.dir", "lock": "lock.path",
}


def config_options(func):
    """The options shared by every command that resolves a build: each one names its config key."""
    opts = [
        click.option("--config", "config_path", type=click.Path(dir_okay=False),
                     help="buildkit.toml to read (default: ./buildkit.toml, or $LLAMA_BUILDKIT_CONFIG)."),
        click.option("--source", help="Fork repository: URL, local path or mirror [source.url]."),
        click.option("--commit", help="Pinned commit, full 40-hex SHA; a branch or tag builds its head "
                                      "[source.commit]."),
        click.option("--patches", help="Patch queue folder [source.patch_dir]."),
        click.option("--arch", help="CUDA architecture or cpu, see `buildkit archs` [build.arch]."),
        click.option("--cuda", help="CUDA version, MAJOR.MINOR [build.cuda_version]."),
        click.option("--target", type=click.Choice(["server", "full", "light"]), help="Image target [build.target]."),
        click.option("--platform", help="buildx platform [build.platform]."),
        click.option("--no-vmm/--vmm", "vmm", default=None,
                     help="GGML_CUDA_NO_VMM on (default) or off; off links the libcuda stub [build.no_vmm]."),
        click.option("--jobs", type=int, help="Parallel compile jobs, 0 = all cores [build.jobs]."),
        click.option("--cmake-arg", multiple=True, help="Extra -DNAME=VALUE for CMake, repeatable [build.cmake_args]."),
        click.option("--provider", type=click.Choice(["nvidia", "wheels"]),
                     help="CUDA toolkit from NVIDIA images, or from PyPI wheels on --os-image [base.provider]."),
        click.option("--os-image", help="Debian/Ubuntu base for cpu and provider wheels [base.os_image]."),
        click.option("--devel-image", help="Build stage image, provider nvidia [base.devel_image]."),
        click.option("--runtime-image", help="Runtime stage image, provider nvidia [base.runtime_image]."),
        click.option("--cuda-root", help="Ready CUDA root folder for provider wheels [base.cuda_root]."),
        click.option("--image", help="Image repository name [image.name]."),
        click.option("--image-version", help="Version label [image.version]."),
        click.option("--builder", help="buildx builder [build.builder]."),
        click.option("--progress", type=click.Choice(["auto", "plain", "tty", "quiet", "rawjson"]),
                     help="buildx progress output [build.progress]."),
        click.option("--cache-from", multiple=True, help="buildx --cache-from, repeatable [build.cache_from]."),
        click.option("--cache-to", multiple=True, help="buildx --cache-to, repeatable [build.cache_to]."),
        click.option("--cache-dir", help="Cache folder for git mirrors and CUDA roots [cache.dir]."),
        click.option("--lock", help="Lock file to write [lock.path]."),
        click.option("--set", "set_items", multiple=True, metavar="KEY=VALUE",
                     help="Override any config key, e.g. --set build.jobs=4 (see `buildkit config`)."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def resolve(kwargs: dict):
    """Pop the config options out of kwargs and resolve the configuration."""
    config_path = kwargs.pop("config_path")
    overrides = parse_set_option(kwargs.pop("set_items"))
    for flag, key in FLAG_KEYS.items():
        value = kwargs.pop(flag)
        if value is None or value == ():
            continue
        origin = "--no-vmm/--vmm" if flag == "vmm" else "--" + flag.replace("_", "-")
        overrides[key] = (list(value) if isinstance(value, tuple) else value, origin)
    path = find_config_file(config_path, os.environ, Path.cwd())
    return load_config(path, os.environ, overrides)


def handle_errors(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except BuildkitError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("error: interrupted", err=True)
            sys.exit(130)
    return wrapper


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
    cfg = resolve(kwargs)
    if as_json:
        click.echo(json.dumps({k.name: {"value": cfg[k.name], "origin": cfg.origins[k.name]} for k in KEYS},
                              indent=2))
        return
    click.echo(f"# config file: {cfg.path if cfg.path else 'none (defaults)'}")
    width = max(len(k.name) for k in KEYS)
    for key in KEYS:
        value = json.dumps(cfg[key.name]) if not isinstance(cfg[key.name], str) else cfg[key.name]
        click.echo(f"{key.name.ljust(width)}  {value}    ({cfg.origins[key.name]}; {key.env_var})")


@main.command()
@config_options
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder to write the Dockerfile and build context into (new or empty).")
@handle_errors
def render(out_dir: str, **kwargs):
    """Fetch, patch and render the Dockerfile and build context without building."""
    from .buildx import buildx_argv
    from .pipeline import build_options, prepare

    cfg = resolve(kwargs)
    prepared = prepare(cfg, Path(out_dir))
    argv = buildx_argv(prepared.plan, prepared.rendered, build_options(cfg),
                       Path(out_dir).resolve().parent / "metadata.json")
    click.echo(f"rendered {prepared.rendered.dockerfile} for {prepared.plan.request.variant} "
               f"at {prepared.source.commit}")
    click.echo("build it with:\n  " + shlex.join(argv))


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
@click.option("--tag", "extra_tags", multiple=True, help="Extra local tag (the part after ':'), repeatable.")
@click.option("--push", is_flag=True,
              help="Publish to the registry in image.name: skip the build if the registry has its build key, "
                   "else build, verify and push every tag (see `buildkit tags`).")
@click.option("--print", "print_only", is_flag=True,
              help="Render into a kept folder and print the exact buildx command instead of building.")
@click.option("--no-verify", is_flag=True, help="Skip the smoke checks on the built image.")
@handle_errors
def build(version, bump, force, extra_tags: tuple[str, ...], push: bool, print_only: bool, no_verify: bool,
          **kwargs):
    """Fetch the pinned commit, patch, render, build with buildx, verify and write the lock."""
    from .buildx import buildx_argv
    from .pipeline import build as run_pipeline, build_options, cache_root, prepare

    if version:
        kwargs["image_version"] = version
    cfg = resolve(kwargs)
    if print_only:
        import tempfile

        base = cache_root(cfg) / "contexts"
        base.mkdir(parents=True, exist_ok=True)
        out = Path(tempfile.mkdtemp(prefix="render-", dir=base))
        prepared = prepare(cfg, out / "context", extra_tags=extra_tags)
        click.echo(shlex.join(buildx_argv(prepared.plan, prepared.rendered, build_options(cfg),
                                          out / "metadata.json")))
        return
    if push:
        from .publish import build_and_push

        published = build_and_push(cfg, version=version, bump=bump, force=force, verify=not no_verify)
        what = {"built": "built, verified and pushed",
                "engine": "pushed the image with this build key already in the engine, nothing built",
                "registry": "already published (the registry has this build key), nothing built"}[published.origin]
        click.echo(f"{what}: {published.repository}@{published.digest} version {published.version}")
        click.echo(f"tags: {' '.join(published.tags)}")
        click.echo(f"changed: {' '.join(published.added) or 'nothing'}")
        return
    built = run_pipeline(cfg, extra_tags=extra_tags, verify=not no_verify)
    for check in built.report.checks:
        click.echo(f"verify {check.name}: {check.status}: {check.detail}")
    click.echo(f"built {built.result.tags[0]} ({built.result.digest or built.result.config_digest}) "
               f"from {built.prepared.source.commit} in {built.result.seconds:.0f}s")
    click.echo(f"tags: {' '.join(built.result.tags)}")
    click.echo(f"lock: {built.lock_path}")


@main.command()
@config_options
@click.option("--force", is_flag=True, help="Push even if the registry has this build key already.")
@handle_errors
def push(force: bool, **kwargs):
    """Publish the image of the lock's entry for this variant (built before, still in the engine).

    It gets every tag of its version (see `buildkit tags`); the tags are pushed to the registry
    named in image.name with the credentials of `docker login`.
    """
    from .publish import push_local

    published = push_local(resolve(kwargs), force=force)
    click.echo(f"pushed {published.repository}@{published.digest} version {published.version}")
    click.echo(f"tags: {' '.join(published.tags)}")
    click.echo(f"changed: {' '.join(published.added) or 'nothing'}")


@main.command()
@config_options
@click.option("--version", "version", required=True, help="Semver version, X.Y.Z[-pre].")
@click.option("--commit-sha", help="Commit for the sha- tag (default: the pinned source.commit).")
@handle_errors
def tags(version: str, commit_sha: str | None, **kwargs):
    """Print the tags a published build of VERSION gets, immutable first."""
    from .pipeline import ref_and_pin
    from .publish import tags_for

    cfg = resolve(kwargs)
    _, pin = ref_and_pin(cfg)
    commit = commit_sha or pin
    if not commit:
        raise ConfigError("source.commit is not a full SHA; pass --commit-sha for the sha- tag")
    tag_set = tags_for(cfg, version, commit)
    for tag in tag_set.immutable:
        click.echo(f"{cfg['image.name']}:{tag}    immutable")
    for tag in tag_set.moving:
        click.echo(f"{cfg['image.name']}:{tag}    moving")


if __name__ == "__main__":  # pragma: no cover
    main()
