"""Issue 38: what buildkit signs in Python (release/signing.py) is verified by cosign itself, offline, on the
loopback registry: a signature, and the provenance and SBOM attestations. A wrong key, a tampered
attestation and an image pushed again under the tag fail; the image's digest is the one before signing."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from registryserver import head_digest
from test_registry import push_tiny_image

from buildkit.oci.registry import RegistryClient
from buildkit.oci.referrers import fallback_tag
from buildkit.plan.buildkey import key_of
from buildkit.plan.buildplan import make_plan, make_request
from buildkit.plan.plantypes import Resolved
from buildkit.plan.request import SourceFacts
from buildkit.plan.config import load_config
from buildkit.plan.inputs import BaseImage
from buildkit.plan.plantypes import plan_inputs
from buildkit.release import cosignformat as cf
from buildkit.release.lock import LockEntry, entry_dict
from buildkit.release.lockfile import write_lock_entry
from buildkit.release.provenance import PREDICATE_TYPE, RunDetails, provenance_statement
from buildkit.release.sbom import PREDICATE_TYPE as SBOM_TYPE
from buildkit.release.sbom import sbom_document, sbom_statement
from buildkit.release.cosignformat import Attestation
from buildkit.release.signing import sign_image
from buildkit.release.signkeys import generate_keys, load_signing_key

pytestmark = [pytest.mark.docker, pytest.mark.skipif(shutil.which("cosign") is None,
                                                     reason="cosign is not installed (make setup)")]
REPO = "buildkit-signing/tiny"
# the trusted root cosign's --new-bundle-format wants (without it, cosign asks the public TUF mirror): a key
# signature with no transparency-log entry needs nothing of it
TRUSTED_ROOT = {"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1"}


def lock_entry(digest: str) -> LockEntry:
    cfg = load_config(None, env={}, overrides={"build.arch": ("cpu", "test")})
    facts = SourceFacts(url="https://example.invalid/fork", commit="9" * 40, commit_time=1767225600,
                        build_number=1, patch_set_sha256="ab" * 32, patch_names=("0001-x.patch",))
    plan = make_plan(make_request(cfg), Resolved(facts, "7" * 64, "9.9.9"))
    inputs = plan_inputs(plan, (BaseImage("buildkit-test/debian:bookworm", "sha256:" + "cd" * 32),), None, None)
    key = key_of(inputs)
    return LockEntry(**inputs.lock_fields(), ref="main", template="t.j2", dockerfile_sha256="d" * 64,
                     cuda_root=None, cmake_archs=None, image_name=REPO, image_digest=digest,
                     image_id="sha256:" + "f" * 64, tags=(f"{REPO}:cpu",), build_key=key, labels=inputs.to_labels(key))


def cosign(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp), "TUF_ROOT": str(tmp / "tuf")}
    return subprocess.run(["cosign", *args, "--insecure-ignore-tlog", "--allow-http-registry"],
                          capture_output=True, text=True, timeout=120, env=env, check=False)


@pytest.fixture(scope="module")
def signed(registry_plain, busybox_image, tmp_path_factory):
    work = tmp_path_factory.mktemp("signing")
    digest = push_tiny_image(busybox_image, f"{registry_plain.host}/{REPO}:v1", work / "ctx")
    generate_keys(work / "cosign.key", work / "cosign.pub")
    generate_keys(work / "other.key", work / "other.pub")
    key = load_signing_key(work / "cosign.key")
    assert key is not None
    statement = provenance_statement(lock_entry(digest), digest, f"{registry_plain.host}/{REPO}",
                                     RunDetails("test-1", "2026-12-05T00:00:00Z", "2026-12-05T00:01:00Z"))
    with RegistryClient(registry_plain.host) as client:
        before = client.head_manifest(REPO, "v1")
        sbom = sbom_statement(sbom_document([], entry_dict(lock_entry(digest)), image_name=REPO), digest, REPO)
        sign_image(client, REPO, digest, key, [Attestation(PREDICATE_TYPE, statement),
                                               Attestation(SBOM_TYPE, sbom)])
        after = client.head_manifest(REPO, "v1")
    assert before is not None and after is not None and before.digest == after.digest == digest
    return {"host": registry_plain.host, "digest": digest, "work": work, "busybox": busybox_image}


def test_cosign_verifies_the_signature_and_the_provenance(signed):
    ref = f"{signed['host']}/{REPO}@{signed['digest']}"
    pub = str(signed["work"] / "cosign.pub")
    done = cosign(signed["work"], "verify", "--key", pub, ref)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["critical"]["image"]["docker-manifest-digest"] == signed["digest"]
    done = cosign(signed["work"], "verify-attestation", "--key", pub, "--type", "slsaprovenance1", ref)
    assert done.returncode == 0, done.stderr
    statement = json.loads(base64.b64decode(json.loads(done.stdout.splitlines()[0])["payload"]))
    assert statement["predicate"]["buildDefinition"]["externalParameters"]["commit"] == "9" * 40
    done = cosign(signed["work"], "verify-attestation", "--key", pub, "--type", "cyclonedx", ref)
    assert done.returncode == 0, done.stderr
    statement = json.loads(base64.b64decode(json.loads(done.stdout.splitlines()[0])["payload"]))
    assert statement["predicate"]["specVersion"] == "1.6"


def test_cosign_refuses_a_wrong_key(signed):
    ref = f"{signed['host']}/{REPO}@{signed['digest']}"
    other = str(signed["work"] / "other.pub")
    assert cosign(signed["work"], "verify", "--key", other, ref).returncode != 0
    assert cosign(signed["work"], "verify-attestation", "--key", other, "--type", "cyclonedx", ref).returncode != 0
    assert cosign(signed["work"], "verify-attestation", "--key", other, "--type", "slsaprovenance1",
                  ref).returncode != 0


def test_cosign_refuses_a_tampered_attestation(signed, registry_plain):
    repo = REPO + "-tampered"
    digest = push_tiny_image(signed["busybox"], f"{signed['host']}/{repo}:v1", signed["work"] / "ctx2")
    key = load_signing_key(signed["work"] / "cosign.key")
    assert key is not None
    statement = provenance_statement(lock_entry(digest), digest, repo, RunDetails("t", "", ""))
    with RegistryClient(signed["host"]) as client:
        sign_image(client, repo, digest, key, [Attestation(PREDICATE_TYPE, statement)])
        ref = f"{signed['host']}/{repo}@{digest}"
        pub = str(signed["work"] / "cosign.pub")
        assert cosign(signed["work"], "verify-attestation", "--key", pub, "--type", "slsaprovenance1",
                      ref).returncode == 0
        body, _, _ = client.get_manifest(repo, cf.tag_for(digest, "att"))
        layer = json.loads(body)["layers"][0]
        envelope = json.loads(client.get_blob(repo, layer["digest"]))
        forged = statement.replace(b'"commit":"' + b"9" * 40, b'"commit":"' + b"6" * 40)
        assert forged != statement
        envelope["payload"] = base64.b64encode(forged).decode()  # the signature is the original's
        tampered = json.dumps(envelope).encode()
        client.upload_blob(repo, cf.sha256_digest(tampered), tampered, len(tampered))
        manifest, config = cf.manifest([cf.Layer(tampered, layer["mediaType"],
                                                 tuple(sorted(layer["annotations"].items())))])
        client.upload_blob(repo, cf.sha256_digest(config), config, len(config))
        client.put_manifest(repo, cf.tag_for(digest, "att"), manifest, cf.OCI_MANIFEST)
    assert cosign(signed["work"], "verify-attestation", "--key", pub, "--type", "slsaprovenance1",
                  ref).returncode != 0


def test_cosign_refuses_an_image_pushed_again_under_the_signed_tag(signed):
    repo = REPO + "-repushed"
    first = push_tiny_image(signed["busybox"], f"{signed['host']}/{repo}:v1", signed["work"] / "ctx3")
    key = load_signing_key(signed["work"] / "cosign.key")
    assert key is not None
    with RegistryClient(signed["host"]) as client:
        sign_image(client, repo, first, key)
    pub = str(signed["work"] / "cosign.pub")
    assert cosign(signed["work"], "verify", "--key", pub, f"{signed['host']}/{repo}:v1").returncode == 0
    second = push_tiny_image(signed["busybox"], f"{signed['host']}/{repo}:v2", signed["work"] / "ctx4")
    assert second != first
    with RegistryClient(signed["host"]) as client:  # v1 now names another image (as a re-push does)
        body, media_type, _ = client.get_manifest(repo, second)
        client.put_manifest(repo, "v1", body, media_type)
    assert cosign(signed["work"], "verify", "--key", pub, f"{signed['host']}/{repo}:v1").returncode != 0


def test_verify_image_checks_signature_provenance_and_lock(signed, cli, tmp_path):
    ref = f"{signed['host']}/{REPO}:v1"
    pub = str(signed["work"] / "cosign.pub")
    lock = tmp_path / "buildkit.lock"
    write_lock_entry(lock, lock_entry(signed["digest"]))
    done = cli("verify-image", ref, "--key", pub, "--lock", str(lock))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["ok  digest", "ok  signature", "ok  provenance", "ok  lock"]
    assert signed["digest"] in lines[0]

    done = cli("verify-image", ref, "--key", str(signed["work"] / "other.pub"))
    assert done.returncode == 1
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == ["ok  digest", "FAIL  signature",
                                                                         "FAIL  provenance"]
    other = tmp_path / "other.lock"  # a lock whose entry has another commit: the provenance is not its
    write_lock_entry(other, replace(lock_entry(signed["digest"]), commit="8" * 40))
    done = cli("verify-image", ref, "--key", pub, "--lock", str(other))
    assert done.returncode == 1 and ("FAIL  lock: the provenance's externalParameters.commit, "
                                    "resolvedDependencies[0] (llama.cpp fork) not as in") in done.stdout
    assert "Traceback" not in done.stderr


def test_a_pushed_lock_entry_is_signed_with_its_provenance_and_sbom(signed, cli, tmp_path):
    from buildkit.flows.unit.signpublished import sign_entry

    repo = REPO + "-flow"
    digest = push_tiny_image(signed["busybox"], f"{signed['host']}/{repo}:v1", tmp_path / "ctx")
    lock = tmp_path / "buildkit.lock"
    entry = replace(lock_entry(digest), image_name=repo, pushed=(f"{signed['host']}/{repo}:v1",))
    write_lock_entry(lock, entry)
    key = load_signing_key(None, env={"LLAMA_BUILDKIT_SIGN_KEY": (signed["work"] / "cosign.key").read_text()})
    assert key is not None
    result = sign_entry(lock, entry.key, key)
    assert result.reference == f"{signed['host']}/{repo}@{digest}"
    pub = str(signed["work"] / "cosign.pub")
    for args in (("verify",), ("verify-attestation", "--type", "slsaprovenance1"),
                 ("verify-attestation", "--type", "cyclonedx")):
        done = cosign(signed["work"], *args, "--key", pub, result.reference)
        assert done.returncode == 0, done.stderr
    with RegistryClient(signed["host"]) as client:
        assert head_digest(client, repo, "v1") == digest  # the image is the one pushed
    done = cli("verify-image", f"{signed['host']}/{repo}:v1", "--key", pub, "--lock", str(lock))
    assert done.returncode == 0 and done.stdout.count("ok  ") == 4, done.stdout + done.stderr


def test_build_push_signs_what_it_publishes_before_its_moving_tags(signed, registry_plain, debian_base_image,
                                                                   tmp_path, tmp_path_factory):
    """The one publication path signs: `build --push` with the key of a CI secret (LLAMA_BUILDKIT_SIGN_KEY).
    cosign verifies the digest, its provenance and its SBOM; the SBOM lists every package dpkg-query lists in
    the image; the same inputs pushed without a key have the same digest (signing does not touch the image)."""
    from forkrepo import make_fork_repo
    from test_publish_docker import ROOT, buildkit, make_project, ok, spy_env

    upstream = tmp_path_factory.mktemp("sign-upstream") / "tiny-fork"
    _, commit = make_fork_repo(upstream, ROOT / "examples" / "tiny-fork")
    fork = {"path": upstream, "commit": commit}
    env, _ = spy_env(tmp_path)
    env["LLAMA_BUILDKIT_SIGN_KEY"] = (signed["work"] / "cosign.key").read_text()
    project = make_project(tmp_path / "signed", fork, registry_plain.host, debian_base_image, "signing/built")
    result = json.loads(ok(buildkit(project, env, "build", "--push", "--json")).stdout)
    digest, host = result["digest"], registry_plain.host
    # cosign's tags, then the referrers (distribution 2.8 has no referrers API: the referrers tag holds them)
    assert result["signed"][:2] == [f"{host}/signing/built:{cf.tag_for(digest, 'sig')}",
                                    f"{host}/signing/built:{cf.tag_for(digest, 'att')}"]
    assert result["signed"][-1] == f"{host}/signing/built:{fallback_tag(digest)}" and len(result["signed"]) == 7
    pub = str(signed["work"] / "cosign.pub")
    (signed["work"] / "root.json").write_text(json.dumps(TRUSTED_ROOT))
    done = cosign(signed["work"], "verify-attestation", "--new-bundle-format", "--trusted-root",
                  str(signed["work"] / "root.json"), "--key", pub, "--type", "slsaprovenance1",
                  f"{host}/signing/built@{digest}")  # where cosign 3 looks
    assert done.returncode == 0, done.stderr
    for tag in ("0.1.0-cpu", "cpu"):  # a release tag and a moving one: both name the signed digest
        done = cosign(signed["work"], "verify", "--key", pub, f"{host}/signing/built:{tag}")
        assert done.returncode == 0, done.stderr
    done = cosign(signed["work"], "verify-attestation", "--key", pub, "--type", "slsaprovenance1",
                  f"{host}/signing/built@{digest}")
    assert done.returncode == 0, done.stderr
    statement = json.loads(base64.b64decode(json.loads(done.stdout.splitlines()[0])["payload"]))
    assert statement["subject"][0]["digest"]["sha256"] == digest.split(":", 1)[1]
    assert statement["predicate"]["buildDefinition"]["externalParameters"]["commit"] == commit
    done = cosign(signed["work"], "verify-attestation", "--key", pub, "--type", "cyclonedx",
                  f"{host}/signing/built@{digest}")
    assert done.returncode == 0, done.stderr
    bom = json.loads(base64.b64decode(json.loads(done.stdout.splitlines()[0])["payload"]))["predicate"]
    listed = {(c["name"], c["version"]) for c in bom["components"] if c.get("purl", "").startswith("pkg:deb/")}
    local = f"{host}/signing/built:0.1.0-cpu"
    dpkg = ok(subprocess.run(["docker", "run", "--rm", "--entrypoint", "dpkg-query", local, "-W",
                              "-f", "${db:Status-Status} ${Package} ${Version}\n"],
                             capture_output=True, text=True, timeout=120)).stdout
    installed = {tuple(line.split()[1:]) for line in dpkg.splitlines() if line.startswith("installed ")}
    assert installed and installed <= listed, installed - listed
    # an independent rebuilder (another key) rebuilds from the lock and signs its word beside the builder's
    env.pop("LLAMA_BUILDKIT_SIGN_KEY")
    rebuilt = json.loads(ok(buildkit(project, env, "reproduce", "buildkit.lock", "--attest", "--sign-key",
                                     str(signed["work"] / "other.key"), "--json")).stdout)
    assert rebuilt["reproduced"] and rebuilt["attested"][0] == f"{host}/signing/built:{cf.tag_for(digest, 'att')}"
    assert rebuilt["attested"][-1] == f"{host}/signing/built:{fallback_tag(digest)}"  # and its bundle
    vsa = ("verify-attestation", "--type", "https://slsa.dev/verification_summary/v1")
    done = cosign(signed["work"], *vsa, "--key", str(signed["work"] / "other.pub"), f"{host}/signing/built@{digest}")
    assert done.returncode == 0, done.stderr
    word = json.loads(base64.b64decode(json.loads(done.stdout.splitlines()[0])["payload"]))["predicate"]
    assert word["verificationResult"] == "PASSED" and word["resourceUri"] == f"docker://{host}/signing/built@{digest}"
    assert cosign(signed["work"], *vsa, "--key", pub, f"{host}/signing/built@{digest}").returncode != 0  # not ours
    done = cosign(signed["work"], "verify-attestation", "--key", pub, "--type", "slsaprovenance1",
                  f"{host}/signing/built@{digest}")
    assert done.returncode == 0, done.stderr  # the builder's provenance is kept beside it
    # the same inputs, no key, another repository: the same digest
    plain = make_project(tmp_path / "plain", fork, registry_plain.host, debian_base_image, "signing/plain")
    unsigned = json.loads(ok(buildkit(plain, env, "build", "--push", "--json")).stdout)
    assert unsigned["digest"] == digest and unsigned["signed"] == []
    subprocess.run(["docker", "image", "rm", local, f"{host}/signing/plain:0.1.0-cpu"], capture_output=True)


def test_a_later_push_signs_the_builds_own_times_and_its_build_stage(signed, registry_plain, debian_base_image,
                                                                     tmp_path, tmp_path_factory):
    """Issue 47 item 5: `buildkit build`, then `build --push` of the engine's image with a key. The provenance's
    startedOn and finishedOn are the build's, as its lock entry recorded them (they were the signing time, both
    the same); its resolved dependencies hold every Debian package of the build stage with its version and
    architecture, as the lock has them, and the local fork as git+file://."""
    from forkrepo import make_fork_repo
    from test_publish_docker import ROOT, buildkit, make_project, ok, spy_env

    from buildkit.release.signing import attested_statement
    from buildkit.release.signkeys import load_public_key

    upstream = tmp_path_factory.mktemp("later-upstream") / "tiny-fork"
    _, commit = make_fork_repo(upstream, ROOT / "examples" / "tiny-fork")
    env, _ = spy_env(tmp_path)
    project = make_project(tmp_path / "later", {"path": upstream, "commit": commit}, registry_plain.host,
                           debian_base_image, "signing/later")
    ok(buildkit(project, env, "build"))
    built = json.loads((project / "buildkit.lock").read_text())["builds"]["cpu/server"]
    assert built["build_started"] <= built["build_finished"]
    env["LLAMA_BUILDKIT_SIGN_KEY"] = (signed["work"] / "cosign.key").read_text()
    result = json.loads(ok(buildkit(project, env, "build", "--push", "--json")).stdout)
    assert result["origin"] == "engine", result  # pushed, not built again
    lock = json.loads((project / "buildkit.lock").read_text())["builds"]["cpu/server"]
    with RegistryClient(registry_plain.host) as client:
        statement = attested_statement(client, "signing/later", result["digest"],
                                       load_public_key(signed["work"] / "cosign.pub"), PREDICATE_TYPE)
    metadata = statement["predicate"]["runDetails"]["metadata"]
    assert (metadata["startedOn"], metadata["finishedOn"]) == (built["build_started"], built["build_finished"]) == (
        lock["build_started"], lock["build_finished"])
    deps = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    listed = {(d["name"], d["annotations"]["version"], d["annotations"]["architecture"]) for d in deps
              if (d.get("annotations") or {}).get("kind") == "build-stage package"}
    record = lock["debian_packages"]
    assert listed == {(k.split(":")[0], v, record["architectures"]["build"][k]) for k, v in record["build"].items()}
    assert {"gcc", "cmake", "ninja-build"} <= {name for name, _, _ in listed} and len(listed) > 100
    assert record["os"]["build"] == {"id": "debian", "version_id": "12"}
    assert all("distro=debian-12" in d["uri"] for d in deps if d.get("uri", "").startswith("pkg:deb/"))
    fork, = (d for d in deps if d["name"] == "llama.cpp fork")
    assert fork["uri"] == f"git+file://{upstream}@{commit}"
    subprocess.run(["docker", "image", "rm", f"{registry_plain.host}/signing/later:0.1.0-cpu"], capture_output=True)


def test_the_keyless_forms_predicates_are_what_cosign_attests(signed, tmp_path):
    """`nightly --job --attest-dir` (the workflow's keyless form) writes the predicates cosign attaches with the
    job's identity. Offline there is no OIDC identity, so cosign attests them here with a key: the
    same `cosign attest --type ... --predicate FILE` the workflow runs, with a key of cosign's own, then verified."""
    from buildkit.flows.unit.signpublished import write_predicates

    repo = REPO + "-keyless"
    digest = push_tiny_image(signed["busybox"], f"{signed['host']}/{repo}:v1", tmp_path / "ctx")
    name = f"{signed['host']}/{repo}"
    provenance, bom = write_predicates(replace(lock_entry(digest), image_name=repo), digest, name, tmp_path / "att")
    assert json.loads(provenance.read_text())["buildDefinition"]["externalParameters"]["commit"] == "9" * 40
    assert json.loads(bom.read_text())["specVersion"] == "1.6"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TUF_ROOT": str(tmp_path / "tuf"), "COSIGN_PASSWORD": ""}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["cosign", *args], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
                              check=False)

    done = run("generate-key-pair")  # cosign's own key (its import-key-pair of 2.5.0 refuses P-256 PEMs)
    assert done.returncode == 0, done.stderr
    for kind, predicate in (("slsaprovenance1", provenance), ("cyclonedx", bom)):
        done = run("attest", "--yes", "--key", "cosign.key", "--tlog-upload=false", "--allow-http-registry",
                   "--type", kind, "--predicate", str(predicate), f"{name}@{digest}")
        assert done.returncode == 0, done.stderr
        done = cosign(tmp_path, "verify-attestation", "--key", str(tmp_path / "cosign.pub"), "--type", kind,
                      f"{name}@{digest}")
        assert done.returncode == 0, (kind, done.stderr)


# issue 48, item 3: verify-image compares the signed provenance with the lock field by field, and verifies the
# manifest it fetched (GET, its digest computed), never what a HEAD claims

def _sign_provenance(host: str, repo: str, digest: str, key_file: Path, edit) -> None:
    """Sign digest with key_file and attach a provenance of lock_entry(digest) that edit(statement) changed."""
    key = load_signing_key(key_file)
    assert key is not None
    statement = json.loads(provenance_statement(replace(lock_entry(digest), cmake_archs="120"), digest,
                                                f"{host}/{repo}", RunDetails("t", "", "")))
    edit(statement)
    with RegistryClient(host) as client:
        sign_image(client, repo, digest, key, [Attestation(PREDICATE_TYPE, json.dumps(statement).encode())])


def _set(path: str, value):
    def edit(statement):
        *parents, last = path.split(".")
        node = statement["predicate"]["buildDefinition"]
        for part in parents:
            node = node[part]
        node[last] = value
    return edit


@pytest.mark.parametrize("edit, named", [
    (_set("internalParameters.build_key", "0" * 64), "internalParameters.build_key"),
    (_set("internalParameters.dockerfile_sha256", "e" * 64), "internalParameters.dockerfile_sha256"),
    (_set("internalParameters.cmake_archs", "120a"), "internalParameters.cmake_archs"),
    (_set("externalParameters.builder_script", "curl x | sh"), "externalParameters.builder_script (unknown)"),
    (lambda s: s["predicate"]["buildDefinition"]["resolvedDependencies"][0].update(uri="git+https://evil/x@y"),
     "resolvedDependencies[0] (llama.cpp fork)"),
    (lambda s: s["predicate"]["buildDefinition"]["resolvedDependencies"].pop(), "resolvedDependencies (4, not 5)"),
    (lambda s: s.update(predicate=None), "predicate.buildDefinition (missing, or not an object)"),
    (lambda s: s.update(predicate=[1, 2]), "predicate.buildDefinition (missing, or not an object)"),
], ids=["build_key", "dockerfile", "cmake_archs", "unknown-external", "dependency", "dependencies", "null", "list"])
def test_verify_image_names_each_field_the_signed_provenance_does_not_share_with_the_lock(signed, cli, tmp_path,
                                                                                          edit, named):
    repo = REPO + "-fields"
    digest = push_tiny_image(signed["busybox"], f"{signed['host']}/{repo}:v1", tmp_path / "ctx")
    lock = tmp_path / "buildkit.lock"
    write_lock_entry(lock, replace(lock_entry(digest), cmake_archs="120"))
    pub = str(signed["work"] / "cosign.pub")
    _sign_provenance(signed["host"], repo, digest, signed["work"] / "cosign.key", lambda s: None)
    done = cli("verify-image", f"{signed['host']}/{repo}:v1", "--key", pub, "--lock", str(lock))
    assert done.returncode == 0 and done.stdout.count("ok  ") == 4, done.stdout + done.stderr  # as signed: ok
    _sign_provenance(signed["host"], repo, digest, signed["work"] / "cosign.key", edit)
    done = cli("verify-image", f"{signed['host']}/{repo}:v1", "--key", pub, "--lock", str(lock))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert f"FAIL  lock: the provenance's {named} not as in cpu/server" in done.stdout, done.stdout


class TwoFaced:
    """A read-only registry in front of the real one whose HEAD of a tag answers for one image and whose GET of
    the same tag serves another (with that other image's own digest), as a registry that lies would."""

    def __init__(self, upstream: str, repo: str, tag: str, served: str) -> None:
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args) -> None:
                pass

            def forward(self, method: str) -> None:
                path = self.path
                if method == "GET" and path == f"/v2/{repo}/manifests/{tag}":
                    path = f"/v2/{repo}/manifests/{served}"
                conn = http.client.HTTPConnection(upstream, timeout=60)
                conn.request(method, path, headers={"Accept": self.headers.get("Accept", "*/*")})
                resp = conn.getresponse()
                body = resp.read()
                self.send_response(resp.status)
                for name in ("Content-Type", "Docker-Content-Digest", "Docker-Distribution-API-Version"):
                    value = resp.getheader(name)
                    if value:
                        self.send_header(name, value)
                self.send_header("Content-Length", resp.getheader("Content-Length", str(len(body))))
                self.end_headers()
                if method == "GET":
                    self.wfile.write(body)
                conn.close()

            def do_GET(self) -> None:
                self.forward("GET")

            def do_HEAD(self) -> None:
                self.forward("HEAD")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_verify_image_checks_what_a_get_serves_not_what_a_head_says(signed, cli, tmp_path):
    repo = REPO + "-twofaced"
    digest = push_tiny_image(signed["busybox"], f"{signed['host']}/{repo}:v1", tmp_path / "ctx")
    other = push_tiny_image(signed["busybox"], f"{signed['host']}/{repo}:other", tmp_path / "ctx2")
    assert other != digest
    _sign_provenance(signed["host"], repo, digest, signed["work"] / "cosign.key", lambda s: None)
    lock = tmp_path / "buildkit.lock"
    write_lock_entry(lock, replace(lock_entry(digest), cmake_archs="120"))
    pub = str(signed["work"] / "cosign.pub")
    liar = TwoFaced(signed["host"], repo, "v1", other)
    try:
        with RegistryClient(liar.host) as client:
            assert head_digest(client, repo, "v1") == digest  # HEAD names the signed image
        done = cli("verify-image", f"{liar.host}/{repo}:v1", "--key", pub, "--lock", str(lock))
    finally:
        liar.close()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert f"ok  digest: {liar.host}/{repo}:v1 is {other}" in done.stdout  # what GET served, by its bytes
    assert "FAIL  signature" in done.stdout and "FAIL  lock" in done.stdout
