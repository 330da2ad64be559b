"""End to end on the real llama.cpp source (marker e2e; `make test-e2e`, run by .ci/run).

PyPI's llama-cpp-python 0.3.36 sdist carries the whole llama.cpp tree under vendor/llama.cpp.
It is committed as "upstream", one fork commit goes on top, the fork commit is pinned, and
`buildkit build --arch cpu` builds it cold (a fresh ccache mount id) into the local engine.
A cold CPU build of llama.cpp takes about 10 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import docker
import pytest

from forkrepo import make_fork_repo
from realsource import ensure_llama_cpp_tree
from cliutil import buildkit_env, write_project

pytestmark = [pytest.mark.e2e, pytest.mark.docker]


def test_real_llama_cpp_fork_builds_and_reports_the_fork_commit(tmp_path, git_daemon, debian_base_image):
    cache = Path(os.environ.get("LLAMA_BUILDKIT_TEST_CACHE", Path.home() / ".cache" / "llama-buildkit-tests"))
    tree = ensure_llama_cpp_tree(cache)
    repo = tmp_path / "buun-llama-cpp"
    upstream, fork_commit = make_fork_repo(repo, tree, fork_message="fork: DFlash speculative decoding")
    project = tmp_path / "project"
    tag = f"e2e-{uuid.uuid4().hex[:8]}"
    write_project(project,
                  source={"url": git_daemon.url_for(repo), "commit": fork_commit},
                  image={"name": "buildkit-test/llama-cpp"},
                  build={"arch": "cpu", "jobs": 2, "progress": "plain"},
                  base={"os_image": debian_base_image})
    env = buildkit_env()
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "build", "--tag", tag], cwd=project, env=env,
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "verify version: passed" in proc.stdout

    client = docker.from_env()
    ref = f"buildkit-test/llama-cpp:{tag}"
    try:
        out = client.containers.run(ref, ["--version"], remove=True, stdout=True, stderr=True).decode()
        # llama.cpp prints `version: <V> (build <N>, commit <C>)`; C must be the fork commit, not upstream's
        match = re.search(r"^version: .*commit (\w+)\)", out, re.M) or re.search(r"^version: \d+ \((\w+)\)", out, re.M)
        assert match, out
        assert match.group(1) == fork_commit and upstream not in out
        labels = client.images.get(ref).attrs["Config"]["Labels"]
        assert labels["org.opencontainers.image.revision"] == fork_commit
        lock = json.loads((project / "buildkit.lock").read_text())["builds"]["cpu/server"]
        assert lock["commit"] == fork_commit and lock["build_number"] == 2
        # every shared library the server links resolves inside the runtime image
        ldd = client.containers.run(ref, ["-c", "ldd /app/llama-server"], entrypoint=["/bin/sh"], remove=True)
        assert b"not found" not in ldd, ldd.decode()
    finally:
        for name in (ref, "buildkit-test/llama-cpp:cpu", f"buildkit-test/llama-cpp:sha-{fork_commit[:7]}-cpu"):
            try:
                client.images.remove(name, force=True)
            except docker.errors.ImageNotFound:
                pass
