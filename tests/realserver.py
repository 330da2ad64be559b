"""A real llama-server image, built by buildkit itself from the real llama.cpp source (e2e tests).

The tree PyPI's llama-cpp-python 0.3.36 sdist carries under vendor/llama.cpp (tests/realsource.py)
is committed as upstream plus one fork commit (tests/forkrepo.py: fixed identities and dates, so the
same SHAs every time), served by the session's git daemon, and built with
`buildkit build --arch cpu` on the local Debian base image. A cold build takes 6-10 minutes on two
cores; BuildKit's layer cache makes the next session's build (same Dockerfile, same context) a few
seconds, so the fixture always builds rather than trusting a tag it finds in the engine.

Fixture (session scope, register it in conftest.py by importing it):

* ``real_server_image`` -> :class:`RealServerImage` (``ref``, ``fork_commit``, ``upstream_commit``,
  ``project``: the buildkit project folder, ``lock``: its buildkit.lock with the entry ``cpu/server``).
* ``single_level_build`` -> :class:`SingleLevelBuild`: the same project built again with
  `--cpu-level x86-64-v3` (the ccache mount is per arch, not per level, so only ggml-cpu compiles
  again; lock entry ``cpu-x86-64-v3/server``). The cpu-level test checks its files, the reproduce
  test rebuilds it from the lock with every object compiled again.

The image is kept in the engine afterwards (tags under ``buildkit-test/llama-server``), so that the
layer cache stays warm; nothing else uses that repository name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from forkrepo import make_fork_repo
from realsource import ensure_llama_cpp_tree
from cliutil import buildkit_env, write_project

IMAGE_NAME = "buildkit-test/llama-server"
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class RealServerImage:
    ref: str  # an image reference in the local engine whose entrypoint is llama-server
    fork_commit: str
    upstream_commit: str
    project: Path  # folder holding the buildkit.toml the image was built with
    lock: Path  # that project's buildkit.lock; the image's entry is builds["cpu/server"]
    output: str = ""  # what `buildkit build` printed (its summary, verify lines and buildx's log)


def test_cache_dir() -> Path:
    return Path(os.environ.get("LLAMA_BUILDKIT_TEST_CACHE", Path.home() / ".cache" / "llama-buildkit-tests"))


test_cache_dir.__test__ = False  # type: ignore[attr-defined]  # not a test, despite the name


def build_real_server_image(work: Path, git_url_for, base_image: str, *, log=None,
                            image_name: str = IMAGE_NAME) -> RealServerImage:
    """Fork repo under `work` (which the git daemon serves: `git_url_for(path)` is its URL), project,
    `buildkit build --arch cpu`. Raises RuntimeError with the build's tail when it fails."""
    tree = ensure_llama_cpp_tree(test_cache_dir())
    repo = work / "llama-cpp-fork"
    upstream, fork_commit = make_fork_repo(repo, tree, fork_message="fork: DFlash speculative decoding")
    project = work / "project"
    write_project(project,
                  source={"url": git_url_for(repo), "commit": fork_commit},
                  image={"name": image_name},
                  build={"arch": "cpu", "jobs": 2, "progress": "plain"},
                  base={"os_image": base_image})
    env = buildkit_env()
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(work / "cache")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    log_path = work / "build.log"
    with log_path.open("w") as out:
        proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "build"], cwd=project,
                              env=env, stdout=out, stderr=subprocess.STDOUT, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"buildkit build of the real llama.cpp source failed (exit {proc.returncode}); "
                           f"log {log_path}:\n" + log_path.read_text()[-6000:])
    lock = project / "buildkit.lock"
    tags = json.loads(lock.read_text())["builds"]["cpu/server"]["tags"]
    wanted = f"{image_name}:sha-{fork_commit[:7]}-cpu"
    ref = wanted if wanted in tags else tags[0]
    if subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode != 0:
        raise RuntimeError(f"buildkit build succeeded but {ref} is not in the engine; log {log_path}")
    return RealServerImage(ref=ref, fork_commit=fork_commit, upstream_commit=upstream, project=project,
                           lock=lock, output=log_path.read_text())


@dataclass(frozen=True)
class SingleLevelBuild:
    ref: str  # the image's :cpu-x86-64-v3 tag
    entry: dict  # its lock entry, builds["cpu-x86-64-v3/server"] of RealServerImage.lock
    output: str  # what `buildkit build` printed (stdout: the summary and verify lines)
    log: str  # its stderr (buildx plain progress)
    env: dict  # the environment it ran in (cache folder of the project)


def build_single_level(image: RealServerImage, level: str = "x86-64-v3") -> SingleLevelBuild:
    env = buildkit_env()
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(image.project.parent / "cache")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "build", "--cpu-level", level],
                          cwd=image.project, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"buildkit build --cpu-level {level} failed (exit {proc.returncode}):\n"
                           + proc.stdout[-4000:] + proc.stderr[-4000:])
    entry = json.loads(image.lock.read_text())["builds"][f"cpu-{level}/server"]
    ref = next(t for t in entry["tags"] if t.endswith(f":cpu-{level}"))
    return SingleLevelBuild(ref=ref, entry=entry, output=proc.stdout, log=proc.stderr, env=env)


@pytest.fixture(scope="session")
def single_level_build(real_server_image: RealServerImage) -> SingleLevelBuild:
    """real_server_image's project built again with --cpu-level x86-64-v3 (see module doc)."""
    try:
        return build_single_level(real_server_image)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def real_server_image(tmp_path_factory: pytest.TempPathFactory, git_daemon, debian_base_image) -> RealServerImage:
    """The real llama.cpp source built by `buildkit build --arch cpu` into the local engine (see module doc)."""
    work = tmp_path_factory.mktemp("realserver")
    try:
        return build_real_server_image(work, git_daemon.url_for, debian_base_image)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
