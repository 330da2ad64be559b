"""The Debian packages of a build in its lock, and `reproduce` installing exactly those (issue 41, item 5).

One build of the example fork's cpu variant on the test Debian base: its lock entry lists every package
that `dpkg-query -W` prints inside the built image, with the same versions, and the build stage's
compiler. `reproduce --cache` of that lock installs the recorded versions (apt preferences) and gives
the recorded digest; a lock naming a version the mirror does not have stops in the build stage's apt step,
before the compile, with one line naming the package, the recorded version and the versions the mirror has.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import docker
import pytest

from cliutil import buildkit_env, write_project
from fixtures_docker import need_containerd_store
from forkrepo import make_fork_repo

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
IMAGE = f"buildkit-test/debpkgs-{uuid.uuid4().hex[:8]}"  # unique: other runs may share the engine
GONE = "0.0~buildkit-test-gone"


def buildkit(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def built(tmp_path_factory, debian_base_image, docker_engine):
    need_containerd_store()
    repo = tmp_path_factory.mktemp("debpkgs-upstream") / "tiny-fork"
    _, commit = make_fork_repo(repo, ROOT / "examples" / "tiny-fork")
    root = tmp_path_factory.mktemp("debpkgs-project")
    write_project(root, source={"url": repo, "commit": commit, "patch_dir": "patches"},
                  image={"name": IMAGE}, build={"arch": "cpu", "jobs": 2, "progress": "plain"},
                  base={"os_image": debian_base_image})
    env = buildkit_env()
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(tmp_path_factory.getbasetemp() / "debpkgs-cache")
    proc = buildkit(root, env, "build")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    yield {"root": root, "env": env, "lock": json.loads((root / "buildkit.lock").read_text())}
    client = docker.from_env()
    for image in client.images.list(name=IMAGE):
        for tag in image.tags:
            client.images.remove(tag, noprune=False)


def in_image(image: str) -> dict[str, str]:
    """{package: version} as dpkg-query prints it inside the image (the lock's form: plan/aptpins.py)."""
    from buildkit.plan.aptpins import package_versions

    out = subprocess.run(["docker", "run", "--rm", "--entrypoint", "dpkg-query", image, "-W",
                          "-f", "${db:Status-Abbrev}\t${Package}\t${Architecture}\t${Version}\n"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    return package_versions((name, arch, version) for status, name, arch, version in rows if status.strip() == "ii")


def test_the_lock_lists_every_package_of_both_stages_and_reproduce_pins_them(built, tmp_path):
    entry = built["lock"]["builds"]["cpu/server"]
    packages = entry["debian_packages"]
    runtime = in_image(entry["image_id"])
    assert packages["runtime"] == runtime  # nothing missing, nothing extra, the same versions
    assert {"libgomp1", "curl", "openssl", "ca-certificates"} <= set(runtime)
    assert {"gcc", "g++", "cmake", "ninja-build", "build-essential"} <= set(packages["build"])
    assert re.fullmatch(r"[0-9]+:[0-9][0-9.]*-[0-9]+\S*", packages["build"]["gcc"])  # Debian's gcc, epoch 4
    assert "gcc" not in packages["runtime"]

    # the recorded versions, pinned: the same image, bit for bit (its history holds the same RUN lines). A clean
    # rebuild (reproduce's default): with --cache the apt step may come from another reproduce's cache, the
    # same pins on the same base, and print nothing
    proc = buildkit(built["root"], built["env"], "reproduce", "buildkit.lock")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "reproduced: the rebuild has the recorded manifest digest" in proc.stdout
    assert "packages held at their recorded versions" in proc.stderr  # the pins were mounted and read
    assert "differs from the recorded one" not in proc.stderr

    # a version the mirror no longer has: one line, before the compile
    lock = json.loads((built["root"] / "buildkit.lock").read_text())
    lock["builds"]["cpu/server"]["debian_packages"]["build"]["cmake"] = GONE
    (tmp_path / "gone.lock").write_text(json.dumps(lock))
    proc = buildkit(built["root"], built["env"], "reproduce", str(tmp_path / "gone.lock"), "--cache")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert f"the Debian mirror no longer has the recorded versions: cmake {GONE} (the mirror has " in last
    assert packages["build"]["cmake"] in last.split(f"cmake {GONE} (the mirror has ", 1)[1]
    assert "cmake -G Ninja" not in proc.stderr and not re.search(r"^#\d+ \S+ \[\d+/\d+\] ", proc.stderr, re.M)
