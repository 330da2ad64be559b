"""`buildkit archs`: the architectures buildkit can build."""

from __future__ import annotations


import click

from buildkit.cli.output import emit_json
from buildkit.plan.archs import arch_table


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def archs(as_json: bool) -> None:
    """List the architectures buildkit can build, with CMake string and minimum CUDA."""
    rows = arch_table()
    if as_json:
        emit_json(rows)
        return
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    click.echo("  ".join(c.ljust(widths[c]) for c in cols).rstrip())
    for row in rows:
        click.echo("  ".join(row[c].ljust(widths[c]) for c in cols).rstrip())
