"""A multi-platform build of the example fork (cpu, linux/amd64 + linux/arm64, the arm64 half
cross-compiled: this machine has no binfmt handler) pushed to the real loopback registry as one OCI
index. One multi-platform build (CPU is scarce): its reproduction from the lock is
test_reproduce_elsewhere_docker's, which builds such an index and reproduces it on a second, empty engine (a
reproduction on this engine, which holds the base and BuildKit's records of it, proved less and cost a second
build of both platforms with nothing cached)."""

from __future__ import annotations

import base64
import json
import subprocess

import pytest

from buildkit.oci.ocilayout import OCI_INDEX
from buildkit.oci.registry import RegistryClient
from buildkit.release.signkeys import generate_keys
from cliutil import write_project
from registryserver import head_digest
from test_publish_docker import buildkit, fork, ok, spy_env  # noqa: F401  (fork: fixture)
from test_signing_cosign import cosign

pytestmark = pytest.mark.docker

PLATFORMS = ("linux/amd64", "linux/arm64")


def test_one_index_per_tag_pushed_with_the_lock_digests(tmp_path, fork, registry_plain,
                                                        multiarch_base_image):  # noqa: F811
    repo = "multi/tiny"
    project = write_project(tmp_path / "project",
                            source={"url": fork["path"], "commit": fork["commit"]},
                            image={"name": f"{registry_plain.host}/{repo}", "default_variant": "cpu"},
                            build={"arch": "cpu", "jobs": 2, "progress": "plain", "platform": ",".join(PLATFORMS)},
                            base={"os_image": multiarch_base_image})
    env, _ = spy_env(tmp_path)
    generate_keys(tmp_path / "cosign.key", tmp_path / "cosign.pub")
    result = json.loads(ok(buildkit(project, env, "build", "--push", "--json", "--sign-key",
                                    str(tmp_path / "cosign.key"))).stdout)
    lock = json.loads((project / "buildkit.lock").read_text())
    index = lock["indexes"]["cpu/server"]
    per_platform = {p["platform"]: p["manifest_digest"] for p in index["platforms"]}
    assert [p["platform"] for p in index["platforms"]] == list(PLATFORMS)
    assert result["index_digest"] == index["index_digest"]
    assert {p["platform"]: p["digest"] for p in result["platforms"]} == per_platform
    for p in result["platforms"]:  # every platform verified, none failed
        assert p["verify"] and not [c for c in p["verify"] if c["status"] == "failed"], p
    with RegistryClient(registry_plain.host) as client:
        for tag in ("0.1.0-cpu", "cpu", "latest", f"sha-{fork['commit'][:7]}-cpu"):
            assert head_digest(client, repo, tag) == index["index_digest"], tag
        body, media_type, digest = client.get_manifest(repo, "0.1.0-cpu")
        listed = json.loads(body)
        assert media_type == OCI_INDEX and digest == index["index_digest"]
        assert [(m["platform"]["os"] + "/" + m["platform"]["architecture"], m["digest"])
                for m in listed["manifests"]] == list(per_platform.items())
        for platform, manifest_digest in per_platform.items():
            entry = lock["builds"][f"cpu/server@{platform}"]
            assert entry["image_digest"] == manifest_digest and entry["platform"] == platform
            manifest = json.loads(client.get_manifest(repo, manifest_digest)[0])
            config = json.loads(client.get_blob(repo, manifest["config"]["digest"]))
            assert config["architecture"] == platform.split("/")[1]
    # signed: each platform's image with its provenance and SBOM, then the index with a provenance whose
    # dependencies are those images; cosign verifies the index under its tag and each image by digest
    pub = str(tmp_path / "cosign.pub")
    for ref, kinds in ([(f"{registry_plain.host}/{repo}:0.1.0-cpu", ("slsaprovenance1",))] +
                       [(f"{registry_plain.host}/{repo}@{d}", ("slsaprovenance1", "cyclonedx"))
                        for d in per_platform.values()]):
        assert cosign(tmp_path, "verify", "--key", pub, ref).returncode == 0, ref
        for kind in kinds:
            done = cosign(tmp_path, "verify-attestation", "--key", pub, "--type", kind, ref)
            assert done.returncode == 0, (ref, kind, done.stderr[-2000:])
    done = cosign(tmp_path, "verify-attestation", "--key", pub, "--type", "slsaprovenance1",
                  f"{registry_plain.host}/{repo}:0.1.0-cpu")
    deps = json.loads(base64.b64decode(json.loads(done.stdout.splitlines()[0])["payload"]))["predicate"][
        "buildDefinition"]["resolvedDependencies"]
    assert [(d["name"], "sha256:" + d["digest"]["sha256"]) for d in deps] == list(per_platform.items())
    for platform in PLATFORMS:  # each platform's Debian packages, the arm64 half's from its own dpkg status
        packages = lock["builds"][f"cpu/server@{platform}"]["debian_packages"]
        assert {"libgomp1", "curl"} <= set(packages["runtime"]) and "gcc" in packages["build"], platform
    assert "libc6:arm64" in lock["builds"]["cpu/server@linux/arm64"]["debian_packages"]["build"]  # (multiarch)
    # the engine's copy is the index too (containerd store: the image id is the index digest)
    local = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}",
                            f"{registry_plain.host}/{repo}:cpu"], capture_output=True, text=True)
    assert local.stdout.strip() == index["index_digest"]
    # published already: the index's build-key tag is found, nothing is built, the lock keeps the digests
    again = json.loads(ok(buildkit(project, env, "build", "--push", "--json")).stdout)
    assert again["origin"] == "registry" and again["index_digest"] == index["index_digest"]
    assert json.loads((project / "buildkit.lock").read_text())["indexes"]["cpu/server"]["platforms"] == \
        index["platforms"]
    kept = json.loads((project / "buildkit.lock").read_text())["builds"]  # the packages of the platforms' builds
    assert all(kept[k]["debian_packages"] == lock["builds"][k]["debian_packages"] for k in lock["builds"])
    mine = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                           f"reference={registry_plain.host}/{repo}"], capture_output=True, text=True).stdout.split()
    subprocess.run(["docker", "image", "rm", *mine], capture_output=True)  # only the tags this test made


def test_nightly_of_a_matrix_with_two_platforms_pushes_one_index(tmp_path, fork, registry_plain,
                                                                 multiarch_base_image):  # noqa: F811
    """bake builds one target per platform; the nightly tag is one index, the lock's. (The same inputs
    as the test above but for the version label: BuildKit's cache has the compile.)"""
    repo = "multi/nightly"
    project = write_project(tmp_path / "project",
                            source={"url": str(fork["path"]), "branch": "master", "commit": ""},
                            image={"name": f"{registry_plain.host}/{repo}", "default_variant": "cpu"},
                            build={"jobs": 2, "progress": "plain", "platform": ",".join(PLATFORMS)},
                            base={"os_image": multiarch_base_image},
                            matrix={"archs": ["cpu"], "cuda_versions": ["13.1"], "targets": ["server"]})
    env, _ = spy_env(tmp_path)
    out = tmp_path / "night.json"
    proc = buildkit(project, env, "nightly", "--summary", str(out))
    assert out.exists(), proc.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert proc.returncode == 0 and [v["status"] for v in summary["variants"]] == ["passed"], \
        proc.stderr[-3000:] + json.dumps(summary["variants"])[:2000]
    lock = json.loads((project / "buildkit.lock").read_text())
    index = lock["indexes"]["cpu/server"]
    assert summary["variants"][0]["digest"] == index["index_digest"]
    with RegistryClient(registry_plain.host) as client:
        assert head_digest(client, repo, "nightly-cpu") == index["index_digest"]
        listed = json.loads(client.get_manifest(repo, "nightly-cpu")[0])
    assert [m["digest"] for m in listed["manifests"]] == [p["manifest_digest"] for p in index["platforms"]]
    assert [p["platform"] for p in index["platforms"]] == list(PLATFORMS)
    for p in index["platforms"]:
        assert lock["builds"][p["entry"]]["image_digest"] == p["manifest_digest"]
    mine = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                           f"reference={registry_plain.host}/{repo}"], capture_output=True, text=True).stdout.split()
    subprocess.run(["docker", "image", "rm", *mine], capture_output=True)  # only the tags this test made
