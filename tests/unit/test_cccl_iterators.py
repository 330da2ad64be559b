"""A CUDA source that uses a CCCL iterator CUDA 13.3+'s <cub/cub.cuh> no longer brings is found before the
build (source/cudasource.py, flows/unit/pipeline.check_cuda_sources), and a compile that fails anyway ends in
one line naming the compiler's first error (engine/buildx.py).

The DFlash fork's head (1c4788192) is such a tree: with CUDA 13.5 its argsort.cu stopped nvcc 50 s into the
compile, and once that was fixed its top-k.cu would have, 5 minutes in (docs/bench-runs/2026-12-05-cuda-current.txt).
The trees here have the shape of those two files; tests/e2e/test_e2e_real_source.py checks that upstream's
tree (whose argsort.cu includes <cuda/iterator>) is not refused."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from buildkit.core.errors import BuildError, SourceError
from buildkit.engine.api import Finished
from buildkit.engine.current import use_engine
import buildkit.engine
from buildkit.engine.buildx import BuildFailed, run_build
from buildkit.verify.buildfailure import explain, first_compile_error, known_failure, run_build_explained
from buildkit.engine.specs import BuildSession, BuildSpec
from buildkit.flows.unit.pipeline import check_cuda_sources
from buildkit.source.cudasource import cub_dropped_iterator_uses

from fakeengine import FakeEngine
from test_plan_render import plan_for

WHEELS = {"base.provider": "wheels", "base.os_image": "debian:bookworm"}
CUDA = "ggml/src/ggml-cuda"

ARGSORT = """#include "argsort.cuh"

#ifdef GGML_CUDA_USE_CUB
#    include <cub/cub.cuh>
#    if (CCCL_MAJOR_VERSION >= 3 && CCCL_MINOR_VERSION >= 1)
{include}#        define STRIDED_ITERATOR_AVAILABLE
#    endif
#endif
// cuda::make_strided_iterator in a comment, and in a string:
static const char * what = "cuda::make_strided_iterator";
void f(int ncols) {{
#ifdef STRIDED_ITERATOR_AVAILABLE
    auto offset_iterator = cuda::make_strided_iterator(cuda::make_counting_iterator(0), ncols);
#endif
}}
"""
TOP_K = """#include "argsort.cuh"
#include <cub/cub.cuh>
void g() {
    auto indexes_in = cuda::make_counting_iterator(0);  // still brought by cub.cuh
    DeviceTopK::MaxPairs(nullptr, n, src, cuda::discard_iterator(), indexes_in, dst, ncols, k, env);
}
"""


def tree(root: Path, argsort_include: str = "", header: str = "#pragma once\n#include \"common.cuh\"\n") -> Path:
    cuda = root / CUDA
    cuda.mkdir(parents=True, exist_ok=True)
    (cuda / "argsort.cu").write_text(ARGSORT.format(include=argsort_include))
    (cuda / "top-k.cu").write_text(TOP_K)
    (cuda / "argsort.cuh").write_text(header)
    (cuda / "common.cuh").write_text("#pragma once\n#include \"argsort.cuh\"\n")  # a cycle, followed once
    return root


def test_the_forks_two_uses_are_found_with_their_lines_and_nothing_else(tmp_path):
    assert cub_dropped_iterator_uses(tree(tmp_path)) == [
        (f"{CUDA}/argsort.cu", 13, "cuda::make_strided_iterator"),
        (f"{CUDA}/top-k.cu", 5, "cuda::discard_iterator")]


@pytest.mark.parametrize("include", ["#        include <cuda/iterator>\n",
                                     "#include <cuda/__iterator/strided_iterator.h>\n",
                                     "#include <thrust/iterator/counting_iterator.h>\n"])
def test_a_file_that_includes_the_header_is_left_alone(tmp_path, include):
    assert cub_dropped_iterator_uses(tree(tmp_path, include)) == [(f"{CUDA}/top-k.cu", 5, "cuda::discard_iterator")]


def test_the_header_reached_through_the_trees_own_headers_counts(tmp_path):
    (tmp_path / "ggml/include").mkdir(parents=True)
    (tmp_path / "ggml/include/iters.h").write_text("#include <cuda/iterator>\n")
    # argsort.cuh -> "iters.h", found under ggml/include: both files reach <cuda/iterator>
    assert cub_dropped_iterator_uses(tree(tmp_path, header='#pragma once\n#include "iters.h"\n')) == []
    # a header of the folder above, reached with ../ (ggml-cuda/vendors/... style paths)
    (tmp_path / "ggml/include/iters.h").unlink()
    (tmp_path / "ggml/src/iters.cuh").write_text("#include <cuda/iterator>\n")
    tree(tmp_path, header='#pragma once\n#include "../iters.cuh"\n')
    assert cub_dropped_iterator_uses(tmp_path) == []
    # a chain of 3,000 headers, each including the next, the last the header: read to the end, no recursion
    chain = tmp_path / "ggml/src/chain"
    chain.mkdir()
    for i in range(3000):
        (chain / f"h{i}.cuh").write_text(f'#include "h{i + 1}.cuh"\n' if i < 2999 else "#include <cuda/iterator>\n")
    (tmp_path / "ggml/src/iters.cuh").write_text('#include "chain/h0.cuh"\n')
    assert cub_dropped_iterator_uses(tmp_path) == []
    # the wrong header of the family is not enough
    (tmp_path / "ggml/src/iters.cuh").write_text("#include <cuda/__iterator/counting_iterator.h>\n")
    assert len(cub_dropped_iterator_uses(tmp_path)) == 2


def test_cuda_13_3_and_later_refuse_the_tree_before_the_build_in_one_line(tmp_path):
    tree(tmp_path)
    for version in ("13.3", "13.5"):
        request = plan_for(**{"build.arch": "sm_120", "build.cuda_version": version, **WHEELS}).request
        with pytest.raises(SourceError) as refused:
            check_cuda_sources(request, tmp_path)
        message = str(refused.value)
        assert "\n" not in message
        assert f"{CUDA}/argsort.cu:13 cuda::make_strided_iterator, {CUDA}/top-k.cu:5 cuda::discard_iterator" in message
        assert f"nvcc {version} stops there" in message and "#include <cuda/iterator>" in message
        assert "--cuda 13.2" in message
    # CUDA 13.2's cub.cuh includes all of <cuda/iterator> (CCCL 3.2): the same tree compiles
    check_cuda_sources(plan_for(**{"build.arch": "sm_120", "build.cuda_version": "13.2", **WHEELS}).request, tmp_path)
    check_cuda_sources(plan_for(**{"build.arch": "cpu"}).request, tmp_path)  # no nvcc


# What nvcc 13.5 printed for the fork's head, as buildx passed it on (docs/bench-runs/2026-12-05-cuda-current.txt)
NVCC_FAILURE = (
    "#19 50.68 the compile failed; the compiler's output from the first failure on (other objects' warnings left out):",
    "#19 50.69 FAILED: ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/argsort.cu.o ",
    "#19 50.69 ccache /usr/local/cuda/bin/nvcc -forward-unknown-to-host-compiler -DGGML_BACKEND_BUILD -x cu "
    "-c /src/ggml/src/ggml-cuda/argsort.cu -o ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/argsort.cu.o",
    '#19 50.69 ../src/ggml/src/ggml-cuda/argsort.cu(48): error: namespace "cuda" has no member "make_strided_iterator"',
    "#19 50.69       auto offset_iterator = cuda::make_strided_iterator(cuda::make_counting_iterator(0), ncols);",
    '#19 50.69 1 error detected in the compilation of "../src/ggml/src/ggml-cuda/argsort.cu".',
    "#19 50.69 ninja: build stopped: subcommand failed.",
    '#19 ERROR: process "/bin/sh -c export CCACHE_DIR=/ccache ... -DGGML_CUDA=ON ..." did not complete successfully',
    'ERROR: failed to solve: process "/bin/sh -c export CCACHE_DIR=/ccache CCACHE_BASEDIR=/src ..." did not complete',
)
GCC_FAILURE = (
    "#19 12.01 the compile failed; the compiler's output from the first failure on (other objects' warnings left out):",
    "#19 12.01 FAILED: src/CMakeFiles/llama.dir/llama.cpp.o",
    "#19 12.01 /src/src/llama.cpp:17:5: error: 'foo' was not declared in this scope",
    "ERROR: failed to solve: process \"/bin/sh -c export CCACHE_DIR=/ccache ...\" did not complete successfully",
)


class CompileFails(FakeEngine):
    def __init__(self, lines: tuple[str, ...]) -> None:
        super().__init__()
        self.lines = lines

    def build(self, spec, session, on_line, *, stream, tty=False):
        for line in self.lines:
            on_line(line)
        return Finished(code=1, seconds=51.0, tty=False)


@pytest.mark.parametrize("lines, expected", [
    (NVCC_FAILURE, 'the compile failed: ggml/src/ggml-cuda/argsort.cu(48): error: namespace "cuda" has no member '
                   '"make_strided_iterator"; from CUDA 13.3 on, <cub/cub.cuh> no longer includes <cuda/iterator> '
                   '(ggml-org/ggml#1624): add `#include <cuda/iterator>` to the file with a patch in the patch '
                   'queue, or build with --cuda 13.2'),
    (GCC_FAILURE, "the compile failed: src/llama.cpp:17:5: error: 'foo' was not declared in this scope (the "
                  "compiler's output is above)"),
])
def test_a_failed_compile_ends_in_one_line_with_the_compilers_first_error(tmp_path, lines, expected):
    """Before: `docker buildx build failed (exit 1): ERROR: failed to solve: process "/bin/sh -c export ...`,
    the whole compile step's script (3 KB for the real tree) and no word of what failed."""
    spec = BuildSpec(context=tmp_path, dockerfile=tmp_path / "Dockerfile", tags=("x:cuda13.5-sm120",))
    with use_engine(CompileFails(lines)) as engine, pytest.raises(BuildError) as failed:
        run_build_explained(spec, BuildSession(progress="plain"), stream=io.StringIO(), engine=engine)
    assert str(failed.value) == expected


def test_the_hint_also_knows_top_ks_incomplete_discard_iterator():
    line = ('#19 80.1 ../src/ggml/src/ggml-cuda/top-k.cu(28): error: incomplete type "cuda::__4::discard_iterator" '
            'is not allowed')
    assert "no longer includes <cuda/iterator>" in (known_failure([line]) or "")
    assert known_failure(['x.cu(1): error: namespace "cuda" has no member "make_counting_iterator"']) is None
    assert first_compile_error(["x.cu(1): error: before any marker"]) is None


def test_the_engine_hands_a_failure_back_and_the_layer_above_explains_it(tmp_path):
    """Issue 49 item 4: engine/ runs the build and says what its output said (BuildFailed: its error lines, the
    compiler's output from the marker on, buildx's most telling line); what a failure means comes from
    verify/buildfailure.py, and engine/ imports neither the source's CCCL facts nor the plan's CPU levels."""
    spec = BuildSpec(context=tmp_path, dockerfile=tmp_path / "Dockerfile", tags=("x:cuda13.5-sm120",))
    with pytest.raises(BuildFailed) as failed:
        run_build(spec, BuildSession(progress="plain"), CompileFails(NVCC_FAILURE), stream=io.StringIO())
    assert str(failed.value).startswith("docker buildx build failed (exit 1): ") and failed.value.code == 1
    first = first_compile_error(failed.value.compile_lines) or ""
    assert first.startswith("ggml/src/ggml-cuda/argsort.cu(48): error")
    assert str(explain(failed.value)).startswith("the compile failed: ggml/src/ggml-cuda/argsort.cu(48)")
    engine = Path(buildkit.engine.__file__).parent
    imported = {line.split()[1] for path in engine.glob("*.py") for line in path.read_text().splitlines()
                if line.strip().startswith("from buildkit.")}
    assert not {m for m in imported if m.startswith(("buildkit.source", "buildkit.plan.cpulevels"))}, imported
