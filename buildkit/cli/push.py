"""`buildkit push`: publish the image of the lock's entry for this variant."""

from __future__ import annotations

from pathlib import Path

import click

from buildkit.cli.options import BuildkitCommand, config_options, handle_errors, resolve
from buildkit.cli.output import echo_published


@click.command(cls=BuildkitCommand)
@config_options
@click.option("--force", is_flag=True, help="Push even if the registry has this build key already.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--sign-key", "sign_key", type=click.Path(path_type=Path), default=None,
              help="Sign the pushed digest and attach its provenance and SBOM with this private key file "
                   "(else LLAMA_BUILDKIT_SIGN_KEY's PEM, else no signing).")
@handle_errors
def push(force: bool, as_json: bool, sign_key: Path | None, **kwargs):
    """Publish the image of the lock's entry for this variant (built before, still in the engine).

    It gets every tag of its version (see `buildkit tags`); the tags are pushed to the registry
    named in image.name with the credentials of `docker login`.
    """
    from buildkit.flows.publishing import push_local
    from buildkit.release.signkeys import load_signing_key

    key = load_signing_key(sign_key)  # read before pushing: a bad key stops before anything is published
    cfg = resolve(kwargs)
    published = push_local(cfg, force=force)
    echo_published(published, f"pushed {published.repository}@{published.digest} version {published.version}", as_json)
    if key is not None:
        from buildkit.flows.signpublished import sign_entry
        from buildkit.plan.buildplan import make_request

        request = make_request(cfg)
        signed = sign_entry(cfg.lock.path, f"{request.variant}/{request.target}", key)
        click.echo(f"signed {signed.reference} (key of {key.origin}): {', '.join(signed.written)}",
                   err=as_json)
