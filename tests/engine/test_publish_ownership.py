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
