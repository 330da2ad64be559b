"""`buildkit base debian`: make a Debian base image here from Debian's packages, no registry
(flows/setup/debianbase.py)."""

from __future__ import annotations

import click

from buildkit.cli.options import handle_errors
from buildkit.engine.current import get_engine


@click.group()
def base() -> None:
    """Make base images here, for a machine that cannot pull them (no docker.io)."""


@base.command("debian")
@click.option("--suite", type=click.Choice(["bookworm", "trixie"]), default="bookworm", show_default=True,
              help="Debian 12 (bookworm) or 13 (trixie: GCC 14, which arm64's SME variants and znver4 need).")
@click.option("--platform", "platforms", default="", metavar="linux/amd64[,linux/arm64]",
              help="One platform (an image) or two (an OCI index of both, the base of a cross build); default: "
                   "this machine's. Another machine's platform is only unpacked (nothing of it runs here).")
@click.option("--tag", required=True, metavar="NAME:TAG",
              help="The engine's name of the image, e.g. local/debian:trixie; then `--os-image NAME:TAG` "
                   "(base.os_image) builds on it.")
@click.option("--mirror", default=None, metavar="URL",
              help="The Debian archive to take the packages from (default: this machine's apt source of Debian, "
                   "else http://deb.debian.org/debian).")
@handle_errors
def debian(suite: str, platforms: str, tag: str, mirror: str | None) -> None:
    """debootstrap --variant=minbase SUITE for each platform, written as an OCI image and loaded into the engine
    under --tag. Needs root, debootstrap (and dpkg-deb for a second platform) and the engine."""
    from buildkit.core.platforms import machine_platform
    from buildkit.flows.setup.debianbase import make_base, plan_base

    wanted = plan_base(suite, platforms or machine_platform(), tag, mirror)
    made = make_base(wanted, get_engine(), log=lambda line: click.echo(f"buildkit: {line}", err=True))
    parts = [f"{p} (configured)" for p in made.configured] + [f"{p} (unpacked only)" for p in made.unpacked]
    click.echo(f"{made.tag}: Debian {suite}, {', '.join(parts)}, {made.digest}")
