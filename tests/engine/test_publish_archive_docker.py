"""`build --push` publishes the OCI archive the build wrote, byte for byte: the registry's digest is
the lock's; `--no-load` keeps the image out of the engine. Real engine, real loopback registry;
`docker` is wrapped by a pass-through script that logs its calls (see test_publish_docker)."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

from buildkit.oci.registry import RegistryClient
from test_publish_docker import buildkit, digests, fork, make_project, ok, spy_env  # noqa: F401  (fork: fixture)

pytestmark = pytest.mark.docker


def _registry_manifest_digest(client: RegistryClient, repo: str, tag: str) -> str:
    body, _, _ = client.get_manifest(repo, tag)
    return "sha256:" + hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize("verify", [True, False], ids=["verified", "no-verify"])
def test_pushed_digest_is_the_lock_digest_and_no_load_keeps_the_engine_clean(
        tmp_path, fork, registry_plain, debian_base_image, verify):  # noqa: F811
    repo = f"archive/tiny-{'v' if verify else 'nv'}"
    project = make_project(tmp_path / "project", fork, registry_plain.host, debian_base_image, repo)
    env, log = spy_env(tmp_path)
    args = ["build", "--push", "--no-load", "--json"] + ([] if verify else ["--no-verify"])
    result = json.loads(ok(buildkit(project, env, *args)).stdout)
    entry = json.loads((project / "buildkit.lock").read_text())["builds"]["cpu/server"]
    with RegistryClient(registry_plain.host) as client:
        tags = digests(client, repo)
        stored = _registry_manifest_digest(client, repo, "0.1.0-cpu")
    assert result["origin"] == "built" and result["digest"] == entry["image_digest"]
    assert set(tags.values()) == {entry["image_digest"]} == {stored}  # the bytes hash to the lock's digest
    assert entry["exporter"] == "oci"
    calls = log.read_text().splitlines()
    assert not any(c.startswith("push ") for c in calls)  # no `docker push`: the archive went up
    assert any(c.startswith("load ") for c in calls) == verify  # loaded only for the checks
    for ref in (f"{registry_plain.host}/{repo}:cpu", f"{registry_plain.host}/{repo}:0.1.0-cpu"):
        gone = subprocess.run(["docker", "image", "inspect", ref], capture_output=True, text=True)
        assert gone.returncode != 0, f"{ref} is still in the engine"


def test_push_pushes_the_extra_tags_too(tmp_path, fork, registry_plain, debian_base_image):  # noqa: F811
    repo = "archive/tiny-extra"
    project = make_project(tmp_path / "project", fork, registry_plain.host, debian_base_image, repo)
    env, _ = spy_env(tmp_path)
    result = json.loads(ok(buildkit(project, env, "build", "--push", "--no-load", "--tag", "rc1", "--tag", "team-x",
                                    "--json")).stdout)
    with RegistryClient(registry_plain.host) as client:
        tags = digests(client, repo)
    assert tags["rc1"] == tags["team-x"] == tags["0.1.0-cpu"] == result["digest"]
    assert {"rc1", "team-x"} <= set(result["tags"]) and {"rc1", "team-x"} <= set(result["added"])
    bad = buildkit(project, env, "build", "--push", "--tag", "no+plus")
    assert bad.returncode == 1 and bad.stderr.strip().startswith("error: tag 'no+plus' is not a valid Docker tag")


def test_push_keeps_the_engine_copy_tagged_without_no_load(tmp_path, fork, registry_plain,
                                                           debian_base_image):  # noqa: F811
    repo = "archive/tiny-load"
    project = make_project(tmp_path / "project", fork, registry_plain.host, debian_base_image, repo)
    env, log = spy_env(tmp_path)
    result = json.loads(ok(buildkit(project, env, "build", "--push", "--json")).stdout)
    ref = f"{registry_plain.host}/{repo}:0.1.0-cpu"
    local = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True,
                           text=True)
    assert local.returncode == 0 and local.stdout.strip() == result["digest"]  # containerd store: id = digest
    assert not any(c.startswith("push ") for c in log.read_text().splitlines())
    mine = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                           f"reference={registry_plain.host}/{repo}"], capture_output=True, text=True).stdout.split()
    subprocess.run(["docker", "image", "rm", *mine], capture_output=True)  # only the tags this test made


def test_no_load_without_push_is_refused(tmp_path, fork, registry_plain, debian_base_image):  # noqa: F811
    project = make_project(tmp_path / "project", fork, registry_plain.host, debian_base_image, "archive/x")
    env, _ = spy_env(tmp_path)
    proc = buildkit(project, env, "build", "--no-load")
    assert proc.returncode == 1 and proc.stderr.strip() == "error: --no-load goes with --push (a build without " \
        "--push is for the engine)"


def test_a_short_disk_stops_push_only_when_there_is_something_to_compile(tmp_path, fork, registry_plain,
                                                                          debian_base_image):  # noqa: F811
    """The README's `build`, then `build --push`: the second finds this build key's image in the engine and
    compiles nothing, so the disk a compile needs is not asked for (CI refused it at 15.9 of 16 GB free).
    A build that must compile is still refused before it starts."""
    repo = "archive/tiny-disk"
    project = make_project(tmp_path / "project", fork, registry_plain.host, debian_base_image, repo)
    env, log = spy_env(tmp_path)
    built = json.loads(ok(buildkit(project, env, "build", "--json")).stdout)
    short = ("--min-free-gb", "1000000")  # more than any disk here has
    refused = buildkit(project, env, "build", *short)
    assert refused.returncode == 1 and refused.stderr.startswith("error: disk: ") and "need 1e+06 GB" in refused.stderr
    pushed = json.loads(ok(buildkit(project, env, "build", "--push", *short, "--json")).stdout)
    assert pushed["origin"] == "engine" and pushed["digest"] == built["digest"]
    def compiles() -> int:  # image builds (not the small export of the build stage's package list)
        return sum(c.startswith("buildx build") and "--target build-packages" not in c
                   for c in log.read_text().splitlines())

    builds_before = compiles()
    assert builds_before == 1
    forced = buildkit(project, env, "build", "--push", "--force", *short)
    last = forced.stderr.strip().splitlines()[-1]  # after fetch, patch and render: what to build is known
    assert forced.returncode == 1 and last.startswith("error: disk: "), forced.stderr[-2000:]
    assert compiles() == builds_before  # nothing ran
    with RegistryClient(registry_plain.host) as client:
        assert set(digests(client, repo).values()) == {built["digest"]}
    mine = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                           f"reference={registry_plain.host}/{repo}"], capture_output=True, text=True).stdout.split()
    subprocess.run(["docker", "image", "rm", *mine], capture_output=True)
