"""`buildkit ccache export|import`: carry the compile cache of every matrix variant between builders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from buildkit.cli.options import FC, BuildkitCommand, config_options, handle_errors, resolve
from buildkit.engine.current import get_engine

WHERE = [
    click.option("--dir", "folder", type=click.Path(file_okay=False),
                 help="Folder with one subfolder per variant (what actions/cache saves and restores)."),
    click.option("--registry", "registry_repo", metavar="REPOSITORY",
                 help="Keep it in a registry instead, as REPOSITORY:ccache-<variant> images."),
    click.option("--unit", metavar="UNIT",
                 help="Only this unit of the matrix (a CI job's: `buildkit nightly --job UNIT`)."),
]


def where_options(func: FC) -> FC:
    for opt in reversed(WHERE):
        func = opt(func)
    return func


def _check(folder: str | None, registry_repo: str | None) -> None:
    from buildkit.core.errors import ConfigError

    if bool(folder) == bool(registry_repo):
        raise ConfigError("give exactly one of --dir FOLDER and --registry REPOSITORY")


@click.group()
def ccache() -> None:
    """Move the ccache of the matrix's variants out of the builder's cache mounts, or back in.

    \b
    A new builder (a CI runner) starts with empty cache mounts even when the layer cache is
    restored: `import` before the build and `export` after it keep the ccache warm.
    """


def _carry(direction: str, folder: str | None, registry_repo: str | None, unit: str | None,
           kwargs: dict[str, Any]) -> None:
    """export or import every variant's ccache: one loop, two directions."""
    from buildkit.engine.ccachestore import export_ccache, import_ccache
    from buildkit.cli.nightlyspecs import variant_specs
    from buildkit.flows.nightly.ccache import targets_for

    _check(folder, registry_repo)
    cfg = resolve(kwargs)
    engine = get_engine()
    where = Path(folder) if folder else None
    units = variant_specs(cfg, engine)[0]
    if direction == "export":
        done = export_ccache(engine, targets_for(units, engine, unit), dest_dir=where,
                             registry_repo=registry_repo or "", builder=cfg.build.builder)
    else:
        done = import_ccache(engine, targets_for(units, engine, unit), src_dir=where, registry_repo=registry_repo or "",
                             builder=cfg.build.builder)
    click.echo(f"{direction}ed {len(done)} ccache(s): {' '.join(done) or 'none'}")


def _command(direction: str, help_text: str) -> click.Command:
    def command(folder: str | None, registry_repo: str | None, unit: str | None, **kwargs: Any) -> None:
        _carry(direction, folder, registry_repo, unit, kwargs)

    command.__doc__ = help_text
    # the variants (and the matrix's) and the builder: no source or base option does anything here (--image is
    # taken, as the workflow passes it to every command)
    shared = config_options(only=("variant", "machine", "image", "files"))
    return ccache.command(direction, cls=BuildkitCommand)(shared(where_options(handle_errors(command))))


export_cmd = _command("export", "Copy each variant's ccache out of the builder.")
import_cmd = _command("import", "Copy each variant's saved ccache into the builder (a variant with none saved is "
                                "skipped).")
