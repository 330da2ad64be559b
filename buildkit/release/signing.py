"""Signing a published image and checking its signatures (issue 38), through buildkit's own registry
client, in cosign's tag scheme (release/cosignformat.py): `sha256-<hex>.sig` holds the simple-signing
signature of the digest, `sha256-<hex>.att` the DSSE attestations (provenance, SBOM). sign_image also
attaches them as OCI 1.1 referrers, where cosign 3 looks (release/referrersigning.py).

A signature signs the digest, not a tag: a promote that moves tags keeps it valid, and the image's
own manifest is never rewritten. Signing again keeps the layers already there that are not the same
(another signer's); an attestation of the same predicate type by the same key is replaced.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from buildkit.core.errors import RegistryError, VerifyError
from buildkit.oci.registry import RegistryClient
from buildkit.release import cosignformat as cf
from buildkit.release.signer import Signer
from buildkit.release.cosignformat import Attestation
from buildkit.release.referrersigning import attach_referrers
from buildkit.release.sigverify import envelope_statement, layer_verifies

MAX_LAYERS = 64  # of a .sig or .att manifest buildkit reads back


def _existing(client: RegistryClient, repo: str, tag: str) -> list[cf.Layer]:
    if client.head_manifest(repo, tag) is None:
        return []
    body, _, _ = client.get_manifest(repo, tag)
    try:
        descriptors = json.loads(body)["layers"][:MAX_LAYERS]
        layers = []
        for d in descriptors:
            blob = client.get_blob(repo, d["digest"])
            layers.append(cf.Layer(blob, d["mediaType"], tuple(sorted((d.get("annotations") or {}).items()))))
        return layers
    except (ValueError, KeyError, TypeError):
        raise RegistryError(f"{client.host}/{repo}:{tag} is not a cosign signature manifest") from None


def _push(client: RegistryClient, repo: str, tag: str, layers: Sequence[cf.Layer]) -> str:
    body, config = cf.manifest(layers)
    for blob in [config, *(layer.body for layer in layers)]:
        client.upload_blob(repo, cf.sha256_digest(blob), blob, len(blob))
    return client.put_manifest(repo, tag, body, cf.OCI_MANIFEST)


def sign_image(client: RegistryClient, repo: str, digest: str, signer: Signer,
               attestations: Sequence[Attestation] = (), *, sign: bool = True) -> list[str]:
    """Sign digest (in client's repo) and attach the attestations; the references written. sign=False
    attaches the attestations only (a rebuilder's word about an image it did not publish). What the signer
    wrote before (its key verifies it) is replaced; a signer without a key (an identity) replaces nothing."""
    public = signer.public_key
    written = []
    if sign:
        payload = cf.simple_signing_payload(f"{client.host}/{repo}", digest)
        layer = signer.signature_layer(payload)
        sig_tag = cf.tag_for(digest, "sig")
        kept = [old for old in _existing(client, repo, sig_tag)
                if not (old.body == payload and public is not None and layer_verifies(public, old))]
        _push(client, repo, sig_tag, [*kept, layer])
        written.append(f"{client.host}/{repo}:{sig_tag}")
    if attestations:
        att_tag = cf.tag_for(digest, "att")
        types = {a.predicate_type for a in attestations}
        kept = [old for old in _existing(client, repo, att_tag)
                if not (dict(old.annotations).get(cf.PREDICATE_ANNOTATION) in types and public is not None
                        and envelope_statement(public, old.body) is not None)]
        new = [cf.attestation_layer(signer.envelope(a.statement), a.predicate_type) for a in attestations]
        _push(client, repo, att_tag, [*kept, *new])
        written.append(f"{client.host}/{repo}:{att_tag}")

    return written + attach_referrers(client, repo, digest, signer, attestations, sign=sign)  # where cosign 3 looks


def check_signature(client: RegistryClient, repo: str, digest: str, key: ec.EllipticCurvePublicKey) -> None:
    """That a signature by key of exactly digest is in the repository; VerifyError otherwise."""
    tag = cf.tag_for(digest, "sig")
    for layer in _existing(client, repo, tag):
        if layer.media_type != cf.SIMPLE_SIGNING or not layer_verifies(key, layer):
            continue
        try:
            signed = json.loads(layer.body)["critical"]["image"]["docker-manifest-digest"]
        except (ValueError, KeyError, TypeError):
            continue
        if signed == digest:
            return
    raise VerifyError(f"no signature of {digest} by this key in {client.host}/{repo}")


def attested_statement(client: RegistryClient, repo: str, digest: str, key: ec.EllipticCurvePublicKey,
                       predicate_type: str) -> dict[str, Any]:
    """The statement of predicate_type that key signed for digest (its subject holds digest)."""
    tag = cf.tag_for(digest, "att")
    _, _, hexpart = digest.partition(":")
    for layer in _existing(client, repo, tag):
        statement = envelope_statement(key, layer.body)
        if statement is None or statement.get("predicateType") != predicate_type:
            continue
        subjects = statement.get("subject") or []
        if any(isinstance(s, dict) and (s.get("digest") or {}).get("sha256") == hexpart for s in subjects):
            return statement
    raise VerifyError(f"no {predicate_type} attestation of {digest} by this key in {client.host}/{repo}")
