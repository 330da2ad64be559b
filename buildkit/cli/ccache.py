"""`buildkit ccache export|import`: carry the compile cache of every matrix variant between builders."""

from __future__ import annotations

from pathlib import Path

import click

from buildkit.cli.options import config_options, handle_errors, resolve

WHERE = [
    click.option("--dir", "folder", type=click.Path(file_okay=False),
                 help="Folder with one subfolder per variant (what actions/cache saves and restores)."),
    click.option("--registry", "registry_repo", metavar="REPOSITORY",
                 help="Keep it in a registry instead, as REPOSITORY:ccache-<variant> images."),
]


def where_options(func):
    for opt in reversed(WHERE):
        func = opt(func)
    return func


def _check(folder, registry_repo) -> None:
    from buildkit.core.errors import ConfigError

    if bool(folder) == bool(registry_repo):
        raise ConfigError("give exactly one of --dir FOLDER and --registry REPOSITORY")


@click.group()
def ccache():
    """Move the ccache of the matrix's variants out of the builder's cache mounts, or back in.

    \b
    A new builder (a CI runner) starts with empty cache mounts even when the layer cache is
    restored: `import` before the build and `export` after it keep the ccache warm.
    """


@ccache.command("export")
@config_options
@where_options
@handle_errors
def export_cmd(folder, registry_repo, **kwargs):
    """Copy each variant's ccache out of the builder."""
    from buildkit.engine.ccachestore import export_ccache
    from buildkit.flows.ccache import targets_for

    _check(folder, registry_repo)
    cfg = resolve(kwargs)
    done = export_ccache(targets_for(cfg), dest_dir=Path(folder) if folder else None,
                         registry_repo=registry_repo or "", builder=cfg["build.builder"])
    click.echo(f"exported {len(done)} ccache(s): {' '.join(done) or 'none'}")


@ccache.command("import")
@config_options
@where_options
@handle_errors
def import_cmd(folder, registry_repo, **kwargs):
    """Copy each variant's saved ccache into the builder (a variant with none saved is skipped)."""
    from buildkit.engine.ccachestore import import_ccache
    from buildkit.flows.ccache import targets_for

    _check(folder, registry_repo)
    cfg = resolve(kwargs)
    done = import_ccache(targets_for(cfg), src_dir=Path(folder) if folder else None,
                         registry_repo=registry_repo or "", builder=cfg["build.builder"])
    click.echo(f"imported {len(done)} ccache(s): {' '.join(done) or 'none'}")
