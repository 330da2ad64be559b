"""`buildkit build`: fetch, patch, render, build, verify and lock one variant (or publish it with --push)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from buildkit.cli.options import (BuildkitCommand, Decorator, config_options, handle_errors, release_option,
                                  resolve)
from buildkit.cli.output import echo_published, emit_json
from buildkit.cli.signing import make_signer, sign_key_option
from buildkit.core.errors import ConfigError
from buildkit.engine.api import Engine
from buildkit.engine.current import get_engine

if TYPE_CHECKING:
    from buildkit.core.livedisplay import LiveDisplay
    from buildkit.plan.config import ResolvedConfig
    from buildkit.plan.tags import Bump


VERSION_OPTIONS: list[Decorator] = [
    release_option("Semver version to publish (X.Y.Z[-pre], a leading v is dropped): the version label "
                   "[image.version], and with --push the release tags."),
    click.option("--bump", type=click.Choice(["patch", "minor", "major"]), default="patch", show_default=True,
                 help="With --push and no --release: bump the highest X.Y.Z-<variant> tag in the registry."),
    click.option("--force", is_flag=True, help="With --push: rebuild even if the registry has this build key."),
]


def version_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed(VERSION_OPTIONS):
        func = opt(func)
    return func


@click.command(cls=BuildkitCommand)
@config_options
@version_options
@click.option("--tag", "extra_tags", multiple=True,
              help="Extra local tag (the part after ':'), repeatable; with --push also pushed (a moving tag).")
@click.option("--push", is_flag=True,
              help="Publish to the registry in image.name: skip the build if the registry has its build key, "
                   "else build, verify and push every tag (see `buildkit tags`).")
@click.option("--print", "print_only", is_flag=True,
              help="Print the exact buildx command instead of building (rendered into buildkit's build folder, "
                   "its Dockerfile removed again; `buildkit render --out DIR` keeps one).")
@click.option("--no-verify", is_flag=True, help="Skip the smoke checks on the built image.")
@click.option("--no-cache", "no_cache", is_flag=True, default=None,
              help="Run every build step again, none from the layer cache (buildx --no-cache). The compile "
                   "reads nothing from the ccache and writes into a cache mount of its own, since --no-cache "
                   "empties the mount it is given: the warm ccache stays for the next build [build.no_cache].")
@click.option("--no-load", is_flag=True,
              help="With --push: push the built OCI archive and keep no image in the engine (loaded for the "
                   "checks only; never with --no-verify).")
@click.option("--no-preflight", is_flag=True,
              help="Skip the engine and disk checks run before anything else (`buildkit doctor` has them all).")
@click.option("--min-free-gb", type=float, default=None,
              help="Free disk space the preflight check asks for, in GB (default: build.min_free_gb, else an estimate "
                   "by variant kind: 4 for cpu, 16 for CUDA from wheels, 25 from NVIDIA's images).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the result as JSON on stdout (progress and buildx's output stay on stderr).")
@click.option("--tests", is_flag=True,
              help="Also build the tests target (the image plus the fork's test-backend-ops, tag <tag>-tests) for "
                   "`buildkit gpu-check`; with --push also pushed, by digest, under the build-key tag with -tests "
                   "(bk-<key>-<variant>-tests): never a release tag, not signed (docs/gpu.md).")
@sign_key_option
@handle_errors
def build(version: str | None, bump: Bump, force: bool, extra_tags: tuple[str, ...], push: bool, print_only: bool,
          no_verify: bool, no_load: bool, no_preflight: bool, min_free_gb: float | None, as_json: bool, tests: bool,
          sign_key: Path | None, **kwargs: Any) -> None:
    """Fetch the pinned commit, patch, render, build with buildx, verify and write the lock."""
    from buildkit.flows.unit.buildspec import build_command
    from buildkit.flows.unit.buildunit import build as run_pipeline
    from buildkit.cli.unitspecs import cache_root, unit_spec

    if version:
        from buildkit.plan.tags import normalise_version

        version = normalise_version(version)  # v1.2.3 is 1.2.3, as docker/metadata-action's type=semver
        kwargs["image_version"] = version
    cfg = resolve(kwargs)
    engine = get_engine()
    if no_load and not push:
        raise ConfigError("--no-load goes with --push (a build without --push is for the engine)")
    if sign_key is not None and not push:
        raise ConfigError("--sign-key goes with --push (it signs what is published)")
    signer = make_signer(sign_key, cfg) if push and not print_only else None
    from buildkit.plan.platforms import is_multi
    if tests and (print_only or is_multi(cfg.build.platform)):
        raise ConfigError("--tests goes with a build of one platform (not --print or several)")

    if is_multi(cfg.build.platform):
        if print_only:
            raise ConfigError("--print shows one buildx command; with several platforms print each one "
                              "(--platform linux/amd64, then --platform linux/arm64)")
        return _build_multi(cfg, engine, push=push, version=version, bump=bump, force=force, verify=not no_verify,
                            load=not no_load, extra_tags=extra_tags, preflight=not no_preflight,
                            min_free_gb=min_free_gb, as_json=as_json, signer=signer)
    if print_only:
        from buildkit.flows.unit.pipeline import prepared_context

        # rendered into the source's kept build folder (its tree synced: only the files that changed are
        # written, so a warm --print takes seconds less than an export), the Dockerfile removed again;
        # a folder another build holds means a temporary one. `buildkit render --out DIR` keeps one.
        cache_root(cfg).mkdir(parents=True, exist_ok=True)
        spec = unit_spec(cfg, engine)
        with prepared_context(spec, engine, extra_tags=extra_tags, lay_out=False) as prepared:
            metadata = prepared.rendered.context_dir.parent / "metadata.json"
            argv = build_command(prepared.plan, prepared.rendered, spec.build, metadata, engine)
            if as_json:
                plan = prepared.plan
                emit_json({"argv": argv, "variant": plan.request.variant, "build_key": prepared.build_key,
                           "commit": plan.source.commit, "tags": list(plan.tags),
                           "cmake_args": list(plan.cmake_args), "labels": dict(plan.labels)})
            else:
                click.echo(shlex.join(argv))
        click.echo("(its Dockerfile was rendered into buildkit's build folder and removed again; `buildkit render "
                   "--out DIR` writes a context to build from)", err=True)
        return
    short_disk = None
    if not no_preflight:
        from buildkit.cli.matrixspecs import doctor_spec
        from buildkit.flows.doctor.run import preflight

        # with --push a short disk stops the build only if there is something to compile: the image of
        # this build key may be in the engine already (`build`, then `build --push`) or in the registry
        short_disk = preflight(doctor_spec(cfg, min_free_gb=min_free_gb, cheap_only=True), engine,
                               echo=lambda line: click.echo(line, err=True), defer_disk=push)
    if push:
        from buildkit.flows.doctor.run import refusal
        from buildkit.flows.unit.publishing import build_and_push

        def before_build() -> None:
            if short_disk is not None:
                raise refusal(short_disk)

        with _display(cfg):
            published = build_and_push(unit_spec(cfg, engine), engine, version=version, bump=bump, force=force,
                                       verify=not no_verify, load=not no_load, extra_tags=extra_tags,
                                       before_build=before_build, signer=signer, tests=tests)
        what = {"built": "built, verified and pushed",
                "engine": "pushed the image with this build key already in the engine, nothing built",
                "registry": "already published (the registry has this build key), nothing built"}[published.origin]
        echo_published(published, f"{what}: {published.repository}@{published.digest} version {published.version}",
                       as_json)
        if published.tests and not as_json:
            click.echo(f"tests image: {published.tests} (not signed; buildkit gpu-check {published.tests})")
        return
    from buildkit.core.progress import stages, summary, summary_line

    with _display(cfg):
        built = run_pipeline(unit_spec(cfg, engine), engine, extra_tags=extra_tags, verify=not no_verify, tests=tests)
    assert built.result is not None  # run_unit raises when the build fails; the result is the build's
    facts = summary(built.prepared.plan.request.variant, built.result.seconds,
                    engine.image_size(built.result.tags[0]) if built.result.tags else None,
                    built.result.compressed_size,
                    built.result.ccache, stages().times, built.result.tty)
    if as_json:
        emit_json({
            "image": built.result.tags[0] if built.result.tags else None, "digest": built.result.digest,
            "image_id": built.result.config_digest, "tags": list(built.result.tags),
            "commit": built.prepared.source.commit, "build_key": built.prepared.build_key,
            "lock": str(built.lock_path), "verify": [c.to_json() for c in built.report.checks],
            "tests_image": built.tests.tag if built.tests else None,
            "summary": facts})
        return
    for check in built.report.checks:
        click.echo(f"verify {check.name}: {check.status}: {check.detail}")
    click.echo(f"built {built.result.tags[0]} ({built.result.digest or built.result.config_digest}) "
               f"from {built.prepared.source.commit} in {built.result.seconds:.0f}s")
    click.echo(f"tags: {' '.join(built.result.tags)}")
    click.echo(f"lock: {built.lock_path}")
    if built.tests:
        click.echo(f"tests image: {built.tests.tag} (buildkit gpu-check {built.tests.tag})")
    click.echo(summary_line(facts))


def _display(cfg: ResolvedConfig) -> AbstractContextManager[LiveDisplay | None]:
    """buildkit's live display (core/livedisplay.py) while the build runs: on a terminal, with --progress auto;
    --progress plain gives buildx's lines, --progress tty buildx's own display."""
    import sys

    from buildkit.core.livedisplay import live_display

    return live_display(sys.stderr.isatty() and cfg.build.progress == "auto")


def _build_multi(cfg: ResolvedConfig, engine: Engine, *, preflight: bool, min_free_gb: float | None, as_json: bool,
                 **kwargs: Any) -> None:
    """Several platforms: one build each, one OCI index under every tag (flows/matrix/multiplatform.py)."""
    from buildkit.cli.matrixspecs import doctor_spec, multi_spec, platform_requests
    from buildkit.flows.matrix.multiplatform import build_multi

    platform_requests(cfg)  # a bad platform list is the first error, before the preflight
    if preflight:
        from buildkit.flows.doctor.run import preflight as run_preflight

        run_preflight(doctor_spec(cfg, min_free_gb=min_free_gb, cheap_only=True), engine,
                      echo=lambda line: click.echo(line, err=True))
    result = build_multi(multi_spec(cfg, engine), engine=engine, **kwargs)
    if as_json:
        emit_json(result)
        return
    for p in result.platforms:
        for check in p.report.checks:
            click.echo(f"verify {p.platform} {check.name}: {check.status}: {check.detail}")
        click.echo(f"{p.platform}: {p.result.digest} (build key {p.prepared.build_key[:12]})")
    click.echo(f"index {result.index_digest} of {', '.join(p.platform for p in result.platforms)}")
    if result.pushed:
        click.echo(f"pushed: {' '.join(result.pushed)}")
    if result.signed:
        click.echo(f"signed: {' '.join(result.signed)}")
    click.echo(f"tags: {' '.join(result.tags) or '-'}")
    click.echo(f"lock: {result.lock_path}")
