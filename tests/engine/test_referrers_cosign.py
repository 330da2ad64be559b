"""Issue 47: signatures where cosign 3 looks, beside the tag scheme where cosign 2 looks. buildkit attaches the
signature and the attestations as OCI 1.1 referrers (release/referrersigning.py), and cosign itself (Debian's
2.5.0) finds and verifies them offline, on three real registries on loopback:

* CNCF distribution 2.8, which has no referrers API: the referrers tag `sha256-<hex>` holds the index;
* go-containerregistry's registry with the API and the `OCI-Subject` header: the API alone;
* the same as 0.20.1 ships it, without the header: the API, and the tag too, as the spec asks of a client.

The referrers are attached alone first (no `.sig`/`.att` tag exists, so cosign can have found them only
there), then `sign_image` writes both and each verifier finds its own. `verify-image` reads them as well."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from referrersregistry import referrers_registry, referrers_registry_bare  # noqa: F401  (fixtures)
from test_signing_cosign import TRUSTED_ROOT, lock_entry

from buildkit.oci.referrers import EMPTY_MEDIA_TYPE, fallback_tag
from buildkit.oci.registry import RegistryClient
from buildkit.release import cosignformat as cf
from buildkit.release import sigstorebundle as sb
from buildkit.release.lock import entry_dict
from buildkit.release.lockfile import write_lock_entry
from buildkit.release.provenance import PREDICATE_TYPE, RunDetails, provenance_statement
from buildkit.release.referrersigning import attach_referrers, find_referrers
from buildkit.release.sbom import PREDICATE_TYPE as SBOM_TYPE
from buildkit.release.sbom import sbom_document, sbom_statement
from buildkit.release.cosignformat import Attestation
from buildkit.release.signing import sign_image
from buildkit.release.signkeys import generate_keys, load_public_key, load_signing_key

pytestmark = pytest.mark.skipif(shutil.which("cosign") is None, reason="cosign is not installed (make setup)")
REPO = "buildkit-referrers/tiny"
KINDS = ("distribution", "api", "api-bare")


def push_image(client: RegistryClient, repo: str, marker: str) -> str:
    """A one-layer image pushed with buildkit's client (no engine); its digest."""
    layer = marker.encode()
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": [cf.sha256_digest(layer)]}}).encode()
    for blob in (layer, config):
        client.upload_blob(repo, cf.sha256_digest(blob), blob, len(blob))
    manifest = json.dumps({"schemaVersion": 2, "mediaType": cf.OCI_MANIFEST,
                           "config": {"mediaType": cf.OCI_CONFIG, "digest": cf.sha256_digest(config),
                                      "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                       "digest": cf.sha256_digest(layer), "size": len(layer)}]}).encode()
    return client.put_manifest(repo, "v1", manifest, cf.OCI_MANIFEST)


def cosign(work: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": str(work), "TUF_ROOT": str(work / "tuf")}
    return subprocess.run(["cosign", *args, "--insecure-ignore-tlog", "--allow-http-registry"],
                          capture_output=True, text=True, timeout=120, env=env, check=False)


def bundle_verify(work: Path, ref: str, kind: str, key: str = "cosign.pub") -> subprocess.CompletedProcess:
    return cosign(work, "verify-attestation", "--new-bundle-format", "--trusted-root", str(work / "root.json"),
                  "--key", str(work / key), "--type", kind, ref)


def statements(done: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(base64.b64decode(json.loads(line)["payload"])) for line in done.stdout.splitlines()
            if line.startswith("{")]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    work = tmp_path_factory.mktemp("referrers")
    generate_keys(work / "cosign.key", work / "cosign.pub")
    generate_keys(work / "other.key", work / "other.pub")
    (work / "root.json").write_text(json.dumps(TRUSTED_ROOT))
    return work


@pytest.fixture(scope="module")
def registries(registry_plain, referrers_registry, referrers_registry_bare):
    return {"distribution": registry_plain.host, "api": referrers_registry.host,
            "api-bare": referrers_registry_bare.host}


def attestations(host: str, repo: str, digest: str) -> list[Attestation]:
    entry = lock_entry(digest)
    statement = provenance_statement(entry, digest, f"{host}/{repo}",
                                     RunDetails("test-47", "2026-12-06T00:00:00Z", "2026-12-06T00:01:00Z"))
    bom = sbom_statement(sbom_document([], entry_dict(entry), image_name=repo), digest, f"{host}/{repo}")
    return [Attestation(PREDICATE_TYPE, statement), Attestation(SBOM_TYPE, bom)]


@pytest.mark.parametrize("kind", KINDS)
def test_cosign_verifies_the_referrers_alone(kind, registries, work, cli):
    host = registries[kind]
    key = load_signing_key(work / "cosign.key")
    assert key is not None
    with RegistryClient(host) as client:
        digest = push_image(client, REPO, f"alone on {kind}")
        written = attach_referrers(client, REPO, digest, key, attestations(host, REPO, digest))
        tags = set(client.list_tags(REPO))
        assert not {cf.tag_for(digest, "sig"), cf.tag_for(digest, "att")} & tags  # no tag scheme here
        has_tag = fallback_tag(digest) in tags
        index = json.loads(client.get_manifest(REPO, fallback_tag(digest))[0]) if has_tag else None
    # where each registry got them: the tag without the API, or without the header
    assert has_tag == (kind != "api"), (kind, tags)
    assert len(written) == 4 + has_tag  # cosign 2's signature, the signature's, provenance's and SBOM's bundles
    if index is not None:  # the spec's entries: the manifest's artifactType (not its config's) and annotations
        types = sorted(m["artifactType"] for m in index["manifests"])
        assert types == sorted([sb.SIGNATURE_ARTIFACT] + [sb.BUNDLE_MEDIA_TYPE] * 3) and EMPTY_MEDIA_TYPE not in types
        predicates = {m.get("annotations", {}).get(sb.PREDICATE_ANNOTATION) for m in index["manifests"]}
        assert predicates == {None, sb.SIGN_PREDICATE_TYPE, PREDICATE_TYPE, SBOM_TYPE}
    ref = f"{host}/{REPO}@{digest}"
    done = cosign(work, "verify", "--experimental-oci11", "--key", str(work / "cosign.pub"), ref)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["critical"]["image"]["docker-manifest-digest"] == digest
    assert cosign(work, "verify", "--key", str(work / "cosign.pub"), ref).returncode != 0  # only the referrer
    done = bundle_verify(work, ref, "slsaprovenance1")
    assert done.returncode == 0, done.stderr
    [statement] = statements(done)
    assert statement["predicate"]["buildDefinition"]["externalParameters"]["commit"] == "9" * 40
    assert statement["subject"][0]["digest"]["sha256"] == digest.split(":")[1]
    done = bundle_verify(work, ref, "cyclonedx")
    assert done.returncode == 0 and statements(done)[0]["predicate"]["specVersion"] == "1.6", done.stderr
    done = bundle_verify(work, ref, sb.SIGN_PREDICATE_TYPE)  # what cosign 3's `cosign verify` checks
    assert done.returncode == 0 and statements(done)[0]["predicate"] == {}, done.stderr
    assert bundle_verify(work, ref, "slsaprovenance1", key="other.pub").returncode != 0
    assert cosign(work, "verify", "--experimental-oci11", "--key", str(work / "other.pub"), ref).returncode != 0
    done = cli("verify-image", f"{host}/{REPO}@{digest}", "--key", str(work / "cosign.pub"))
    assert done.returncode == 0, done.stdout + done.stderr
    route = "the referrers API" if kind != "distribution" else f"the referrers tag {fallback_tag(digest)}"
    assert f"a sigstore bundle and cosign 2's OCI 1.1 signature through {route})" in done.stdout, done.stdout
    assert f"(a sigstore bundle through {route})" in done.stdout and "cosign's tag" not in done.stdout  # provenance


def test_sign_image_writes_both_and_each_cosign_finds_its_own(registries, work, cli, tmp_path):
    host = registries["api-bare"]
    key = load_signing_key(work / "cosign.key")
    assert key is not None
    with RegistryClient(host) as client:
        digest = push_image(client, REPO + "-both", "both")
        written = sign_image(client, REPO + "-both", digest, key, attestations(host, REPO + "-both", digest))
    name = f"{host}/{REPO}-both"
    assert written[:2] == [f"{name}:{cf.tag_for(digest, 'sig')}", f"{name}:{cf.tag_for(digest, 'att')}"]
    assert written[-1] == f"{name}:{fallback_tag(digest)}" and len(written) == 7
    ref = f"{name}@{digest}"
    pub = str(work / "cosign.pub")
    for args in (("verify",), ("verify", "--experimental-oci11"),
                 ("verify-attestation", "--type", "slsaprovenance1")):
        done = cosign(work, *args, "--key", pub, ref)
        assert done.returncode == 0, (args, done.stderr)
    assert bundle_verify(work, ref, "slsaprovenance1").returncode == 0
    lock = tmp_path / "buildkit.lock"
    write_lock_entry(lock, lock_entry(digest))
    done = cli("verify-image", ref, "--key", pub, "--lock", str(lock))
    assert done.returncode == 0, done.stdout + done.stderr
    signature = next(line for line in done.stdout.splitlines() if line.startswith("ok  signature"))
    assert f"cosign's tag {cf.tag_for(digest, 'sig')}" in signature
    assert "a sigstore bundle and cosign 2's OCI 1.1 signature through the referrers API" in signature


def test_a_referrers_tag_keeps_what_cosign_attached_there(registries, work):
    """cosign attaches its own bundle first (go-containerregistry writes the tag's index); buildkit's entries join
    it, and cosign still verifies its own and buildkit's."""
    host = registries["distribution"]
    with RegistryClient(host) as client:
        digest = push_image(client, REPO + "-shared", "shared")
    ref = f"{host}/{REPO}-shared@{digest}"
    (work / "predicate.json").write_text('{"by": "cosign"}')
    env = {"PATH": os.environ["PATH"], "HOME": str(work), "TUF_ROOT": str(work / "tuf"), "COSIGN_PASSWORD": ""}
    cosign_key = work / "own" / "cosign.key"
    cosign_key.parent.mkdir(exist_ok=True)
    subprocess.run(["cosign", "generate-key-pair"], cwd=cosign_key.parent, env=env, capture_output=True, check=True)
    done = subprocess.run(["cosign", "attest", "--yes", "--key", str(cosign_key), "--tlog-upload=false",
                           "--allow-http-registry", "--new-bundle-format", "--type", "custom", "--predicate",
                           str(work / "predicate.json"), ref], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    key = load_signing_key(work / "cosign.key")
    assert key is not None
    with RegistryClient(host) as client:
        before = json.loads(client.get_manifest(REPO + "-shared", fallback_tag(digest))[0])["manifests"]
        attach_referrers(client, REPO + "-shared", digest, key, attestations(host, REPO + "-shared", digest))
        after = json.loads(client.get_manifest(REPO + "-shared", fallback_tag(digest))[0])["manifests"]
        found = find_referrers(client, REPO + "-shared", digest, load_public_key(work / "cosign.pub"))
    assert len(before) == 1 and after[:1] == before and len(after) == 5
    assert found.signed and {s["predicateType"] for s in found.statements} == {PREDICATE_TYPE, SBOM_TYPE}
    assert bundle_verify(work, ref, "custom", key="own/cosign.pub").returncode == 0
    assert bundle_verify(work, ref, "slsaprovenance1").returncode == 0


def test_a_referrer_of_another_digest_is_not_taken(registries, work, cli):
    """What a referrers list names is input: a signed bundle of image A listed under image B's tag (a registry or a
    pusher that lies) does not sign B."""
    host = registries["distribution"]
    key = load_signing_key(work / "cosign.key")
    assert key is not None
    repo = REPO + "-lying"
    with RegistryClient(host) as client:
        signed = push_image(client, repo, "signed")
        unsigned = push_image(client, repo, "unsigned")
        attach_referrers(client, repo, signed, key, attestations(host, repo, signed))
        index = client.get_manifest(repo, fallback_tag(signed))[0]
        client.put_manifest(repo, fallback_tag(unsigned), index, "application/vnd.oci.image.index.v1+json")
        found = find_referrers(client, repo, unsigned, load_public_key(work / "cosign.pub"))
    assert not found.signed and not found.statements
    done = cli("verify-image", f"{host}/{repo}@{unsigned}", "--key", str(work / "cosign.pub"))
    assert done.returncode == 1 and "FAIL  signature" in done.stdout and "Traceback" not in done.stderr
