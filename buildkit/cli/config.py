"""`buildkit config`: the resolved configuration and where each value came from."""

from __future__ import annotations

import json
from typing import Any

import click

from buildkit.cli.options import BuildkitCommand, config_options, handle_errors, resolve
from buildkit.cli.output import emit_json
from buildkit.plan.config import KEYS


@click.command("config", cls=BuildkitCommand)
@config_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {key: {value, origin}}.")
@handle_errors
def config_cmd(as_json: bool, **kwargs: Any) -> None:
    """Print the resolved configuration and where each value came from."""
    from buildkit.core.urlcreds import redact_url

    cfg = resolve(kwargs, notice=False)  # it says `# config file: none (defaults)` itself
    shown = {k.name: redact_url(cfg[k.name]) if isinstance(cfg[k.name], str) else cfg[k.name] for k in KEYS}
    if as_json:
        emit_json({k.name: {"value": shown[k.name], "origin": cfg.origins[k.name]} for k in KEYS})
        return
    click.echo(f"# config file: {cfg.path if cfg.path else 'none (defaults)'}")
    width = max(len(k.name) for k in KEYS)
    for key in KEYS:
        value = json.dumps(shown[key.name]) if not isinstance(shown[key.name], str) else shown[key.name]
        click.echo(f"{key.name.ljust(width)}  {value}    ({cfg.origins[key.name]}; {key.env_var})")
