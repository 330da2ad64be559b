"""End to end on the real llama.cpp source (marker e2e; `make test-e2e`, run by .ci/run).

PyPI's llama-cpp-python 0.3.36 sdist carries the whole llama.cpp tree under vendor/llama.cpp.
It is committed as "upstream", one fork commit goes on top, the fork commit is pinned, and
`buildkit build --arch cpu` builds it into the local engine: the session's `real_server_image`
(tests/realserver.py), which the other e2e tests run and measure. This test checks what the user
gets from that build: the fork's commit in the server, the labels, the lock, the libraries.
"""

from __future__ import annotations

import json
import re

import docker
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.docker]


def test_real_llama_cpp_fork_builds_and_reports_the_fork_commit(real_server_image):
    assert "verify version: passed" in real_server_image.output
    client = docker.from_env()
    ref, fork_commit = real_server_image.ref, real_server_image.fork_commit
    out = client.containers.run(ref, ["--version"], remove=True, stdout=True, stderr=True).decode()
    # llama.cpp prints `version: <V> (build <N>, commit <C>)`; C must be the fork commit, not upstream's
    match = re.search(r"^version: .*commit (\w+)\)", out, re.M) or re.search(r"^version: \d+ \((\w+)\)", out, re.M)
    assert match, out
    assert match.group(1) == fork_commit and real_server_image.upstream_commit not in out
    labels = client.images.get(ref).attrs["Config"]["Labels"]
    assert labels["org.opencontainers.image.revision"] == fork_commit
    lock = json.loads(real_server_image.lock.read_text())["builds"]["cpu/server"]
    assert lock["commit"] == fork_commit and lock["build_number"] == 2
    # every shared library the server links resolves inside the runtime image
    ldd = client.containers.run(ref, ["-c", "ldd /app/llama-server"], entrypoint=["/bin/sh"], remove=True)
    assert b"not found" not in ldd, ldd.decode()


def test_the_compile_log_keeps_its_last_step_and_its_ccache_statistics(real_server_image):
    """BuildKit stops a step's log at 2 MiB. The fourteen CPU variants' compiler warnings (ccache repeats
    them on each hit) went past that a third of the way into a cold compile, and the rest of the step was
    lost: the progress stopped, the ccache statistics and a late compiler error were gone. Only Ninja's step
    lines reach the log now (templates/_build.j2; tests/unit/test_compile_log.py runs that shell)."""
    out = real_server_image.output
    compile_step = re.search(r"^#(\d+) \[[^\]]*\] RUN .*cmake --build", out, re.M)
    assert compile_step, out[-3000:]
    if re.search(rf"^#{compile_step.group(1)} CACHED$", out, re.M):
        pytest.skip("the compile step came from BuildKit's layer cache, so its log was not printed")
    step = compile_step.group(1)
    assert not re.search(rf"^#{step} [\d.]+ \[output clipped", out, re.M), out[-3000:]
    assert re.search(rf"^#{step} [\d.]+ \[(\d+)/\1\] Linking CXX executable bin/llama-server$", out, re.M), out[-3000:]
    assert re.search(rf"^#{step} [\d.]+ compile: \d+ compiler warning lines, left out of this log$", out, re.M)
    assert re.search(r"^summary: \S+ built in .*; ccache \d+% \(\d+/[1-9]\d* compiler calls\)", out, re.M), out[-3000:]


def test_the_real_trees_cuda_sources_pass_the_cub_iterator_check():
    """No false refusal on real llama.cpp (source/cudasource.py): upstream's argsort.cu and top-k.cu use
    cuda::make_strided_iterator and cuda::discard_iterator and include <cuda/iterator> (0c1e570), which the
    DFlash fork's head does not (tests/unit/test_cccl_iterators.py has that shape)."""
    from buildkit.source.cudasource import _DROPPED_USE, cub_dropped_iterator_uses
    from realserver import test_cache_dir
    from realsource import ensure_llama_cpp_tree

    tree = ensure_llama_cpp_tree(test_cache_dir())
    argsort = (tree / "ggml/src/ggml-cuda/argsort.cu").read_text()
    assert _DROPPED_USE.search(argsort), "the tree no longer uses a dropped iterator: the check proves nothing here"
    assert cub_dropped_iterator_uses(tree) == []
