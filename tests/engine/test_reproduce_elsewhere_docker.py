"""Issue 47: a digest reproduces on an engine that has never seen the image. The example fork, cpu, as one index of
linux/amd64 and linux/arm64 (the arm64 half cross-compiled), built on the main engine, then reproduced from its lock
on a second, empty engine (tests/second_engine.py: its own BuildKit, no cache, no image but the base loaded into it),
whose apt steps reach the machine's Debian mirror through a proxy on its bridge (tests/aptproxy.py): nothing of the
build comes from the main engine.

The commit is dated after the main engine's BuildKit first held the base (as a nightly's new commit is, on a
long-lived builder), the case where a base history entry without a time took the time of that engine's cache record
(BuildKit's fill) and `rewrite-timestamp`, which only lowers later times, kept it: the second engine then gave the
commit's time, and another digest. Bases buildkit makes carry a fixed time (flows/setup/debianbase.py), and a base
without one is refused (engine/baseimages.check_base_history)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from aptproxy import AptProxy
from cliutil import buildkit_env, write_project
from forkrepo import make_fork_repo
from second_engine import SecondEngine
from test_publish_docker import ROOT, buildkit, ok

from buildkit.engine.current import get_engine
from buildkit.engine.baseimages import local_digest, pin_in_engine
from buildkit.flows.setup.debianbase import machine_mirror

pytestmark = pytest.mark.docker

PLATFORMS = ("linux/amd64", "linux/arm64")


def touch_base(base: str, work: Path) -> None:
    """The main engine's BuildKit holds the base's layers (of both platforms) from now on, if not already."""
    pinned = pin_in_engine(get_engine(), base, local_digest(get_engine(), base))
    work.mkdir(parents=True, exist_ok=True)
    (work / "f").write_text("touch\n")
    (work / "Dockerfile").write_text(f"FROM {pinned}\nCOPY f /f\n")
    subprocess.run(["docker", "buildx", "build", "--platform", ",".join(PLATFORMS), "--output", "type=cacheonly",
                    str(work)], check=True, capture_output=True, timeout=600)


def commit_now(repo: Path) -> str:
    path = repo / "src" / "llama.cpp"
    path.write_text(path.read_text() + "\nint elsewhere(void) { return 47; }\n")
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@x")  # dated now: after the base reached the main engine
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "dated now"], check=True, env=env)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.timeout(3600)  # two platforms built twice, the second time with nothing cached and apt's downloads
def test_an_index_built_here_reproduces_on_an_empty_engine(tmp_path, multiarch_base_image, registry_plain):
    fork = tmp_path / "fork"
    make_fork_repo(fork, ROOT / "examples" / "tiny-fork")
    touch_base(multiarch_base_image, tmp_path / "touch")
    time.sleep(2)  # SOURCE_DATE_EPOCH (seconds) after the cache record
    commit = commit_now(fork)
    project = write_project(tmp_path / "project", source={"url": fork, "commit": commit},
                            image={"name": f"{registry_plain.host}/elsewhere/tiny", "default_variant": "cpu"},
                            build={"arch": "cpu", "jobs": 2, "progress": "plain", "platform": ",".join(PLATFORMS)},
                            base={"os_image": multiarch_base_image})
    env = buildkit_env()
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(tmp_path / "cache")
    built = json.loads(ok(buildkit(project, env, "build", "--push", "--json")).stdout)  # (a two-platform index
    # is loaded into the engine by its push)
    index = json.loads((project / "buildkit.lock").read_text())["indexes"]["cpu/server"]
    per_platform = {p["platform"]: p["manifest_digest"] for p in index["platforms"]}
    assert built["index_digest"] == index["index_digest"] and list(per_platform) == list(PLATFORMS)
    mirror = machine_mirror()
    assert mirror and mirror.startswith("http://"), mirror
    try:
        with SecondEngine(tmp_path / "engine2") as engine:
            engine.load(multiarch_base_image)
            with AptProxy(engine.address, mirror.split("/")[2]) as proxy:
                config = tmp_path / "docker-config"  # the docker CLI's proxies: build arguments, not in the image
                config.mkdir()
                (config / "config.json").write_text(json.dumps({"proxies": {"default": {"httpProxy": proxy.url}}}))
                elsewhere = dict(env, **engine.env, DOCKER_CONFIG=str(config),
                                 LLAMA_BUILDKIT_CACHE_DIR=str(tmp_path / "cache2"))  # a fresh machine's cache too
                proc = buildkit(project, elsewhere, "reproduce", "buildkit.lock", "--json")
                assert proxy.requests, "the second engine's apt steps fetched nothing through the proxy"
    finally:
        mine = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                               f"reference={registry_plain.host}/elsewhere/tiny"], capture_output=True,
                              text=True).stdout.split()
        subprocess.run(["docker", "image", "rm", *mine], capture_output=True)  # only the tags this test made
    assert proc.returncode in (0, 2), proc.stdout[-2000:] + proc.stderr[-3000:]
    reproduced = json.loads(proc.stdout)
    assert {p["platform"]: p["rebuilt"] for p in reproduced["platforms"]} == per_platform, proc.stdout[-3000:]
    assert reproduced["reproduced"] and reproduced["rebuilt"] == index["index_digest"]

