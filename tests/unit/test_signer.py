"""release/signer.py (issue 49): the key file's Signer makes cosign's signature layer, DSSE envelope and sigstore
bundle as the formats say, and sign_image writes what it makes wherever cosign looks, with nothing of a key in
release/signing.py or referrersigning.py; a signer known by an identity (no key) is one class, and replaces
nothing it cannot recognise as its own."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from buildkit.core.errors import RegistryError
from buildkit.oci.referrers import OCI_MANIFEST
from buildkit.oci.registry import ManifestInfo
from buildkit.release import cosignformat as cf
from buildkit.release import sigstorebundle as sb
from buildkit.release.referrersigning import BUNDLE_SIGNATURE, OCI11_SIGNATURE, find_referrers
from buildkit.release.signer import Signer, public_key_of
from buildkit.release.cosignformat import Attestation
from buildkit.release.signing import attested_statement, check_signature, sign_image
from buildkit.release.sigverify import envelope_statement, layer_verifies
from buildkit.release.signkeys import KEY_ENV, SigningKey, generate_keys, load_public_key, load_signing_key

REPO = "acme/llama"
IMAGE = b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[]}'
DIGEST = "sha256:" + hashlib.sha256(IMAGE).hexdigest()
PREDICATE = "https://slsa.dev/provenance/v1"


class Registry:
    """The registry calls signing makes, on dicts (no referrers API: the referrers tag)."""

    host = "registry.test"

    def __init__(self) -> None:
        self.tags: dict[str, str] = {}
        self.bodies: dict[str, tuple[bytes, str]] = {DIGEST: (IMAGE, OCI_MANIFEST)}
        self.blobs: dict[str, bytes] = {}

    def head_manifest(self, repo: str, reference: str) -> ManifestInfo | None:
        digest = self.tags.get(reference, reference if reference in self.bodies else None)
        return None if digest is None else ManifestInfo(digest, self.bodies[digest][1], len(self.bodies[digest][0]))

    def get_manifest(self, repo: str, reference: str) -> tuple[bytes, str, str]:
        info = self.head_manifest(repo, reference)
        if info is None:
            raise RegistryError(f"{repo}:{reference} is not in the registry")
        return self.bodies[info.digest][0], info.media_type, info.digest

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        digest = cf.sha256_digest(body)
        self.bodies[digest] = (body, media_type)
        if reference != digest:
            self.tags[reference] = digest
        return digest

    def put_referrer(self, repo: str, body: bytes, media_type: str, subject: str) -> tuple[str, bool]:
        return self.put_manifest(repo, cf.sha256_digest(body), body, media_type), False

    def referrers_api(self, repo: str, digest: str) -> None:
        return None

    def upload_blob(self, repo: str, digest: str, data: bytes, size: int) -> None:
        self.blobs[digest] = data

    def get_blob(self, repo: str, digest: str, max_bytes: int = 0) -> bytes:
        return self.blobs[digest]


@pytest.fixture
def key(tmp_path: Path) -> SigningKey:
    generate_keys(tmp_path / "k.key", tmp_path / "k.pub")
    loaded = load_signing_key(tmp_path / "k.key", env={})
    assert loaded is not None
    return loaded


def test_the_key_file_is_a_signer_named_by_where_it_came_from_never_by_its_text(key, tmp_path):
    signer: Signer = key  # (mypy: SigningKey has every member of the protocol)
    assert signer.name == str(tmp_path / "k.key")
    assert key.public_key.public_numbers() == load_public_key(tmp_path / "k.pub").public_numbers()
    assert public_key_of(signer) is not None and public_key_of(None) is None
    from_env = load_signing_key(None, env={KEY_ENV: (tmp_path / "k.key").read_text()})
    assert from_env is not None and from_env.name == KEY_ENV


def test_its_signature_layer_and_envelope_are_cosigns_formats_signed_by_the_key(key):
    payload = cf.simple_signing_payload(f"registry.test/{REPO}", DIGEST)
    layer = key.signature_layer(payload)
    signature = base64.b64decode(dict(layer.annotations)[cf.SIGNATURE_ANNOTATION])
    assert layer == cf.signature_layer(payload, signature) and layer_verifies(key.public_key, layer)
    statement = sb.sign_statement(f"registry.test/{REPO}", DIGEST)
    envelope = key.envelope(statement)
    sig = base64.b64decode(json.loads(envelope)["signatures"][0]["sig"])
    assert envelope == cf.envelope(statement, sig)
    assert envelope_statement(key.public_key, envelope) == json.loads(statement)
    bundle = key.bundle(envelope)
    assert bundle == sb.bundle(envelope, sb.key_hint(key.public_key)) and sb.bundle_envelope(bundle) == envelope


def _statement() -> bytes:
    _, _, hexpart = DIGEST.partition(":")
    return json.dumps({"_type": sb.STATEMENT_TYPE, "subject": [{"name": "x", "digest": {"sha256": hexpart}}],
                       "predicateType": PREDICATE, "predicate": {"buildDefinition": {}}}).encode()


def test_sign_image_writes_what_the_signer_makes_where_cosign_2_and_3_look(key):
    registry = Registry()
    written = sign_image(registry, REPO, DIGEST, key, [Attestation(PREDICATE, _statement())])  # type: ignore[arg-type]
    assert written[:2] == [f"registry.test/{REPO}:{cf.tag_for(DIGEST, 'sig')}",
                           f"registry.test/{REPO}:{cf.tag_for(DIGEST, 'att')}"]
    check_signature(registry, REPO, DIGEST, key.public_key)  # type: ignore[arg-type]
    statement = attested_statement(registry, REPO, DIGEST, key.public_key, PREDICATE)  # type: ignore[arg-type]
    assert statement["predicateType"] == PREDICATE
    found = find_referrers(registry, REPO, DIGEST, key.public_key)  # type: ignore[arg-type]
    assert found.signatures == (BUNDLE_SIGNATURE, OCI11_SIGNATURE)
    assert [s["predicateType"] for s in found.statements] == [PREDICATE]
    sign_image(registry, REPO, DIGEST, key)  # type: ignore[arg-type]  # its own signature again: replaced
    assert len(json.loads(registry.get_manifest(REPO, cf.tag_for(DIGEST, "sig"))[0])["layers"]) == 1


@dataclass(frozen=True)
class IdentitySigner:
    """A signer known by an identity, not a key (as a keyless one is): buildkit holds no key to check it with."""

    inner: SigningKey

    @property
    def name(self) -> str:
        return "an identity"

    @property
    def public_key(self) -> ec.EllipticCurvePublicKey | None:
        return None

    def signature_layer(self, payload: bytes) -> cf.Layer:
        return self.inner.signature_layer(payload)

    def envelope(self, statement: bytes) -> bytes:
        return self.inner.envelope(statement)

    def bundle(self, envelope: bytes) -> bytes:
        return self.inner.bundle(envelope)


def test_another_signer_is_one_class_and_replaces_nothing_it_cannot_recognise(key):
    registry = Registry()
    signer: Signer = IdentitySigner(key)
    assert public_key_of(signer) is None
    for _ in range(2):
        sign_image(registry, REPO, DIGEST, signer, [Attestation(PREDICATE, _statement())])  # type: ignore[arg-type]
    assert len(json.loads(registry.get_manifest(REPO, cf.tag_for(DIGEST, "sig"))[0])["layers"]) == 2
    assert len(json.loads(registry.get_manifest(REPO, cf.tag_for(DIGEST, "att"))[0])["layers"]) == 2
    check_signature(registry, REPO, DIGEST, key.public_key)  # type: ignore[arg-type]  # what it made verifies
