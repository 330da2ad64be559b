"""`buildkit init`: write a starting buildkit.toml (the fork's head pinned) and patches/ here."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from buildkit.cli.options import handle_errors


@click.command("init")
@click.option("--fork", help="The fork's git repository: URL or local path (default: the built-in fork).")
@click.option("--image", help="Image repository, e.g. registry.example.com/you/llama (default: the built-in name, "
                              "which would be pushed to docker.io/library).")
@click.option("--arch", help="CUDA architecture or cpu, see `buildkit archs` (default: sm_120).")
@click.option("--force", is_flag=True, help="Write over an existing buildkit.toml.")
@handle_errors
def init(fork: str | None, image: str | None, arch: str | None, force: bool) -> None:
    """Write a commented buildkit.toml with the fork's current head pinned, and a patches/ folder."""
    from buildkit.flows.starter import init_project

    done = init_project(Path.cwd(), fork=fork, image=image, arch=arch, force=force)
    click.echo(f"wrote {done.config.name}: {done.url} at {done.branch} {done.commit} (pinned), "
               f"image {done.image}, arch {done.arch}")
    if done.credentials_dropped:
        click.echo("  (the credentials in --fork were not written; give them with LLAMA_BUILDKIT_SOURCE_URL)")
    if done.cmake_args:
        click.echo(f"  build.cmake_args = {' '.join(done.cmake_args)} (from the fork's {done.cmake_args_source})")
    click.echo(f"wrote {done.patches.name}/: the patch queue (*.patch, applied in name order, or listed in series)")
    click.echo("next:")
    click.echo("  buildkit doctor")
    click.echo(f"  buildkit build --arch {shlex.quote(done.arch)}")
