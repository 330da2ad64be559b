"""Issue 47: the OCI 1.1 referrers rules a client follows (oci/referrers.py) and the sigstore bundle buildkit writes
and reads (release/sigstorebundle.py), against a bundle cosign 2.5.0 itself attached (tests/unit/data)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from buildkit.core.errors import RegistryError
from buildkit.oci.referrers import (EMPTY_MEDIA_TYPE, MAX_LISTED, OCI_INDEX, Referrer, empty_descriptor, fallback_tag,
                                    index_with, listed, manifest_facts, referrer_of)
from buildkit.release import cosignformat as cf
from buildkit.release import sigstorebundle as sb
from buildkit.release.sigverify import envelope_statement
from buildkit.release.signkeys import generate_keys, load_public_key, load_signing_key

DATA = Path(__file__).parent / "data"
DIGEST = "sha256:" + "ab" * 32
SUBJECT = {"mediaType": cf.OCI_MANIFEST, "digest": DIGEST, "size": 259}


def test_the_referrers_tag_is_the_algorithm_and_the_hex_within_64():
    assert fallback_tag(DIGEST) == "sha256-" + "ab" * 32  # cosign's .sig tag without its suffix
    assert fallback_tag("sha512:" + "c" * 128) == "sha512-" + "c" * 64
    with pytest.raises(RegistryError):
        fallback_tag("sha256:../../x")


def test_an_entry_takes_the_manifests_artifact_type_else_its_configs_and_every_annotation():
    bundle = sb.bundle_manifest(b"{}", "https://slsa.dev/provenance/v1", SUBJECT, "2026-12-06T00:00:00Z")
    entry = referrer_of(bundle, cf.OCI_MANIFEST)
    assert entry.artifact_type == sb.BUNDLE_MEDIA_TYPE != EMPTY_MEDIA_TYPE  # not go-containerregistry 0.20.1's
    assert dict(entry.annotations) == {sb.CONTENT_ANNOTATION: "dsse-envelope",
                                       sb.PREDICATE_ANNOTATION: "https://slsa.dev/provenance/v1",
                                       sb.CREATED_ANNOTATION: "2026-12-06T00:00:00Z"}
    assert entry.digest == cf.sha256_digest(bundle) and entry.size == len(bundle)
    config_typed = json.dumps({"config": {"mediaType": "application/x-kind"}, "layers": []}).encode()
    assert referrer_of(config_typed, cf.OCI_MANIFEST).artifact_type == "application/x-kind"
    facts = manifest_facts(bundle, "m")
    assert facts.subject == DIGEST and json.loads(bundle)["config"] == empty_descriptor()
    with pytest.raises(RegistryError, match="not an image manifest"):
        manifest_facts(b'{"manifests": []}', "an index")


def test_the_tags_index_keeps_what_is_there_adds_once_and_refuses_another_kind():
    one = Referrer("sha256:" + "1" * 64, cf.OCI_MANIFEST, 10, sb.BUNDLE_MEDIA_TYPE, (("k", "v"),))
    two = Referrer("sha256:" + "2" * 64, cf.OCI_MANIFEST, 20, sb.SIGNATURE_ARTIFACT)
    first = index_with(None, [one], "tag")
    assert first is not None
    document = json.loads(first)
    assert document["mediaType"] == OCI_INDEX and document["manifests"] == [one.descriptor()]
    foreign = {"mediaType": cf.OCI_MANIFEST, "digest": "sha256:" + "3" * 64, "size": 5, "artifactType": "x/y",
               "annotations": {"by": "cosign"}, "platform": {"os": "unknown"}}
    theirs = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [foreign]}).encode()
    both = index_with(theirs, [one, two, one], "tag")
    assert both is not None and json.loads(both)["manifests"] == [foreign, one.descriptor(), two.descriptor()]
    assert index_with(both, [two], "tag") is None  # listed already: nothing to push
    with pytest.raises(RegistryError, match="no image index"):
        index_with(json.dumps({"mediaType": cf.OCI_MANIFEST, "layers": []}).encode(), [one], "repo:sha256-x")


def test_a_list_is_input_entries_without_a_valid_digest_are_left_out_and_it_is_bounded():
    entries = [{"digest": "sha256:" + "4" * 64, "size": 3, "mediaType": cf.OCI_MANIFEST, "artifactType": "a/b"},
               {"digest": "../../etc/passwd", "size": 1}, "not an entry", {"digest": "sha256:" + "5" * 64,
                                                                           "size": True, "annotations": {"n": 1}}]
    found = listed(json.dumps({"manifests": entries}).encode(), "list")
    assert [(r.digest[-1], r.size, r.artifact_type, r.annotations) for r in found] == [("4", 3, "a/b", ()),
                                                                                       ("5", 0, "", ())]
    many = [{"digest": "sha256:" + f"{n:064x}", "size": 1} for n in range(MAX_LISTED + 5)]
    assert len(listed(json.dumps({"manifests": many}).encode(), "list")) == MAX_LISTED
    for body in (b"[]", b"not json", b'{"manifests": {}}'):
        with pytest.raises(RegistryError):
            listed(body, "list")


def test_a_bundle_round_trips_and_names_its_key_as_cosign_does(tmp_path):
    generate_keys(tmp_path / "k.key", tmp_path / "k.pub")
    key = load_signing_key(tmp_path / "k.key")
    assert key is not None
    statement = sb.sign_statement("r.example/x", DIGEST)
    envelope = cf.envelope(statement, key.sign(cf.pae(cf.IN_TOTO, statement)))
    body = sb.bundle(envelope, sb.key_hint(key.key.public_key()))
    document = json.loads(body)
    assert document["mediaType"] == sb.BUNDLE_MEDIA_TYPE
    assert document["verificationMaterial"] == {"publicKey": {"hint": sb.key_hint(key.key.public_key())},
                                                "tlogEntries": []}
    assert base64.b64decode(document["dsseEnvelope"]["payload"]) == statement
    read = sb.bundle_envelope(body)
    assert read is not None and envelope_statement(key.key.public_key(), read) == json.loads(statement)
    assert json.loads(statement)["predicateType"] == sb.SIGN_PREDICATE_TYPE and json.loads(statement)["predicate"] == {}
    for junk in (b"{}", b"[]", b"x", json.dumps({**document, "extra": 1}).encode()):
        assert sb.bundle_envelope(junk) is None


def test_a_bundle_cosign_attached_is_read_and_verified():
    """cosign 2.5.0's `attest --new-bundle-format --key` (no tlogEntries in its JSON: protobuf leaves the empty list
    out), taken from the registry it attached it to."""
    body = (DATA / "cosign-2.5.0-bundle.json").read_bytes()
    public = load_public_key(DATA / "cosign-2.5.0-bundle.pub")
    assert json.loads(body)["verificationMaterial"] == {"publicKey": {"hint": sb.key_hint(public)}}
    envelope = sb.bundle_envelope(body)
    assert envelope is not None
    statement = envelope_statement(public, envelope)
    assert statement is not None and statement["predicateType"] == "https://cosign.sigstore.dev/attestation/v1"


def test_cosign_2s_oci_11_signature_is_typed_twice():
    layer = cf.signature_layer(b"payload", b"sig")
    body, config = sb.signature_manifest([layer], SUBJECT)
    document = json.loads(body)
    assert document["artifactType"] == document["config"]["mediaType"] == sb.SIGNATURE_ARTIFACT
    assert document["subject"] == SUBJECT and document["config"]["digest"] == cf.sha256_digest(config)
    assert document["layers"] == [layer.descriptor()]
