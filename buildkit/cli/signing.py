"""`buildkit keys generate` and `buildkit verify-image` (issue 38): a signing key pair, and one command that
checks an image's signature, its provenance's subject and (with --lock) its inputs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from buildkit.cli.options import BuildkitCommand, handle_errors

if TYPE_CHECKING:
    from buildkit.plan.config import ResolvedConfig
    from buildkit.release.signer import Signer

sign_key_option = click.option(
    "--sign-key", "sign_key", type=click.Path(path_type=Path), default=None,
    help="Sign each digest this publishes, with its SLSA provenance and SBOM attached, with this private key "
         "file [default: sign.key_file, else LLAMA_BUILDKIT_SIGN_KEY's PEM, else no signing].")


def make_signer(flag: Path | None, cfg: ResolvedConfig | None = None) -> Signer | None:
    """The one place a command's signer is made (release/signer.Signer), then handed to every flow that signs:
    the key file of --sign-key, else of sign.key_file (cfg; `reproduce --attest` has none), else the PEM of
    LLAMA_BUILDKIT_SIGN_KEY, else None (nothing is signed). Made before anything is built or pushed: a bad key
    stops first. Another kind of signer (keyless, a KMS) is its choice here (docs/design.md, "Adding a
    signer")."""
    from buildkit.release.signkeys import load_signing_key

    key = load_signing_key(flag or (cfg.sign.key_file if cfg is not None else None))
    if key is not None and key.warning:
        click.echo(f"warning: {key.warning}", err=True)
    return key


@click.group()
def keys() -> None:
    """Signing keys (cosign's key format: ECDSA P-256, PEM)."""


@keys.command("generate", cls=BuildkitCommand)
@click.option("--out", "out", type=click.Path(path_type=Path), default=Path("cosign.key"), show_default=True,
              help="The private key file (mode 0600); the public key is written beside it as .pub.")
@handle_errors
def generate(out: Path) -> None:
    """Write a new key pair: the private key (never printed) and its public key (cosign verify --key)."""
    from buildkit.plan.config import KEY_BY_NAME
    from buildkit.plan.starter import toml_value
    from buildkit.release.signkeys import KEY_ENV, generate_keys, key_pair_paths

    private, public = key_pair_paths(out)
    generate_keys(private, public)
    setting = KEY_BY_NAME["sign.key_file"]
    click.echo(f"wrote {private} (private, 0600; sign with it: {setting.name} = {toml_value(str(private))} in "
               f"buildkit.toml, {setting.env_var}, --sign-key, or its PEM in {KEY_ENV}) and {public} (public, 0644: "
               "cosign verify --key, buildkit verify-image --key)")


@click.command("verify-image", cls=BuildkitCommand)
@click.argument("ref")
@click.option("--key", "key", type=click.Path(path_type=Path), required=True, help="The signer's public key (PEM).")
@click.option("--lock", "lock", type=click.Path(path_type=Path), default=None,
              help="A buildkit.lock: the provenance's inputs must be its entry's for this digest.")
@handle_errors
def verify_image(ref: str, key: Path, lock: Path | None) -> None:
    """Check REF's signature, that its signed provenance's subject is the digest the registry serves, and
    with --lock that its inputs are the lock's; one line per check, exit 1 on any failure."""
    from buildkit.oci.imageref import parse_image_ref
    from buildkit.oci.registry import client_for
    from buildkit.release.verifyimage import line, verify_image as run_checks

    with client_for(parse_image_ref(ref).registry) as client:
        checks = run_checks(client, ref, key, lock)
    for check in checks:
        click.echo(line(check))
    if any(check.failed for check in checks):
        raise SystemExit(1)
