"""Reproduce the real llama.cpp CPU server image bit for bit (marker e2e: two cold builds, ~6 min each on 2 cores).

Built with one CPU level (x86-64-v3: one SIMD libggml-cpu.so through the same GGML_BACKEND_DL path as
the default) rather than the default all variants: two cold builds of fourteen CPU backends would
add about half an hour to the e2e tier on two cores.

The tree of PyPI's llama-cpp-python 0.3.36 sdist is committed as upstream plus one fork commit,
built with build.ccache=false and buildx --no-cache, then `buildkit reproduce buildkit.lock`
rebuilds it (again without any cache) and must report the same manifest digest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forkrepo import make_fork_repo
from realsource import ensure_llama_cpp_tree
from cliutil import buildkit_env, write_project
from fixtures_docker import need_containerd_store

pytestmark = [pytest.mark.e2e, pytest.mark.docker]


def test_real_llama_cpp_cpu_build_is_reproduced_bit_for_bit(tmp_path, git_daemon, debian_base_image):
    from buildkit.plan.config import load_config
    from buildkit.flows.pipeline import build

    need_containerd_store()
    cache = Path(os.environ.get("LLAMA_BUILDKIT_TEST_CACHE", Path.home() / ".cache" / "llama-buildkit-tests"))
    tree = ensure_llama_cpp_tree(cache)
    repo = tmp_path / "buun-llama-cpp"
    _, fork_commit = make_fork_repo(repo, tree, fork_message="fork: reproduce")
    project = tmp_path / "project"
    write_project(project,
                  source={"url": git_daemon.url_for(repo), "commit": fork_commit},
                  image={"name": "buildkit-test/llama-cpp-repro"},
                  build={"arch": "cpu", "cpu_level": "x86-64-v3", "jobs": 2, "ccache": False, "progress": "plain"},
                  base={"os_image": debian_base_image})
    env = buildkit_env()
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(tmp_path / "cache")
    cfg = load_config(project / "buildkit.toml", env=env, overrides={"cache.dir": (env["LLAMA_BUILDKIT_CACHE_DIR"], "test")})
    first = build(cfg, no_cache=True)
    try:
        lock = json.loads((project / "buildkit.lock").read_text())["builds"]["cpu-x86-64-v3/server"]
        assert lock["image_digest"] == first.result.digest and lock["exporter"] == "oci" and lock["cpu_level"] == "x86-64-v3"
        proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "reproduce", "buildkit.lock"], cwd=project,
                              env=env, capture_output=True, text=True, timeout=3600)
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
        assert "reproduced" in proc.stdout and first.result.digest in proc.stdout
    finally:
        import docker

        for tag in first.result.tags:
            try:
                docker.from_env().images.remove(tag)
            except docker.errors.APIError:
                pass
