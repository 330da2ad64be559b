"""The `buildkit` command line: the group, and the registration of the commands, one module each
(buildkit/cli/<command>.py). Every BuildkitError becomes one line on stderr and exit code 1
(cli/options.py: handle_errors, which each command wears)."""

from __future__ import annotations

import click

from buildkit import __version__
from buildkit.cli.archs import archs
from buildkit.cli.bake import bake
from buildkit.cli.base import base
from buildkit.cli.bench import bench
from buildkit.cli.build import build
from buildkit.cli.ccache import ccache
from buildkit.cli.ci import ci
from buildkit.cli.config import config_cmd
from buildkit.cli.diff import diff
from buildkit.cli.doctor import doctor
from buildkit.cli.gpucheck import gpu_check
from buildkit.cli.init import init
from buildkit.cli.nightly import nightly
from buildkit.cli.promote import promote
from buildkit.cli.push import push
from buildkit.cli.render import render
from buildkit.cli.reproduce import reproduce
from buildkit.cli.run import run
from buildkit.cli.signing import keys, verify_image
from buildkit.cli.tags import tags
from buildkit.cli.workloadcheck import workload_check


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="buildkit")
def main() -> None:
    """Build a pinned commit of a llama.cpp fork into a tested container image for one CUDA arch.

    \b
    Typical use:
      buildkit init --fork URL --image REF  # a buildkit.toml here, the fork's head pinned
      buildkit archs                      # what can be built
      buildkit config                     # resolved settings and where each came from
      buildkit render --arch sm_120 --out ctx/
      buildkit build --arch sm_120        # fetch, patch, render, buildx, verify, lock

    Settings come from buildkit.toml, then LLAMA_BUILDKIT_* variables, then flags.
    """


# In the order `buildkit --help` listed them before the split (click sorts them by name anyway).
for command in (init, archs, config_cmd, render, build, push, tags, nightly, promote, bake, ci, bench, run, reproduce,
                diff, doctor, ccache, gpu_check, workload_check, base, keys, verify_image):
    main.add_command(command)


if __name__ == "__main__":  # pragma: no cover
    main()
