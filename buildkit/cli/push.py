"""`buildkit push`: publish the image of the lock's entry for this variant."""

from __future__ import annotations

import click

from buildkit.cli.options import BuildkitCommand, config_options, handle_errors, resolve
from buildkit.cli.output import echo_published


@click.command(cls=BuildkitCommand)
@config_options
@click.option("--force", is_flag=True, help="Push even if the registry has this build key already.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def push(force: bool, as_json: bool, **kwargs):
    """Publish the image of the lock's entry for this variant (built before, still in the engine).

    It gets every tag of its version (see `buildkit tags`); the tags are pushed to the registry
    named in image.name with the credentials of `docker login`.
    """
    from buildkit.flows.publishing import push_local

    published = push_local(resolve(kwargs), force=force)
    echo_published(published, f"pushed {published.repository}@{published.digest} version {published.version}", as_json)
