"""`buildkit doctor`: one screen of checks before a long build (see doctor.py)."""

from __future__ import annotations

import sys
from typing import Any

import click

from buildkit.cli.options import BuildkitCommand, config_options, handle_errors, resolve
from buildkit.cli.output import emit_json
from buildkit.engine.current import get_engine


@click.command(cls=BuildkitCommand)
@config_options
@click.option("--min-free-gb", type=float, default=None,
              help="Free disk space the build needs, in GB (default: build.min_free_gb, else an estimate by variant "
                   "kind: 4 for cpu, 16 for CUDA from wheels, 25 from NVIDIA's images, more for a matrix).")
@click.option("--matrix", is_flag=True, help="Check for the whole nightly matrix, not only the configured variant.")
@click.option("--offline", is_flag=True, help="Do not contact the registry of image.name.")
@click.option("--push", is_flag=True, help="Check for `build --push`: an unreachable registry fails (without it, a "
              "warning: a build that does not push never contacts it).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {ok, checks: [{name, status, detail, fix}]}.")
@handle_errors
def doctor(min_free_gb: float | None, matrix: bool, offline: bool, push: bool, as_json: bool, **kwargs: Any) -> None:
    """Check this machine for the configured build: engine and image store, buildx and builder,
    free disk space, registry login for image.name, the base images (in the engine or their registry), host
    NVIDIA driver, cross-platform emulation.

    \b
    Each line is ok, warn or fail, with the fix. The exit code is 1 when any check fails.
    """
    from buildkit.cli.matrixspecs import doctor_spec
    from buildkit.flows.doctor.run import as_json as checks_json, failed, format_checks, run_checks

    spec = doctor_spec(resolve(kwargs), min_free_gb=min_free_gb, matrix=matrix)
    checks = run_checks(spec, get_engine(), offline=offline, push=push)
    if as_json:
        emit_json(checks_json(checks))
    else:
        for line in format_checks(checks):
            click.echo(line)
    if failed(checks):
        sys.exit(1)
