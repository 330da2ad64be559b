"""What cosign 3 looks for first, as OCI 1.1 referrers of the signed digest (pure): sigstore bundles, and the
signature manifest of cosign 2's `--registry-referrers-mode=oci-1-1` (release/referrersigning.py attaches
and reads them; oci/referrers.py holds the spec's rules).

* A sigstore bundle (v0.3, `application/vnd.dev.sigstore.bundle.v0.3+json`) holds one DSSE envelope and
  names its key by a hint (base64 of the SHA-256 of the key's PKIX DER, as cosign writes it); no
  transparency-log entry, as buildkit's key signatures have none. Written and read through
  sigstore-models, the sigstore project's Python models of its bundle (what sigstore-python 4 uses).
* Each bundle is the one layer of a manifest whose artifactType is the bundle's media type, with the
  empty config, the subject, and cosign's annotations (`dev.sigstore.bundle.content`,
  `dev.sigstore.bundle.predicateType`, `org.opencontainers.image.created`), as cosign 3 attaches one.
* The image's signature is a bundle too: an in-toto statement of predicate type
  `https://sigstore.dev/cosign/sign/v1` whose subject is the digest (cosign 3's `cosign sign`).
* cosign 2 (`cosign verify --experimental-oci11`) finds the simple-signing signature of the tag scheme's
  `.sig` manifest as a referrer whose artifactType (and config media type, which go-containerregistry
  0.20.1 lists in its place) is `application/vnd.dev.cosign.artifact.sig.v1+json`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from typing import Any, Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import ValidationError
from sigstore_models.bundle.v1 import Bundle, VerificationMaterial
from sigstore_models.common.v1 import PublicKeyIdentifier
from sigstore_models.intoto import Envelope

from buildkit.oci.referrers import OCI_MANIFEST, empty_descriptor, subject_manifest
from buildkit.release import cosignformat as cf

BUNDLE_MEDIA_TYPE: Final = "application/vnd.dev.sigstore.bundle.v0.3+json"
SIGN_PREDICATE_TYPE = "https://sigstore.dev/cosign/sign/v1"  # cosign 3's statement of an image signature
SIGNATURE_ARTIFACT = "application/vnd.dev.cosign.artifact.sig.v1+json"  # cosign 2's OCI 1.1 signature
CONTENT_ANNOTATION = "dev.sigstore.bundle.content"
PREDICATE_ANNOTATION = "dev.sigstore.bundle.predicateType"
CREATED_ANNOTATION = "org.opencontainers.image.created"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"


def key_hint(key: ec.EllipticCurvePublicKey) -> str:
    """How cosign names a public key in a bundle: base64 of the SHA-256 of its PKIX (SubjectPublicKeyInfo) DER."""
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def sign_statement(name: str, digest: str) -> bytes:
    """The in-toto statement cosign 3 signs for an image: its digest, an empty predicate."""
    algorithm, _, hexpart = digest.partition(":")
    document = {"_type": STATEMENT_TYPE, "subject": [{"name": name, "digest": {algorithm: hexpart}}],
                "predicateType": SIGN_PREDICATE_TYPE, "predicate": {}}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def bundle(envelope: bytes, hint: str) -> bytes:
    """A v0.3 bundle of a DSSE envelope (cosignformat.envelope's JSON) signed by the key of hint."""
    document = json.loads(envelope)  # its fields as protobuf's JSON has them: the bytes in base64
    made = Bundle(media_type=BUNDLE_MEDIA_TYPE,
                  verification_material=VerificationMaterial(public_key=PublicKeyIdentifier(hint=hint),
                                                             tlog_entries=[]),
                  dsse_envelope=Envelope.from_dict(document))
    return made.to_json().encode()


def bundle_envelope(body: bytes) -> bytes | None:
    """The DSSE envelope of a bundle (as cosignformat.envelope writes one), None when body is no bundle of one.
    A bundle without transparency-log entries may leave the list out (protobuf's JSON omits an empty list:
    cosign 2.5.0's do); sigstore-models 0.0.6 wants it, so it is read as the empty list it stands for."""
    try:
        data = json.loads(body)
        if isinstance(data, dict) and isinstance(data.get("verificationMaterial"), dict):
            data["verificationMaterial"].setdefault("tlogEntries", [])
        read = Bundle.from_dict(data)
    except (ValueError, TypeError, ValidationError):
        return None
    if read.dsse_envelope is None:
        return None
    envelope = read.dsse_envelope
    document = {"payloadType": envelope.payload_type, "payload": base64.b64encode(envelope.payload).decode(),
                "signatures": [{"keyid": s.keyid or "", "sig": base64.b64encode(s.sig).decode()}
                               for s in envelope.signatures]}
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def bundle_manifest(bundle_body: bytes, predicate_type: str, subject: dict[str, Any], created: str) -> bytes:
    """The referrer manifest of one bundle, as cosign 3 attaches it."""
    document = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": BUNDLE_MEDIA_TYPE,
                "config": empty_descriptor(),
                "layers": [{"mediaType": BUNDLE_MEDIA_TYPE, "digest": cf.sha256_digest(bundle_body),
                            "size": len(bundle_body)}],
                "annotations": {CONTENT_ANNOTATION: "dsse-envelope", PREDICATE_ANNOTATION: predicate_type,
                                CREATED_ANNOTATION: created}}
    return subject_manifest(document, subject)


def signature_manifest(layers: Sequence[cf.Layer], subject: dict[str, Any]) -> tuple[bytes, bytes]:
    """cosign 2's OCI 1.1 signature: the `.sig` manifest of layers, its config typed as the artifact, with the
    subject; (manifest, config blob)."""
    body, config = cf.manifest(layers)
    document = json.loads(body)
    document["config"]["mediaType"] = SIGNATURE_ARTIFACT
    document["artifactType"] = SIGNATURE_ARTIFACT
    return subject_manifest(document, subject), config
