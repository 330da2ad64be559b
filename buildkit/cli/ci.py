"""`buildkit ci github`: generate CI configuration that runs buildkit."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from buildkit.cli.options import BuildkitCommand, config_options, handle_errors, resolve
from buildkit.core.platforms import default_platform

if TYPE_CHECKING:
    from buildkit.flows.nightly.ciworkflow import LayerCache


THIS_MACHINE_ONLY = ("cache.dir", "build.min_free_gb")  # `ci github` ignores them, from anywhere

@click.group()
def ci() -> None:
    """Generate CI configuration that runs buildkit."""


@ci.command("github", cls=BuildkitCommand)
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
              help="What pip installs on the runner, verbatim [default: git+URL@COMMIT, see --buildkit-repo].")
@click.option("--buildkit-repo", default=None, metavar="URL",
              help="Git repository of buildkit for the runner's pip install [default: where the running buildkit "
                   "came from: the remote of its checkout that holds its commit, the git URL pip installed it "
                   "from, or the origin its wheel recorded; refused when that is only a folder on this machine].")
@click.option("--buildkit-ref", default=None, metavar="REF",
              help="Branch, tag or commit to install [default: the running buildkit's commit].")
@click.option("--runner", "runners", multiple=True, metavar="ARCH=LABELS",
              help="runs-on label(s) of the build jobs for the units compiled on ARCH (amd64 or arm64), "
                   "repeatable; refused when a label names another CPU or a unit's CPU has none "
                   "[default: amd64=ubuntu-latest, arm64=ubuntu-24.04-arm].")
@click.option("--plan-runner", default=default_platform().github_runners[0], show_default=True,
              help="runs-on label of the plan and assemble jobs (they build nothing).")
@click.option("--layer-cache", type=click.Choice(["registry", "gha", "none"]), default="registry",
              show_default=True,
              help="Where BuildKit's layer cache is kept between runs: <image.name>:buildcache-<unit> tags in "
                   "the registry (mode=max, outside GitHub's 10 GB cache), the GitHub Actions cache (mode=min; "
                   "refused when the matrix would not fit in 10 GB), or nowhere.")
@click.option("--bench-runner", metavar="LABELS",
              help="Add the bench gate: a job on this self-hosted GPU runner (runs-on labels, comma separated) "
                   "benches the new nightly of --bench-variant against its current release (`bench --image NEW "
                   "--compare-image OLD`) and promotes it only when not more than --max-slowdown slower.")
@click.option("--bench-model", metavar="PATH", help="With --bench-runner: the GGUF model's path on that runner.")
@click.option("--bench-profile", metavar="NAME", help="With --bench-runner: the runtime profile ([profiles.NAME]) "
                                                      "[default: none, with --gpus all].")
@click.option("--bench-variant", metavar="VARIANT",
              help="With --bench-runner: the variant benched and promoted [default: image.default_variant].")
@click.option("--max-slowdown", type=click.FloatRange(0, 100), default=5.0, show_default=True, metavar="PCT",
              help="With --bench-runner: the most the new nightly's mean tok/s may be below the release's, percent.")
@click.option("--bench-runs", type=click.IntRange(1, 100), metavar="N",
              help="With --bench-runner: bench --runs (runs of each image) [default: bench's, 3].")
@click.option("--bench-max-tokens", type=click.IntRange(1, 100000), metavar="N",
              help="With --bench-runner: bench --max-tokens (tokens per run) [default: bench's, 800].")
@click.option("--gpu-check", "gpu_check", is_flag=True,
              help="With --bench-runner: before the bench, `buildkit gpu-check` the nightly's tests image (its "
                   "build job pushes it, bk-<key>-<variant>-tests; assemble passes its digest) against the "
                   "release's; a new failing case is not promoted (docs/gpu.md).")
@click.option("--workload-check", "workload_check", is_flag=True,
              help="With --bench-runner: after gpu-check and before the bench, `buildkit workload-check` of the "
                   "nightly with --bench-profile: the lossless check (speculative decoding against the target "
                   "alone), then acceptance against the release's (at most --acceptance-tolerance lower); "
                   "needs --bench-model-draft.")
@click.option("--bench-model-draft", metavar="PATH",
              help="With --workload-check: the draft model's path on the runner.")
@click.option("--acceptance-tolerance", type=click.FloatRange(0, 1), default=0.02, show_default=True,
              help="With --workload-check: how far (absolute, 0-1) the nightly's acceptance rate may fall below "
                   "the release's.")
@click.option("--sign", "sign", type=click.Choice(["key", "keyless"]), default="key", show_default=True,
              help="How the jobs sign what they push: key (the PEM of `buildkit keys generate` in the "
                   "LLAMA_BUILDKIT_SIGN_KEY secret; unset, nothing is signed) or keyless (cosign with the job's "
                   "OIDC identity through Sigstore: id-token: write, the provenance and SBOM attested).")
@click.option("--no-ccache", is_flag=True, help="Do not carry the ccache from run to run.")
@click.option("--no-free-disk", is_flag=True, help="Leave out the step that frees disk space on the runner.")
@click.option("--force", is_flag=True, help="Overwrite a workflow file that differs.")
@click.option("--stdout", "to_stdout", is_flag=True, help="Print the workflow instead of writing it.")
@handle_errors
def github(out_path: str | None, cron: str | None, username_secret: str, password_secret: str, python_version: str,
           install_spec: str | None, buildkit_repo: str | None, buildkit_ref: str | None, runners: tuple[str, ...],
           plan_runner: str, layer_cache: LayerCache, bench_runner: str | None, bench_model: str | None,
           bench_profile: str | None, bench_variant: str | None, max_slowdown: float, bench_runs: int | None,
           bench_max_tokens: int | None, gpu_check: bool, workload_check: bool, bench_model_draft: str | None,
           acceptance_tolerance: float, sign: str, no_ccache: bool, no_free_disk: bool, force: bool,
           to_stdout: bool, **kwargs: Any) -> None:
    """Write the GitHub Actions workflow running the nightly daily and on demand: a plan job, one
    build job per variant and platform, and a job that tags the nightly from their digests.

    Run it at the root of the repository that holds buildkit.toml: --config is kept as a path
    relative to here, and --image is passed on to the nightly. Refused, with nothing written:
    no buildkit.toml, no image name, GITHUB_TOKEN for a registry other than ghcr.io, a runner
    that cannot build a unit of the matrix, caches over GitHub's 10 GB.
    """
    from buildkit.core.errors import ConfigError
    from buildkit.core.giturls import local_path
    from buildkit.core.urlcreds import redact_url
    from buildkit.flows.nightly.ciworkflow import (DEFAULT_CRON, DEFAULT_PATH, WorkflowOptions, cache_budget,
                                                   check_cron, config_in_repo, render_workflow, write_workflow)
    from buildkit.flows.nightly.installorigin import install_spec as default_install
    from buildkit.cli.nightlyspecs import repository_of, variant_specs
    from buildkit.engine.current import get_engine
    from buildkit.flows.nightly.jobs import DEFAULT_RUNNERS, check_runners, parse_runners

    cfg = resolve(kwargs, notice=False)  # no buildkit.toml is refused below
    # settings of this machine only (its cache folder, its disk) say nothing the workflow would build with
    passed = {origin for key, origin in cfg.origins.items()
              if origin.startswith(("--", "env ")) and origin not in ("--image", "--config")
              and key not in THIS_MACHINE_ONLY}
    if passed:
        raise ConfigError(f"{', '.join(sorted(passed))}: the workflow runs with buildkit.toml and --image only; "
                          "put the setting in buildkit.toml")
    if cfg.path is None:
        raise ConfigError("no buildkit.toml here (or --config FILE): the workflow runs the nightly of a "
                          "configuration in this repository; write one with `buildkit init`")
    if local_path(cfg.source.url, cfg.path.parent) is not None:
        raise ConfigError(f"source.url {redact_url(cfg.source.url)} is a folder on this machine: the workflow's "
                          "runners fetch the fork, and cannot reach it; push the fork and set source.url to its URL")
    check_cron(cron or DEFAULT_CRON)
    repository = repository_of(cfg)
    if cfg.origins["image.name"] == "default" or repository.name.startswith("docker.io/library/"):
        raise ConfigError(f"image {cfg.image.name!r} would be pushed to docker.io/library, where no one may "
                          "push; give --image REGISTRY/OWNER/NAME (or [image] name in buildkit.toml)")
    variants = variant_specs(cfg, get_engine())[0]
    by_arch = {**dict(DEFAULT_RUNNERS), **parse_runners(runners)}
    check_runners(variants, by_arch)
    bench_variant = bench_variant or cfg.image.default_variant
    if bench_runner:
        keys = [v.key for v in variants]
        if bench_variant not in keys:
            raise ConfigError(f"--bench-variant {bench_variant!r} is not a variant of the matrix ({', '.join(keys)})")
        if gpu_check:
            from buildkit.flows.unit.testsimage import CPU_BACKEND, builds_tests

            gated = next(v for v in variants if v.key == bench_variant)
            if not builds_tests(gated.request.arch, cfg.options.gpu_check.backend):
                raise ConfigError(f"--gpu-check: the nightly builds no tests image of {bench_variant} (a CUDA "
                                  f"variant's job does; a cpu variant's only with gpu_check.backend {CPU_BACKEND}, "
                                  f"not {cfg.options.gpu_check.backend}): give a CUDA --bench-variant")
            if gated.platform_split:  # each platform's job pushes its own; no index is made of them
                raise ConfigError(f"--gpu-check: {bench_variant} is built for several platforms, and the gate takes "
                                  "one platform's tests image; gate a variant of one platform")
        if workload_check and not (bench_profile and bench_model_draft):
            raise ConfigError("--workload-check runs the nightly with --bench-profile's arguments and compares its "
                              "drafter with the target alone: give --bench-profile and --bench-model-draft")
        if bench_model_draft and not workload_check:
            raise ConfigError("--bench-model-draft goes with --workload-check")
    elif bench_model or bench_profile or bench_runs or bench_max_tokens or gpu_check or workload_check:
        raise ConfigError("--bench-model, --bench-profile, --bench-runs, --bench-max-tokens, --gpu-check and "
                          "--workload-check go with --bench-runner")
    cache_budget(variants, layer_cache, ccache=not no_ccache)
    notes: tuple[str, ...] = ()
    if install_spec:
        install = install_spec
    else:  # the commit that is running, from where a runner reaches it (flows/nightly/installorigin.py)
        install, notes = default_install(buildkit_repo, buildkit_ref)
    options = WorkflowOptions(registry=repository.registry, cron=cron or DEFAULT_CRON,
                              username_secret=username_secret, password_secret=password_secret,
                              python_version=python_version,
                              install=install,
                              runners=tuple(sorted(by_arch.items())), plan_runner=plan_runner,
                              layer_cache=layer_cache,
                              cache_ref=repository.name if layer_cache == "registry" else "",
                              ccache=not no_ccache, free_disk=not no_free_disk, bench_runner=bench_runner or "",
                              bench_image=repository.name, bench_variant=bench_variant, bench_model=bench_model or "",
                              bench_profile=bench_profile or "", max_slowdown=max_slowdown,
                              bench_runs=bench_runs or 0, bench_max_tokens=bench_max_tokens or 0,
                              gpu_check=gpu_check, workload_check=workload_check,
                              bench_model_draft=bench_model_draft or "", acceptance_tolerance=acceptance_tolerance,
                              sign=sign)
    if cfg.origins["image.name"] == "--image":
        options = replace(options, image=cfg.image.name)
    options = replace(options, config=config_in_repo(cfg.path, Path.cwd()))
    text = render_workflow(options)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    if to_stdout:
        click.echo(text, nl=False)
        return
    path = Path(out_path) if out_path else DEFAULT_PATH
    what = write_workflow(path, text, force=force)
    click.echo(f"{what} {path}: daily at '{options.cron}' (UTC) and on workflow_dispatch; "
               f"set the secrets {username_secret} and {password_secret}"
               if username_secret != "GITHUB_TOKEN" else f"{what} {path}")
