"""Issue 48, class 1: buildkit signs, tags and records only an image it built or proved to be its own.

Someone who can push to the repository but holds no signing key points the build-key tag `bk-<key>-cpu` at
another image: the owner's image with one layer more. The owner's next `build --push` of the same inputs must
not take that tag's word: the image behind it is reused only when the lock recorded that digest for the key,
or when it carries a signature of the owner's key over a provenance of these inputs. Otherwise the tag is
reported as tampered and nothing is signed, tagged or recorded. Against the real registry on 127.0.0.1 and
the real CLI; one build of the example fork serves the module."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from buildkit.oci.ocilayout import sha256_digest
from buildkit.oci.registry import RegistryClient
from buildkit.release import cosignformat as cf
from buildkit.release.signkeys import generate_keys
from registryserver import tag_digests
from test_publish_docker import buildkit, make_project, ok, spy_env

pytestmark = pytest.mark.docker

REPO = "owner/tiny"


def key_tag(tags: dict[str, str]) -> str:
    (tag,) = [t for t in tags if t.startswith("bk-")]
    return tag


def one_layer_more(client: RegistryClient, repo: str, digest: str, version: str) -> str:
    """The image at digest with one layer more (a file /evil) and the version label given, pushed by digest as
    an attacker with push rights would: its manifest digest."""
    body, media_type, _ = client.get_manifest(repo, digest)
    manifest = json.loads(body)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = b"not the owner's\n"
        info = tarfile.TarInfo("evil")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    layer = gzip.compress(raw.getvalue(), mtime=0)
    client.upload_blob(repo, sha256_digest(layer), layer, len(layer))
    config = json.loads(client.get_blob(repo, manifest["config"]["digest"]))
    config["rootfs"]["diff_ids"].append(sha256_digest(raw.getvalue()))
    config["config"]["Labels"]["org.opencontainers.image.version"] = version
    config_bytes = json.dumps(config).encode()
    client.upload_blob(repo, sha256_digest(config_bytes), config_bytes, len(config_bytes))
    manifest["config"] = {**manifest["config"], "digest": sha256_digest(config_bytes), "size": len(config_bytes)}
    manifest["layers"].append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                               "digest": sha256_digest(layer), "size": len(layer)})
    forged = json.dumps(manifest).encode()
    return client.put_manifest(repo, sha256_digest(forged), forged, media_type)


@pytest.fixture(scope="module")
def owner(tmp_path_factory, registry_plain, debian_base_image):
    """The owner's project, published once as 6.6.5 with the owner's key (sign.key_file)."""
    from forkrepo import make_fork_repo
    from test_publish_docker import ROOT

    tmp = tmp_path_factory.mktemp("ownership")
    upstream = tmp / "upstream" / "tiny-fork"
    _, commit = make_fork_repo(upstream, ROOT / "examples" / "tiny-fork")
    project = make_project(tmp / "project", {"path": upstream, "commit": commit}, registry_plain.host,
                           debian_base_image, REPO)
    generate_keys(tmp / "cosign.key", tmp / "cosign.pub")
    env, log = spy_env(tmp)
    env["LLAMA_BUILDKIT_SIGN_KEY_FILE"] = str(tmp / "cosign.key")
    first = json.loads(ok(buildkit(project, env, "build", "--push", "--release", "6.6.5", "--json")).stdout)
    return {"project": project, "env": env, "log": log, "host": registry_plain.host, "digest": first["digest"],
            "tmp": tmp}


def test_a_build_key_tag_pointed_at_another_image_is_reported_and_nothing_is_signed(owner):
    project, env, host = owner["project"], owner["env"], owner["host"]
    lock_before = (project / "buildkit.lock").read_text()
    with RegistryClient(host) as client:
        before = tag_digests(client, REPO)
        bk = key_tag(before)
        evil = one_layer_more(client, REPO, owner["digest"], "6.6.6")
        body, media_type, _ = client.get_manifest(REPO, evil)
        client.put_manifest(REPO, bk, body, media_type)  # the attack: the build-key tag names the other image
    owner["log"].write_text("")
    proc = buildkit(project, env, "build", "--push", "--release", "6.6.6")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "tampered" in errors[0] and bk in errors[0] and evil in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr and "already published" not in proc.stdout
    with RegistryClient(host) as client:
        after = tag_digests(client, REPO)
        assert client.head_manifest(REPO, cf.tag_for(evil, "sig")) is None  # not signed
        assert client.head_manifest(REPO, cf.tag_for(evil, "att")) is None  # nothing attested
    assert {t: d for t, d in after.items() if t != bk} == {t: d for t, d in before.items() if t != bk}
    assert "6.6.6-cpu" not in after  # no release tag; every other tag where it was
    assert (project / "buildkit.lock").read_text() == lock_before  # nothing recorded
    assert "buildx build" not in owner["log"].read_text()
    # `push` (the engine's image of the lock's entry) takes the same path, and stops the same way
    pushed = buildkit(project, env, "push")
    assert pushed.returncode == 1 and pushed.stderr.count("error:") == 1, pushed.stdout + pushed.stderr
    assert "tampered" in pushed.stderr and evil in pushed.stderr
    with RegistryClient(host) as client:
        assert tag_digests(client, REPO) == after and client.head_manifest(REPO, cf.tag_for(evil, "sig")) is None
    assert (project / "buildkit.lock").read_text() == lock_before
    with RegistryClient(host) as client:  # the owner's own image back under its tag: reused again
        body, media_type, _ = client.get_manifest(REPO, owner["digest"])
        client.put_manifest(REPO, bk, body, media_type)


def fresh_project(owner, name: str, repo: str = REPO) -> Path:
    """The owner's project on a fresh machine: the same buildkit.toml and fork, no lock, another cache."""
    project = owner["tmp"] / name
    project.mkdir()
    text = (owner["project"] / "buildkit.toml").read_text().replace(f"/{REPO}\"", f"/{repo}\"")
    (project / "buildkit.toml").write_text(text)
    (project / "patches").mkdir()
    return project


def fresh_env(owner, *, key: bool = True) -> dict[str, str]:
    """The owner's environment (its caches: what a fresh machine lacks that matters here is the lock)."""
    env = dict(owner["env"])
    if not key:
        env.pop("LLAMA_BUILDKIT_SIGN_KEY_FILE")
    return env


def test_on_a_fresh_machine_the_owners_signature_proves_the_build_key_tag(owner):
    """No lock here: the image behind the build-key tag is the owner's by its signature and provenance. It is
    reused (nothing built), its version kept; a --release that differs is refused, never ignored."""
    project, env = fresh_project(owner, "fresh"), fresh_env(owner)
    owner["log"].write_text("")
    done = json.loads(ok(buildkit(project, env, "build", "--push", "--json")).stdout)
    assert done["origin"] == "registry" and done["digest"] == owner["digest"] and done["version"] == "6.6.5"
    assert done["signed"] == []  # signed when it was published: nothing to add
    assert "buildx build" not in owner["log"].read_text()
    entry = json.loads((project / "buildkit.lock").read_text())["builds"]["cpu/server"]
    assert entry["image_digest"] == owner["digest"] and entry["version"] == "6.6.5"
    other = buildkit(project, env, "build", "--push", "--release", "6.6.6")
    assert other.returncode == 1 and other.stderr.count("error:") == 1, other.stderr
    assert "published as version 6.6.5" in other.stderr and "--release asks for 6.6.6" in other.stderr
    with RegistryClient(owner["host"]) as client:
        assert "6.6.6-cpu" not in client.list_tags(REPO)


def test_without_a_lock_or_a_key_a_build_key_tag_proves_nothing(owner):
    project, env = fresh_project(owner, "nokey"), fresh_env(owner, key=False)
    with RegistryClient(owner["host"]) as client:
        before = tag_digests(client, REPO)
    proc = buildkit(project, env, "build", "--push")
    assert proc.returncode == 1 and proc.stderr.count("error:") == 1, proc.stdout + proc.stderr
    assert "tampered?" in proc.stderr and "no signing key was given" in proc.stderr
    assert not (project / "buildkit.lock").exists()
    with RegistryClient(owner["host"]) as client:
        assert tag_digests(client, REPO) == before


def copy_image(client: RegistryClient, digest: str, repo: str, tag: str, work: Path) -> None:
    """The owner's image, its signature and its attestations, into repo with only tag on the image: what a
    publication killed after its first release tag leaves (its tags go on after the signature)."""
    body, media_type, _ = client.get_manifest(REPO, digest)
    manifest = json.loads(body)
    for desc in [manifest["config"], *manifest["layers"]]:
        blob = work / desc["digest"].replace(":", "-")
        client.download_blob(REPO, desc["digest"], blob, desc["size"])
        with blob.open("rb") as fh:
            client.upload_blob(repo, desc["digest"], fh, desc["size"])
    client.put_manifest(repo, tag, body, media_type)
    for kind in ("sig", "att"):
        sig_body, sig_type, _ = client.get_manifest(REPO, cf.tag_for(digest, kind))
        sig = json.loads(sig_body)
        for desc in [sig["config"], *sig["layers"]]:
            data = client.get_blob(REPO, desc["digest"])
            client.upload_blob(repo, desc["digest"], data, len(data))
        client.put_manifest(repo, cf.tag_for(digest, kind), sig_body, sig_type)


@pytest.mark.parametrize("release", [(), ("--release", "6.6.5")], ids=["next", "release"])
def test_a_fresh_machine_completes_a_publication_cut_short(owner, release, tmp_path):
    """A kill after the signature and the first release tag: the registry has the signed image under 6.6.5-cpu
    and nothing else. A fresh machine's `build --push` (no lock) finds it ours by its signature and completes it
    (the moving tags, the build-key tag last), nothing built, instead of publishing 6.6.6 (without --release)
    or stopping at "immutable tags are never overwritten" (with it)."""
    repo = f"owner/half-{len(release)}"
    with RegistryClient(owner["host"]) as client:
        copy_image(client, owner["digest"], repo, "6.6.5-cpu", tmp_path)
    project, env = fresh_project(owner, f"half-{len(release)}", repo), fresh_env(owner)
    owner["log"].write_text("")
    done = json.loads(ok(buildkit(project, env, "build", "--push", "--json", *release)).stdout)
    assert done["origin"] == "registry" and done["digest"] == owner["digest"] and done["version"] == "6.6.5"
    assert "buildx build" not in owner["log"].read_text()
    with RegistryClient(owner["host"]) as client:
        tags = tag_digests(client, repo)
    assert {"6.6.5-cpu", "6.6-cpu", "6-cpu", "cpu", "latest"} <= set(tags) and key_tag(tags)
    assert {tags[t] for t in tags if not t.startswith("sha256-")} == {owner["digest"]}


def test_an_index_proves_ours_by_its_own_signature_and_each_of_its_images(registry_plain, tmp_path):
    """A multi-platform build's index (release/ownership.py index_signature_proof): our key signed the index
    with a provenance of this commit and these platforms, and each image it lists with a provenance of its
    platform's build key. One image that is not (another key's, or none) and the index is not ours."""
    from buildkit.core.errors import BuildkitError
    from buildkit.oci.ociindex import PlatformManifest, index_document
    from buildkit.oci.ocilayout import OCI_INDEX
    from buildkit.release.ownership import index_signature_proof
    from buildkit.release.provenance import BUILD_TYPE, PREDICATE_TYPE, RunDetails, index_provenance_statement
    from buildkit.release.cosignformat import Attestation
    from buildkit.release.signing import sign_image
    from buildkit.release.signkeys import load_signing_key
    from test_nightly_assemble import push_image

    repo, commit = "owner/index", "c" * 40
    generate_keys(tmp_path / "k.key", tmp_path / "k.pub")
    generate_keys(tmp_path / "o.key", tmp_path / "o.pub")
    ours, other = load_signing_key(tmp_path / "k.key", env={}), load_signing_key(tmp_path / "o.key", env={})
    assert ours is not None and other is not None
    platforms = [("linux/amd64", {"build_key": "a" * 64, "commit": commit}),
                 ("linux/arm64", {"build_key": "b" * 64, "commit": commit})]

    def statement(digest: str, params: dict) -> bytes:
        return json.dumps({"_type": "https://in-toto.io/Statement/v1", "predicateType": PREDICATE_TYPE,
                           "subject": [{"name": "x", "digest": {"sha256": digest.split(":")[1]}}],
                           "predicate": {"buildDefinition": {
                               "buildType": BUILD_TYPE, "externalParameters": {"commit": params["commit"]},
                               "internalParameters": {"build_key": params["build_key"]},
                               "resolvedDependencies": []}}}).encode()

    with RegistryClient(registry_plain.host) as client:
        manifests = []
        for (platform, params), signer in zip(platforms, (ours, other), strict=True):
            digest = push_image(client, platform.split("/")[1], f"img-{platform.split('/')[1]}", repo=repo)
            sign_image(client, repo, digest, signer, [Attestation(PREDICATE_TYPE, statement(digest, params))])
            body, media_type, _ = client.get_manifest(repo, digest)
            manifests.append(PlatformManifest.of_body(platform, digest, body, media_type))
        document = index_document(manifests)
        index = client.put_manifest(repo, "v1", document, OCI_INDEX)
        listed = [(p, m.digest) for (p, _), m in zip(platforms, manifests, strict=True)]
        sign_image(client, repo, index, ours, [Attestation(PREDICATE_TYPE, index_provenance_statement(
            f"{registry_plain.host}/{repo}", index, listed, commit=commit, version="1.0.0",
            run=RunDetails("t", "", "")))])
        public = ours.key.public_key()
        with pytest.raises(BuildkitError, match="its linux/arm64 image .* no signature of"):
            index_signature_proof(client, repo, index, public, commit=commit, platforms=platforms)
        arm = manifests[1].digest
        sign_image(client, repo, arm, ours, [Attestation(PREDICATE_TYPE, statement(arm, platforms[1][1]))])
        proof = index_signature_proof(client, repo, index, public, commit=commit, platforms=platforms)
        assert proof.how == "signature" and proof.version == "1.0.0" and proof.digest == index
        with pytest.raises(BuildkitError, match="not of this commit"):
            index_signature_proof(client, repo, index, public, commit="d" * 40, platforms=platforms)
        swapped = [platforms[0], ("linux/arm64", {**platforms[1][1], "build_key": "e" * 64})]
        with pytest.raises(BuildkitError, match="build_key is not these inputs'"):
            index_signature_proof(client, repo, index, public, commit=commit, platforms=swapped)
