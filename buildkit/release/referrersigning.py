"""Signatures and attestations as OCI 1.1 referrers of the signed digest (issue 47), where cosign 3 looks first,
beside cosign's tag scheme (release/signing.py, where cosign 2 looks): sign_image attaches both.

Attached (release/sigstorebundle.py has the formats): cosign 2's OCI 1.1 signature manifest
(`cosign verify --experimental-oci11`), and a sigstore bundle each of the image's signature (cosign 3's
`https://sigstore.dev/cosign/sign/v1` statement) and of every attestation (`cosign verify-attestation
--new-bundle-format`). Where they go is asked of the registry, not configured (oci/referrers.py): through the
referrers API where `GET /v2/<name>/referrers/<digest>` answers, and the referrers tag `sha256-<hex>` where it
does not, or where a push's answer lacks the `OCI-Subject` header.

Reading back (verify-image) lists the referrers the same way and opens each manifest itself: its subject must
be the digest, its artifactType is its own (not the list's), a bundle's envelope must be signed by the key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from buildkit.core.errors import RegistryError
from buildkit.oci.digest import MAX_DOCUMENT
from buildkit.oci.referrers import (EMPTY_BLOB, OCI_INDEX, OCI_MANIFEST, ManifestFacts, Referrer, fallback_tag,
                                    index_with, listed, manifest_facts, referrer_of)
from buildkit.oci.registry import RegistryClient
from buildkit.release import cosignformat as cf
from buildkit.release import sigstorebundle as sb
from buildkit.release.cosignformat import Attestation
from buildkit.release.sigverify import envelope_statement, layer_verifies
from buildkit.release.signer import Signer

MAX_READ = 64  # referrer manifests a reader opens
BUNDLE_SIGNATURE = "a sigstore bundle"  # cosign 3's
OCI11_SIGNATURE = "cosign 2's OCI 1.1 signature"  # `cosign verify --experimental-oci11`
_KNOWN = (sb.BUNDLE_MEDIA_TYPE, sb.SIGNATURE_ARTIFACT)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _upload(client: RegistryClient, repo: str, blob: bytes) -> None:
    client.upload_blob(repo, cf.sha256_digest(blob), blob, len(blob))


def subject_descriptor(client: RegistryClient, repo: str, digest: str) -> dict[str, Any]:
    info = client.head_manifest(repo, digest)
    if info is None or info.digest != digest:
        raise RegistryError(f"registry {client.host}: {repo}@{digest} is not there to attach to")
    return {"mediaType": info.media_type, "digest": digest, "size": info.size}


def attach_referrers(client: RegistryClient, repo: str, digest: str, signer: Signer,
                     attestations: Sequence[Attestation] = (), *, sign: bool = True) -> list[str]:
    """Attach digest's signature (sign=True) and each attestation as referrers; the references written."""
    subject = subject_descriptor(client, repo, digest)
    api = client.referrers_api(repo, digest) is not None
    name = f"{client.host}/{repo}"
    manifests: list[bytes] = []
    if sign:
        payload = cf.simple_signing_payload(name, digest)
        layer = signer.signature_layer(payload)
        body, config = sb.signature_manifest([layer], subject)
        for blob in (config, payload):
            _upload(client, repo, blob)
        manifests.append(body)
        attestations = [Attestation(sb.SIGN_PREDICATE_TYPE, sb.sign_statement(name, digest)), *attestations]
    if attestations:
        _upload(client, repo, EMPTY_BLOB)
    created = _now()
    for attestation in attestations:
        bundle = signer.bundle(signer.envelope(attestation.statement))
        _upload(client, repo, bundle)
        manifests.append(sb.bundle_manifest(bundle, attestation.predicate_type, subject, created))
    pushed: list[Referrer] = []
    written: list[str] = []
    acknowledged = True
    for body in manifests:
        pushed_digest, processed = client.put_referrer(repo, body, OCI_MANIFEST, digest)
        acknowledged &= processed
        pushed.append(referrer_of(body, OCI_MANIFEST))
        written.append(f"{name}@{pushed_digest}")
    if pushed and not (api and acknowledged):  # the spec: the tag schema without the API or the header
        tag = fallback_tag(digest)
        current = client.get_manifest(repo, tag)[0] if client.head_manifest(repo, tag) is not None else None
        index = index_with(current, pushed, f"registry {client.host}: {repo}:{tag}")
        if index is not None:
            client.put_manifest(repo, tag, index, OCI_INDEX)
        written.append(f"{name}:{tag}")
    return written


@dataclass(frozen=True)
class ReferrerFindings:
    """What the referrers of a digest hold that a key signed."""

    route: str  # how they were listed: "the referrers API" or "the referrers tag sha256-…"
    signatures: tuple[str, ...]  # the kinds of signature of the digest found: BUNDLE_SIGNATURE, OCI11_SIGNATURE
    statements: tuple[dict[str, Any], ...]  # the attested statements whose subject is the digest

    @property
    def signed(self) -> bool:
        return bool(self.signatures)


def _listed(client: RegistryClient, repo: str, digest: str) -> tuple[list[Referrer], str]:
    found = client.referrers_api(repo, digest)
    if found is not None:
        return found, "the referrers API"
    tag = fallback_tag(digest)
    if client.head_manifest(repo, tag) is None:
        return [], f"the referrers tag {tag}"
    return listed(client.get_manifest(repo, tag)[0], f"registry {client.host}: {repo}:{tag}"), \
        f"the referrers tag {tag}"


def _subject_is(statement: dict[str, Any], digest: str) -> bool:
    algorithm, _, hexpart = digest.partition(":")
    subjects = statement.get("subject")
    return isinstance(subjects, list) and any(
        isinstance(s, dict) and isinstance(s.get("digest"), dict) and s["digest"].get(algorithm) == hexpart
        for s in subjects)


def find_referrers(client: RegistryClient, repo: str, digest: str, key: ec.EllipticCurvePublicKey) -> ReferrerFindings:
    """The signature and statements by key attached to digest as referrers (key: the public key)."""
    entries, route = _listed(client, repo, digest)
    # the types asked for first: a registry's list of many others does not push them past MAX_READ
    entries.sort(key=lambda r: r.artifact_type not in _KNOWN)
    signatures: set[str] = set()
    statements: list[dict[str, Any]] = []
    for entry in entries[:MAX_READ]:
        try:  # checked against the digest listed; one that is gone or is no manifest is not a referrer
            body = client.get_manifest(repo, entry.digest)[0]
            facts = manifest_facts(body, f"registry {client.host}: {repo}@{entry.digest[:19]}")
        except RegistryError:
            continue
        if facts.subject != digest:
            continue  # listed for this digest, but not a referrer of it
        if facts.artifact_type == sb.SIGNATURE_ARTIFACT:
            if _signature_verifies(client, repo, digest, key, facts):
                signatures.add(OCI11_SIGNATURE)
        elif facts.artifact_type == sb.BUNDLE_MEDIA_TYPE:
            statement = _bundle_statement(client, repo, key, facts)
            if statement is None or not _subject_is(statement, digest):
                continue
            if statement.get("predicateType") == sb.SIGN_PREDICATE_TYPE:
                signatures.add(BUNDLE_SIGNATURE)
            else:
                statements.append(statement)
    return ReferrerFindings(route, tuple(k for k in (BUNDLE_SIGNATURE, OCI11_SIGNATURE) if k in signatures),
                            tuple(statements))


def _one_layer(facts: ManifestFacts, media_type: str) -> dict[str, Any] | None:
    layers = [layer for layer in facts.layers if layer.get("mediaType") == media_type]
    return layers[0] if len(layers) == 1 and isinstance(layers[0].get("digest"), str) else None


def _blob(client: RegistryClient, repo: str, layer: dict[str, Any]) -> bytes | None:
    size = layer.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_DOCUMENT:
        return None
    try:
        return client.get_blob(repo, layer["digest"], max_bytes=size)
    except RegistryError:
        return None


def _bundle_statement(client: RegistryClient, repo: str, key: ec.EllipticCurvePublicKey,
                      facts: ManifestFacts) -> dict[str, Any] | None:
    layer = _one_layer(facts, sb.BUNDLE_MEDIA_TYPE)
    body = _blob(client, repo, layer) if layer is not None else None
    envelope = sb.bundle_envelope(body) if body is not None else None
    return envelope_statement(key, envelope) if envelope is not None else None


def _signature_verifies(client: RegistryClient, repo: str, digest: str, key: ec.EllipticCurvePublicKey,
                        facts: ManifestFacts) -> bool:
    for layer in facts.layers:
        if layer.get("mediaType") != cf.SIMPLE_SIGNING:
            continue
        body = _blob(client, repo, layer)
        annotations = layer.get("annotations")
        if body is None or not isinstance(annotations, dict):
            continue
        notes = tuple(sorted((k, v) for k, v in annotations.items() if isinstance(k, str) and isinstance(v, str)))
        if not layer_verifies(key, cf.Layer(body, cf.SIMPLE_SIGNING, notes)):
            continue
        try:
            signed = json.loads(body)["critical"]["image"]["docker-manifest-digest"]
        except (ValueError, KeyError, TypeError):
            continue
        if signed == digest:
            return True
    return False
