"""Who signs what buildkit publishes (issue 49): the `Signer` protocol, made once at the CLI
(cli/signing.make_signer) and handed to every flow and release function that signs.

A signer makes the three signed things of cosign's formats (release/cosignformat.py, release/sigstorebundle.py);
where they go (the `.sig`/`.att` tags, the OCI 1.1 referrers) and what they say (the payload, the statements)
are the same for every signer, so release/signing.py and release/referrersigning.py never see a key:

* `signature_layer(payload)`: the layer of cosign's `.sig` manifest signing a simple-signing payload (the
  payload, its media type, the signature's annotation; a certificate's annotations for a keyless signer);
* `envelope(statement)`: the DSSE envelope of an in-toto statement (an attestation);
* `bundle(envelope)`: that envelope as a sigstore bundle with the verification material (a key's hint, or a
  certificate and its transparency-log entry);
* `public_key`: what verifies its signatures, the key buildkit proves its own images with (release/ownership.py:
  a published build key, a nightly's tag); None for a signer known by an identity (keyless: an OIDC subject's
  certificate), which buildkit cannot check offline, so only the lock proves an image ours;
* `name`: what messages call it (a key file's path, a variable's name; never a secret).

Today's signer is the key file's (release/signkeys.SigningKey: `--sign-key FILE`, sign.key_file or the PEM of
LLAMA_BUILDKIT_SIGN_KEY). The workflow's keyless form signs outside buildkit (`cosign sign` / `cosign attest` with
the job's OIDC identity, over the predicates `nightly --job --attest-dir` writes); a keyless or KMS signer inside
buildkit is one class with these members plus its choice in cli/signing.make_signer (docs/design.md, "Adding a
signer").
"""

from __future__ import annotations

from typing import Protocol

from cryptography.hazmat.primitives.asymmetric import ec

from buildkit.release.cosignformat import Layer


class Signer(Protocol):
    @property
    def name(self) -> str:
        """What a message calls this signer (never a secret)."""
        ...

    @property
    def public_key(self) -> ec.EllipticCurvePublicKey | None:
        """The key its signatures verify with; None when an identity, not a key, names the signer."""
        ...

    def signature_layer(self, payload: bytes) -> Layer:
        """cosign's signature layer of a simple-signing payload (cosignformat.simple_signing_payload)."""
        ...

    def envelope(self, statement: bytes) -> bytes:
        """The DSSE envelope (cosignformat.envelope's JSON) of an in-toto statement, signed."""
        ...

    def bundle(self, envelope: bytes) -> bytes:
        """A sigstore bundle of an envelope this signer made, with what verifies it."""
        ...


def public_key_of(signer: Signer | None) -> ec.EllipticCurvePublicKey | None:
    """The key that proves an image ours (release/ownership.py): the signer's, if it has one."""
    return signer.public_key if signer is not None else None


__all__ = ["Signer", "public_key_of"]
