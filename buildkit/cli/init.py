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
@click.option("--fork-flags/--no-fork-flags", default=True, show_default=True,
              help="Set the CUDA CMake flags the fork's build notes recommend as build.cmake_args (each is said "
                   "with its measured cost); --no-fork-flags writes them commented out.")
@handle_errors
def init(fork: str | None, image: str | None, arch: str | None, force: bool, fork_flags: bool) -> None:
    """Write a commented buildkit.toml with the fork's current head pinned, and a patches/ folder; a DFlash fork
    also gets the dflash runtime profile."""
    from buildkit.flows.setup.starter import init_project

    done = init_project(Path.cwd(), fork=fork, image=image, arch=arch, force=force, fork_flags=fork_flags)
    click.echo(f"wrote {done.config.name}: {done.url} at {done.branch} {done.commit} (pinned), "
               f"image {done.image}, arch {done.arch}")
    if done.credentials_dropped:
        click.echo("  (the credentials in --fork were not written; give them with LLAMA_BUILDKIT_SOURCE_URL)")
    if done.cmake_args and not done.cmake_args_declined:
        click.echo(f"  build.cmake_args = {' '.join(done.cmake_args)} (from the fork's {done.cmake_args_source}); "
                   "`buildkit init --force --no-fork-flags` leaves them out")
    elif done.cmake_args:
        click.echo(f"  proposed, left out (--no-fork-flags): {' '.join(done.cmake_args)} (from the fork's "
                   f"{done.cmake_args_source}; commented out in {done.config.name})")
    for note in done.cmake_args_notes:
        click.echo(f"    {note}")
    if done.dflash:
        click.echo(f"  [profiles.dflash]: the fork is a DFlash fork ({done.dflash}); "
                   f"after the build: buildkit run --profile dflash --image {shlex.quote(done.local_image)} "
                   "--model target.gguf --model-draft dflash-draft.gguf")
    click.echo(f"wrote {done.patches.name}/: the patch queue (*.patch, applied in name order, or listed in series)")
    click.echo("next:")
    click.echo("  buildkit doctor")
    click.echo(f"  buildkit build --arch {shlex.quote(done.arch)}")
