"""Reproduce the real llama.cpp CPU server image bit for bit (marker e2e: one cold compile, ~8 min on 2 cores).

The image is the session's `single_level_build` (tests/realserver.py): the tree of PyPI's
llama-cpp-python 0.3.36 sdist, committed as upstream plus one fork commit, built with one CPU level
(x86-64-v3: one SIMD libggml-cpu.so through the same GGML_BACKEND_DL path as the default) and the
ccache, which the default build of the same project had just filled: on a fresh engine most of its
objects come from the cache. `buildkit reproduce` rebuilds it from the lock with buildx --no-cache and every object
compiled again (CCACHE_RECACHE: its compile step shows no ccache hit), and must report the same
manifest digest. So the proof is the one a user's reproduce gives on a machine that never built it:
a cold compile against objects a warm cache gave.

One level rather than the default fourteen variants: a cold compile of all of them would add about
ten minutes to the e2e tier on two cores.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from buildkit.core.progress import ccache_stats
from fixtures_docker import need_containerd_store

pytestmark = [pytest.mark.e2e, pytest.mark.docker]


def test_real_llama_cpp_cpu_build_is_reproduced_bit_for_bit(real_server_image, single_level_build):
    need_containerd_store()
    entry = single_level_build.entry
    assert entry["exporter"] == "oci" and entry["cpu_level"] == "x86-64-v3"
    # (its compile step's hits, where BuildKit's layer cache did not already hold the step)
    print("single-level build's ccache (hits, cacheable calls):", ccache_stats(single_level_build.log.splitlines()))

    proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "reproduce", str(real_server_image.lock),
                           "--build", "cpu-x86-64-v3/server"], cwd=real_server_image.project,
                          env=single_level_build.env, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "reproduced" in proc.stdout and entry["image_digest"] in proc.stdout
    # every object compiled again: the compile step ran through ccache and looked nothing up
    assert ccache_stats(proc.stderr.splitlines()) == (0, 0), proc.stderr[-3000:]
    assert re.search(r"^#\d+ [\d.]+\s+Cacheable calls:\s+0 /\s+[1-9]", proc.stderr, re.M), proc.stderr[-3000:]
