"""Remote builders: a build and a bake on a second Docker engine started by the test.

The second engine (tests/second_engine.py) has its own data root, exec root, pidfile and socket
under /tmp, no bridge and no iptables rules, so it cannot disturb the main dockerd. Without a
bridge its BuildKit cannot give RUN steps a network, so `apt-get` cannot run there: the apt
layers come from a registry layer cache (`--cache-from type=registry`) that a build of the
previous commit on the main engine exported, as a nightly's previous run would have. The commit
built remotely is a new one, so the compile itself runs on the remote engine.

Both the build and the bake run with DOCKER_HOST at the second engine: BuildKit, `docker load`
and the verify containers all run there. (`--builder` with a docker context of another engine
needs a docker-container builder there, whose moby/buildkit image cannot be pulled here.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from cliutil import buildkit_env, write_project
from forkrepo import make_fork_repo
from second_engine import SecondEngine

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]


def commit_change(repo: Path, marker: str) -> str:
    path = repo / "src" / "llama.cpp"
    path.write_text(path.read_text() + f"\n/* {marker} */\nint remote_{marker}(void) {{ return 1; }}\n")
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@x")
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", marker], check=True, env=env)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def run(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=1500)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module")
def remote(tmp_path_factory, registry_plain, debian_base_image):
    tmp = tmp_path_factory.mktemp("remote")
    fork = tmp / "fork"
    make_fork_repo(fork, ROOT / "examples" / "tiny-fork")
    project = tmp / "project"
    cache = f"type=registry,ref={registry_plain.host}/remote/layers:{{variant}}"
    write_project(project,
                  source={"url": fork, "commit": "master"},
                  image={"name": "buildkit-test/remote", "default_variant": "cpu"},
                  build={"arch": "cpu", "jobs": 2, "progress": "plain", "cache_from": [cache]},
                  base={"os_image": debian_base_image},
                  matrix={"archs": ["cpu"], "targets": ["server", "light"]})
    env = buildkit_env()
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(tmp / "cache")
    # the previous commit, built on the main engine, exports every layer (mode=max) to the registry
    ok(run(project, env, "bake", "--cache-to", f"{cache},mode=max", "--lock", str(tmp / "main.lock")))
    with SecondEngine(tmp / "engine2") as engine:
        engine.load(debian_base_image)
        yield {"project": project, "fork": fork, "env": env, "engine": engine, "tmp": tmp,
               "registry": registry_plain.host}
    made = local_images({})  # what the bake of the previous commit made in the main engine
    subprocess.run(["docker", "image", "rm", *sorted(t for t in made if t.startswith("buildkit-test/remote:"))],
                   capture_output=True)


def local_images(env: dict[str, str]) -> set[str]:
    out = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"], env=dict(os.environ, **env),
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_build_on_a_second_engine_compiles_verifies_and_keeps_the_image_there(remote):
    commit = commit_change(remote["fork"], "onengine2")
    env = dict(remote["env"], **remote["engine"].env)
    main_before = local_images(buildkit_env())
    proc = ok(run(remote["project"], env, "build", "--commit", commit, "--lock", str(remote["tmp"] / "build.lock"),
                  "--json"))
    result = json.loads(proc.stdout)
    assert "buildkit: compile 100%" in proc.stderr  # the compile ran, on the second engine's BuildKit
    tag = f"buildkit-test/remote:sha-{commit[:7]}-cpu"
    assert tag in result["tags"] and tag in local_images(remote["engine"].env)
    assert tag not in local_images(buildkit_env()) - main_before  # the main engine got nothing
    verify = {c["name"]: c["status"] for c in result["verify"]}  # the checks ran containers there
    assert verify and set(verify.values()) == {"passed"}
    doctor = json.loads(run(remote["project"], env, "doctor", "--json", "--offline").stdout)
    engine = next(c for c in doctor["checks"] if c["name"] == "engine")
    assert engine["status"] == "ok" and str(remote["engine"].root / "data") in engine["detail"]


def test_bake_on_a_second_engine_builds_every_target_there(remote):
    commit = commit_change(remote["fork"], "onengine")
    env = dict(remote["env"], **remote["engine"].env)
    main_before = local_images(buildkit_env())
    proc = ok(run(remote["project"], env, "bake", "--commit", commit, "--lock", str(remote["tmp"] / "bake.lock"),
                  "--json"))
    result = json.loads(proc.stdout)
    assert result["ok"] and [v["variant"] for v in result["variants"]] == ["cpu", "cpu-light"]
    remote_images = local_images(remote["engine"].env)
    for v in result["variants"]:
        assert v["status"] == "built" and v["image"] in remote_images
    assert not {v["image"] for v in result["variants"]} & (local_images(buildkit_env()) - main_before)
    lock = json.loads((remote["tmp"] / "bake.lock").read_text())["builds"]
    assert {e["commit"] for e in lock.values()} == {commit}
    # the previous commit's bake exported one layer cache per target ({variant}: BuildRequest.cache_name); under
    # one ref the two exports raced, and the registry answered one of them 500
    listed = requests.get(f"http://{remote['registry']}/v2/remote/layers/tags/list", timeout=30).json()
    assert sorted(listed["tags"]) == ["cpu-amd64", "cpu-light-amd64"]


def test_ccache_import_then_export_round_trips_through_the_cache_mount(remote, tmp_path):
    """What the workflow does around the nightly: a folder goes into the builder's cache mount of
    each variant, and comes out again, on the second engine."""
    from buildkit.plan.config import load_config
    from buildkit.plan.buildplan import make_plan, make_request
    from buildkit.plan.plantypes import Resolved
    from buildkit.plan.request import SourceFacts

    cfg = load_config(remote["project"] / "buildkit.toml", {}, {})
    plan = make_plan(make_request(cfg), Resolved(SourceFacts("u", "a" * 40, 0, 1, "", ()), "t", "0"))
    assert plan.ccache_id == "llama-buildkit-ccache-cpu-amd64"  # the mount the compile step uses
    env = dict(remote["env"], **remote["engine"].env)
    seed = tmp_path / "in"
    (seed / "cpu-amd64" / "f").mkdir(parents=True)
    (seed / "cpu-amd64" / "f" / "probe").write_text("round trip " + str(tmp_path))
    out = ok(run(remote["project"], env, "ccache", "import", "--dir", str(seed)))
    assert out.stdout.startswith("imported 1 ccache(s)")
    ok(run(remote["project"], env, "ccache", "export", "--dir", str(tmp_path / "out")))
    assert (tmp_path / "out" / "cpu-amd64" / "f" / "probe").read_text() == "round trip " + str(tmp_path)
    missing = ok(run(remote["project"], env, "ccache", "import", "--dir", str(tmp_path / "empty")))
    assert "starts cold" in missing.stderr and missing.stdout.startswith("imported 0")
