"""cosign's formats, written by buildkit so that `cosign verify` / `cosign verify-attestation` work unchanged
(issue 38). Pure: bytes in, bytes out.

* A signature: the simple-signing payload (the image's repository and manifest digest), signed; it is a
  layer of the manifest tagged `sha256-<hex>.sig` beside the image, its signature in the layer's annotation
  `dev.cosignproject.cosign/signature`.
* An attestation: an in-toto Statement in a DSSE envelope (the signature over DSSE's pre-authentication
  encoding), a layer of the manifest tagged `sha256-<hex>.att`, annotated with its predicateType.

The tag scheme is what a registry without the OCI referrers API gets (CNCF distribution 2.8, as tested).
Neither manifest is the image's: the image's manifest and digest are never touched.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
DSSE_ENVELOPE = "application/vnd.dsse.envelope.v1+json"
IN_TOTO = "application/vnd.in-toto+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
PREDICATE_ANNOTATION = "predicateType"
SIGNATURE_TYPE = "cosign container image signature"


@dataclass(frozen=True)
class Attestation:
    predicate_type: str
    statement: bytes  # an in-toto Statement v1, JSON


@dataclass(frozen=True)
class Layer:
    """One signature or attestation: its blob, media type and annotations."""

    body: bytes
    media_type: str
    annotations: tuple[tuple[str, str], ...]

    @property
    def digest(self) -> str:
        return sha256_digest(self.body)

    def descriptor(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "size": len(self.body), "digest": self.digest,
                "annotations": dict(self.annotations)}


def tag_for(digest: str, suffix: str) -> str:
    """cosign's tag of an image's signatures (suffix "sig") or attestations ("att")."""
    algorithm, _, hexpart = digest.partition(":")
    return f"{algorithm}-{hexpart}.{suffix}"


def simple_signing_payload(repository: str, digest: str) -> bytes:
    document = {"critical": {"identity": {"docker-reference": repository},
                             "image": {"docker-manifest-digest": digest},
                             "type": SIGNATURE_TYPE},
                "optional": None}
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def signature_layer(payload: bytes, signature: bytes) -> Layer:
    return Layer(payload, SIMPLE_SIGNING, ((SIGNATURE_ANNOTATION, base64.b64encode(signature).decode()),))


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what the envelope's signature signs."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def envelope(statement: bytes, signature: bytes) -> bytes:
    document = {"payloadType": IN_TOTO, "payload": base64.b64encode(statement).decode(),
                "signatures": [{"keyid": "", "sig": base64.b64encode(signature).decode()}]}
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def attestation_layer(envelope_body: bytes, predicate_type: str) -> Layer:
    return Layer(envelope_body, DSSE_ENVELOPE, ((PREDICATE_ANNOTATION, predicate_type),
                                                (SIGNATURE_ANNOTATION, "")))


def config_blob(layers: Sequence[Layer]) -> bytes:
    """The image config cosign gives its signature manifests: the layers' digests, no platform."""
    document = {"architecture": "", "os": "", "config": {}, "created": "0001-01-01T00:00:00Z",
                "history": [{"created": "0001-01-01T00:00:00Z"} for _ in layers],
                "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in layers]}}
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def manifest(layers: Sequence[Layer]) -> tuple[bytes, bytes]:
    """The manifest of a `.sig` or `.att` tag and its config blob."""
    config = config_blob(layers)
    document = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "size": len(config), "digest": sha256_digest(config)},
                "layers": [layer.descriptor() for layer in layers]}
    return json.dumps(document, separators=(",", ":")).encode(), config


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
