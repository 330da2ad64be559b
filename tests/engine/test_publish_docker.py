"""Publishing against the real CNCF distribution registry on 127.0.0.1 (plain, and TLS + htpasswd).

The example fork's cpu variant is built by the real engine and pushed with the real CLI. To
show that a second publish does not build, `docker` is wrapped by a pass-through script on PATH
that logs every call before running the real CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import docker
import pytest

from buildkit.oci.registry import RegistryClient
from forkrepo import make_fork_repo
from registryserver import RegistryServer, tag_digests
from test_registry import docker_login, push_tiny_image
from cliutil import buildkit_env, write_project

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
REAL_DOCKER = subprocess.run(["sh", "-c", "command -v docker"], capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def fork(tmp_path_factory):
    repo = tmp_path_factory.mktemp("pub-upstream") / "tiny-fork"
    _, commit = make_fork_repo(repo, ROOT / "examples" / "tiny-fork")
    return {"path": repo, "commit": commit}


def make_project(root: Path, fork: dict, registry_host: str, base_image: str, repo_name: str) -> Path:
    write_project(root,
                  source={"url": fork['path'], "commit": fork['commit']},
                  image={"name": f"{registry_host}/{repo_name}", "default_variant": "cpu"},
                  build={"arch": "cpu", "jobs": 2, "progress": "plain"},
                  base={"os_image": base_image})
    return root


def spy_env(tmp: Path, docker_config: Path | None = None) -> tuple[dict[str, str], Path]:
    """Environment whose `docker` logs its arguments, then runs the real CLI."""
    bindir = tmp / "spy-bin"
    bindir.mkdir(exist_ok=True)
    log = tmp / "docker-calls.log"
    (bindir / "docker").write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {REAL_DOCKER} "$@"\n')
    (bindir / "docker").chmod(0o755)
    env = buildkit_env()
    env["PATH"] = f"{bindir}:{env['PATH']}"
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(tmp / "cache")
    if docker_config is not None:
        env["DOCKER_CONFIG"] = str(docker_config)
    return env, log


def buildkit(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=1800)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def digests(client: RegistryClient, repo: str) -> dict[str, str]:
    return tag_digests(client, repo)


@pytest.fixture(scope="module")
def plain(tmp_path_factory, fork, registry_plain, debian_base_image):
    tmp = tmp_path_factory.mktemp("publish-plain")
    project = make_project(tmp / "project", fork, registry_plain.host, debian_base_image, "team/tiny")
    env, log = spy_env(tmp)
    return {"project": project, "env": env, "log": log, "registry": registry_plain, "repo": "team/tiny"}


def test_first_push_publishes_every_tag_at_the_built_digest(plain, fork):
    out = ok(buildkit(plain["project"], plain["env"], "build", "--push")).stdout
    assert "pushed" in out and "version 0.1.0" in out
    with RegistryClient(plain["registry"].host) as client:
        tags = digests(client, plain["repo"])
    sha = fork["commit"][:7]
    expected = {"0.1.0-cpu", f"sha-{sha}-cpu", "0.1.0", "0.1-cpu", "cpu", "0.1", "latest"}
    assert expected <= set(tags)
    assert any(t.startswith("bk-") for t in tags)
    assert len(set(tags.values())) == 1  # every tag at one digest
    entry = json.loads((plain["project"] / "buildkit.lock").read_text())["builds"]["cpu/server"]
    assert entry["image_digest"] == next(iter(tags.values()))
    assert entry["version"] == "0.1.0" and entry["build_key"]
    assert f"{plain['registry'].host}/team/tiny:latest" in entry["pushed"]
    labels = docker.from_env().images.get(entry["image_id"]).labels
    assert labels["org.llama-buildkit.build-key"] == entry["build_key"]
    assert labels["org.opencontainers.image.version"] == "0.1.0"


def test_the_pushed_manifest_carries_the_oci_labels_as_annotations(plain, fork):
    """Issue 24: what a registry shows of the image without its config, the manifest's annotations, are
    its org.opencontainers.image.* labels, with the same values (read back from the registry)."""
    entry = json.loads((plain["project"] / "buildkit.lock").read_text())["builds"]["cpu/server"]
    if entry["exporter"] != "oci":
        pytest.skip("the classic image store's --load keeps no manifest annotations")
    with RegistryClient(plain["registry"].host) as client:
        body, _, digest = client.get_manifest(plain["repo"], "0.1.0-cpu")
        manifest = json.loads(body)
        config = json.loads(client.get_blob(plain["repo"], manifest["config"]["digest"]))
    assert digest == entry["image_digest"]
    oci = "org.opencontainers.image."
    labels = {k: v for k, v in config["config"]["Labels"].items() if k.startswith(oci) and v}
    assert manifest.get("annotations") == labels
    assert {oci + k for k in ("source", "revision", "version", "created", "title", "licenses", "description", "url",
                              "base.name", "base.digest")} <= set(labels)
    assert labels[oci + "revision"] == fork["commit"] and labels[oci + "version"] == "0.1.0"
    assert labels[oci + "base.digest"] == entry["base_images"][0]["digest"]


def test_second_push_skips_the_build_and_restores_missing_moving_tags(plain, busybox_image, tmp_path):
    with RegistryClient(plain["registry"].host) as client:
        before = digests(client, plain["repo"])
        # a moving tag pointed at another image (by hand, say) is put back
        other = push_tiny_image(busybox_image, f"{plain['registry'].host}/{plain['repo']}:other", tmp_path)
        body, media_type, _ = client.get_manifest(plain["repo"], other)
        client.put_manifest(plain["repo"], "cpu", body, media_type)
        before["other"] = other
    plain["log"].write_text("")
    out = ok(buildkit(plain["project"], plain["env"], "build", "--push")).stdout
    assert "already published" in out
    calls = plain["log"].read_text()
    assert "buildx build" not in calls and "push" not in calls.split()  # neither buildx nor docker push ran
    with RegistryClient(plain["registry"].host) as client:
        assert digests(client, plain["repo"]) == before


def test_changed_input_bumps_the_version_and_moves_only_moving_tags(plain):
    patch = plain["project"] / "patches" / "0001-readme.patch"
    patch.write_text("--- /dev/null\n+++ b/PATCHED.md\n@@ -0,0 +1 @@\n+patched by buildkit tests\n")
    try:
        with RegistryClient(plain["registry"].host) as client:
            before = digests(client, plain["repo"])
        out = ok(buildkit(plain["project"], plain["env"], "build", "--push", "--bump", "minor")).stdout
        assert "version 0.2.0" in out
        with RegistryClient(plain["registry"].host) as client:
            after = digests(client, plain["repo"])
        assert after["0.1.0-cpu"] == before["0.1.0-cpu"]  # immutable tags stay
        assert after["0.2.0-cpu"] == after["latest"] == after["cpu"] != before["cpu"]
        # asking for an existing version with other inputs is refused before building
        patch.write_text(patch.read_text().replace("patched by", "patched again by"))
        plain["log"].write_text("")
        proc = buildkit(plain["project"], plain["env"], "build", "--push", "--release", "0.1.0")
        assert proc.returncode == 1 and "0.1.0-cpu already exists" in proc.stderr
        # one error line; the rest is progress (buildkit: <stage> ...)
        assert [ln for ln in proc.stderr.strip().splitlines() if not ln.startswith("buildkit: ")] == \
            [proc.stderr.strip().splitlines()[-1]]
        assert "buildx build" not in plain["log"].read_text()
        with RegistryClient(plain["registry"].host) as client:
            assert digests(client, plain["repo"]) == after
    finally:
        patch.unlink()


@pytest.fixture(scope="module")
def auth(tmp_path_factory, fork, registry_auth, debian_base_image):
    tmp = tmp_path_factory.mktemp("publish-auth")
    config = docker_login(registry_auth, tmp / "docker-config")
    project = make_project(tmp / "project", fork, registry_auth.host, debian_base_image, "secure/tiny")
    env, log = spy_env(tmp, config)
    (user, password), = registry_auth.users.items()
    return {"project": project, "env": env, "registry": registry_auth, "password": password, "user": user,
            "tmp": tmp, "config": config}


def test_wrong_password_is_one_line_and_pushes_nothing(auth):
    bad = auth["tmp"] / "bad-config"
    bad.mkdir()
    import base64

    token = base64.b64encode(f"{auth['user']}:not-the-password".encode()).decode()
    (bad / "config.json").write_text(json.dumps({"auths": {auth["registry"].host: {"auth": token}}}))
    env = dict(auth["env"], DOCKER_CONFIG=str(bad))
    proc = buildkit(auth["project"], env, "build", "--push")
    assert proc.returncode == 1
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "rejected the credentials" in errors[0]
    assert "not-the-password" not in proc.stdout + proc.stderr
    from buildkit.oci.credentials import Credentials

    creds = Credentials(auth["user"], auth["password"], False)
    with RegistryClient(auth["registry"].host, credentials=creds) as client:
        assert client.list_tags("secure/tiny") == []


def test_push_with_tls_and_htpasswd_and_no_credential_leaks(auth):
    proc = ok(buildkit(auth["project"], auth["env"], "build", "--push"))
    from buildkit.oci.credentials import Credentials

    creds = Credentials(auth["user"], auth["password"], False)
    with RegistryClient(auth["registry"].host, credentials=creds) as client:
        tags = digests(client, "secure/tiny")
    assert "latest" in tags and "0.1.0-cpu" in tags and len(set(tags.values())) == 1
    password = auth["password"]
    assert password not in proc.stdout + proc.stderr
    lock = (auth["project"] / "buildkit.lock").read_text()
    assert password not in lock
    ref = f"{auth['registry'].host}/secure/tiny:0.1.0-cpu"
    history = subprocess.run(["docker", "history", "--no-trunc", ref], capture_output=True, text=True).stdout
    inspect = subprocess.run(["docker", "image", "inspect", ref], capture_output=True, text=True).stdout
    assert history and inspect and password not in history + inspect


def test_registry_stopped_mid_push_then_restarted_ends_complete(tmp_path, fork, debian_base_image):
    with RegistryServer(tmp_path / "registry") as registry:
        project = make_project(tmp_path / "project", fork, registry.host, debian_base_image, "flaky/tiny")
        env, _ = spy_env(tmp_path)
        ok(buildkit(project, env, "build"))  # built and verified locally first

        uploads = registry.storage / "docker" / "registry" / "v2" / "repositories" / "flaky" / "tiny" / "_uploads"
        stopped = threading.Event()

        def stop_when_upload_starts():
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if uploads.exists():
                    registry.stop()
                    stopped.set()
                    return
                time.sleep(0.002)

        watcher = threading.Thread(target=stop_when_upload_starts, daemon=True)
        watcher.start()
        first = buildkit(project, env, "push")
        watcher.join()
        assert stopped.is_set() and first.returncode == 1
        assert len([ln for ln in first.stderr.splitlines() if ln.startswith("error:")]) == 1

        registry.start()
        second = ok(buildkit(project, env, "push"))
        third = ok(buildkit(project, env, "push"))
        assert "changed: nothing" in third.stdout
        with RegistryClient(registry.host) as client:
            tags = digests(client, "flaky/tiny")
        entry = json.loads((project / "buildkit.lock").read_text())["builds"]["cpu/server"]
        assert {"0.1.0-cpu", "0.1.0", "latest", "cpu", "0.1-cpu", "0.1"} <= set(tags)
        assert set(tags.values()) == {entry["image_digest"]} and entry["image_digest"] == entry["image_id"]
        assert "version 0.1.0" in second.stdout
