"""Base images reach BuildKit by content, never through a registry the user did not name (issue 9).

On the engine's own builder an engine-only base is named by digest in the engine
(``127.0.0.1:1/llama-buildkit/base:<hex>``), so its layers stay the base's own.

The local Debian base is tagged under names whose registry cannot answer: ``127.0.0.1:1/...`` (a
port that refuses connections: a hard failure for any registry lookup, on every machine) and a
``docker.io/...`` name (whose lookup fails, hangs or answers 401 depending on the machine's DNS).
Builds with either must pass and record the digest. An image that the loopback registry serves is
still pinned ``FROM ref@sha256:...``. A base that is nowhere stops with one line before any work.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import docker
import pytest

from cliutil import buildkit_env, write_project
from forkrepo import make_fork_repo
from test_build_docker import EXAMPLE, buildkit

pytestmark = pytest.mark.docker

REFUSING = "127.0.0.1:1/buildkit-test/debian:bookworm"
HUB = f"docker.io/buildkit-offline-{uuid.uuid4().hex[:8]}/debian:bookworm"


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


@pytest.fixture(scope="module")
def fork(tmp_path_factory, git_daemon):
    repo = tmp_path_factory.mktemp("upstream-bases") / "tiny-fork"
    _, fork_sha = make_fork_repo(repo, EXAMPLE)
    return {"url": git_daemon.url_for(repo), "commit": fork_sha}


@pytest.fixture(scope="module")
def local_names(client, debian_base_image):
    """The engine's Debian base under the two unreachable names; removed again at the end."""
    image = client.images.get(debian_base_image)
    for name in (REFUSING, HUB):
        repo, tag = name.rsplit(":", 1)
        image.tag(repo, tag)
    yield {"digest": image.attrs["RepoDigests"][0].split("@", 1)[1]}
    for name in (REFUSING, HUB):
        client.images.remove(name)


def make_project(root: Path, fork: dict, os_image: str, cache: Path) -> dict:
    write_project(root,
                  source={"url": fork['url'], "commit": fork['commit'], "patch_dir": "patches"},
                  image={"name": "buildkit-test/bases"},
                  build={"cuda_version": "13.1", "jobs": 2, "progress": "plain"},
                  base={"provider": "wheels", "os_image": os_image, "cublas": False})
    env = buildkit_env()
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(cache)
    return {"root": root, "env": env}


def lock(project) -> dict:
    return json.loads((project["root"] / "buildkit.lock").read_text())["builds"]


@pytest.mark.parametrize("name", [REFUSING, HUB], ids=["refusing-registry", "docker-io-name"])
@pytest.mark.parametrize("arch", ["cpu", "sm_120"])
def test_local_only_base_builds_by_content(tmp_path, tmp_path_factory, fork, local_names, client, name, arch):
    cache = tmp_path_factory.getbasetemp() / "buildkit-cache"
    project = make_project(tmp_path / "project", fork, name, cache)
    tag = f"bases-{uuid.uuid4().hex[:8]}"
    proc = buildkit("build", "--arch", arch, "--tag", tag, cwd=project["root"], env=project["env"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # BuildKit (the engine's own builder) was handed the image by its pinned name in the engine, under
    # a registry that refuses connections, and looked up no other name
    pinned = f"127.0.0.1:1/llama-buildkit/base:{local_names['digest'].removeprefix('sha256:')}"
    log = proc.stdout + proc.stderr
    looked_up = set(re.findall(r"\[internal\] load metadata for (\S+)", log))
    assert looked_up == {pinned}, log[:3000]
    assert "oci-layout://" not in log
    # ... as its base image: the image's first layers are the base's, byte for byte (the reproducible
    # exporter rewrote and re-compressed them when the base came as a named context)
    base_layers = client.images.get(pinned).attrs["RootFS"]["Layers"]
    image_layers = client.images.get(f"buildkit-test/bases:{tag}").attrs["RootFS"]["Layers"]
    assert image_layers[:len(base_layers)] == base_layers
    entry = lock(project)["cpu/server" if arch == "cpu" else "cuda13.1-sm120/server"]
    assert entry["base_images"] == [{"ref": name, "digest": local_names["digest"]}]
    labels = client.images.get(f"buildkit-test/bases:{tag}").attrs["Config"]["Labels"]
    assert [name, local_names["digest"]] in json.loads(labels["org.llama-buildkit.inputs"])["base_images"]
    out = client.containers.run(f"buildkit-test/bases:{tag}", ["--version"], remove=True, stdout=True,
                                stderr=True).decode()
    assert fork["commit"] in out
    for t in entry["tags"]:
        client.images.remove(t)


def test_registry_base_stays_pinned_by_digest(tmp_path, tmp_path_factory, fork, registry_plain, client,
                                              debian_base_image):
    ref = f"{registry_plain.host}/library/debian:bookworm"
    client.images.get(debian_base_image).tag(ref.rsplit(":", 1)[0], "bookworm")
    subprocess.run(["docker", "push", "-q", ref], check=True, capture_output=True, timeout=300)
    digest = client.images.get(ref).attrs["RepoDigests"]
    cache = tmp_path_factory.getbasetemp() / "buildkit-cache"
    project = make_project(tmp_path / "project", fork, ref, cache)
    try:
        proc = buildkit("build", "--arch", "cpu", "--print", cwd=project["root"], env=project["env"])
        out = buildkit("render", "--arch", "cpu", "--out", str(tmp_path / "rendered"), cwd=project["root"],
                       env=project["env"])
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        dockerfile = (tmp_path / "rendered" / "Dockerfile").read_text()
        entry_digest = next(d.split("@", 1)[1] for d in digest if d.startswith(registry_plain.host))
        assert f"FROM {ref}@{entry_digest} AS build" in dockerfile
        assert "oci-layout://" not in proc.stdout + out.stdout + proc.stderr + out.stderr
        built = buildkit("build", "--arch", "cpu", cwd=project["root"], env=project["env"])
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        assert f"[internal] load metadata for {ref}@{entry_digest}" in built.stdout + built.stderr
        assert lock(project)["cpu/server"]["base_images"] == [{"ref": ref, "digest": entry_digest}]
    finally:
        client.images.remove(ref)


def test_missing_base_stops_with_one_line_and_keeps_the_lock(tmp_path, fork, docker_engine):
    project = make_project(tmp_path / "project", fork, "127.0.0.1:1/nowhere/debian:gone", tmp_path / "cache")
    lock_path = project["root"] / "buildkit.lock"
    lock_path.write_text('{"lock_version": 1, "builds": {}}\n')
    before = lock_path.read_bytes()
    proc = buildkit("build", "--arch", "cpu", cwd=project["root"], env=project["env"])
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("error: base image 127.0.0.1:1/nowhere/debian:gone is not in the engine")
    assert "docker load" in line and "--os-image" in line and "mirror" in line
    assert lock_path.read_bytes() == before
    assert not (tmp_path / "cache" / "git").exists()  # nothing was fetched
    assert "buildx" not in proc.stdout
