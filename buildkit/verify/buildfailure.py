"""What a failed build means, and what to do (pure, but for run_build_explained): the layer above the engine that
reads a failed build's output (issue 49 item 4). The engine runs buildx and hands back what the output said
(engine/buildx.BuildFailed); the causes it may show come from the plan (the CPU levels' GCC) and the source (the
CCCL iterators CUDA 13.3 dropped), which the engine no longer imports.

API:
- ``known_failure(lines)`` -> the hint for a failure with a known cause (KNOWN_FAILURES), else None;
- ``first_compile_error(lines)`` -> the compiler's first error line after the build step's failed-compile marker;
- ``explain(failed)`` -> the one-line BuildError a user reads;
- ``run_build_explained(spec, session, ...)`` -> engine/buildx.run_build, a failure explained: what the build
  stages call.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from buildkit.core.compilework import CompileCurve
from buildkit.core.errors import BuildError
from buildkit.engine.api import Engine, OutStream
from buildkit.engine.buildx import COMPILE_FAILED, BuildFailed, BuildResult, run_build
from buildkit.engine.specs import BuildSession, BuildSpec
from buildkit.plan.cpulevels import LEVELS, fallback
from buildkit.source.cudasource import CUB_DROPPED_ITERATORS_FROM as _FROM, ITERATORS_CUB_DROPPED

# The CPU levels named for a CPU whose -march needs the GCC release the build stage installs (plan/cpulevels.py)
_NEWER_GCC = " and ".join(f"cpu level {lv.name} (else --cpu-level {fallback(lv)})" for lv in LEVELS.values() if lv.gcc)

# Failures with a known cause, and what to do: (pattern in the build's output, the hint).
KNOWN_FAILURES = (
    (re.compile(r"E: (?:Unable to locate package |Package '?)g(?:cc|\+\+)-1[4-9]\b"),
     "the build base has no GCC 14 package, which llama.cpp's armv9.2 (SME) CPU variants need (cpu level all "
     f"for arm64; else --cpu-level armv8.6 or armv8.2), and {_NEWER_GCC}: use a base whose archive has it "
     "(Ubuntu 24.04, the default, or Debian 13)"),
    (re.compile(r"unknown value 'armv9[.0-9]*-a[^']*\+sme[^']*' for '-march'"),
     "the build stage's GCC is older than 14 and cannot compile the tree's armv9.2 (SME) CPU variants of "
     "cpu level all for arm64 (buildkit installs GCC 14 for the variants ggml/src/CMakeLists.txt declares; "
     "this tree declares them elsewhere): use a base image with GCC 14 or newer (Debian 13), "
     "or --cpu-level armv8.6 (or armv8.2)"),
    # a named CPU's -march that the build stage's GCC lacks (x86's GCC says bad value, AArch64's unknown value)
    (re.compile(r"(?:bad|unknown) value [‘'](\w[\w-]*)[’'] for [‘']-march=?[’']"),
     "the build stage's GCC does not know the -march of the cpu level (znver4 needs GCC 13 or newer): use a base "
     "with a newer GCC (Ubuntu 24.04, the default, or Debian 13), or another --cpu-level"),
    # a CCCL iterator that CUDA 13.3+'s <cub/cub.cuh> no longer brings (source/cudasource.py finds the plain
    # uses before the build; this is for the ones it cannot see, e.g. behind a macro)
    (re.compile(r'namespace "cuda" has no member "(?:make_)?(?:' + "|".join(ITERATORS_CUB_DROPPED) + r')"'
                r'|incomplete type "cuda::(?:__\d+::)?(?:' + "|".join(ITERATORS_CUB_DROPPED) + r')"'),
     f"from CUDA {_FROM[0]}.{_FROM[1]} on, <cub/cub.cuh> no longer includes <cuda/iterator> (ggml-org/ggml#1624): "
     f"add `#include <cuda/iterator>` to the file with a patch in the patch queue, or build with --cuda "
     f"{_FROM[0]}.{_FROM[1] - 1}"),
)
# nvcc's and GCC's error lines (file(line): error: ..., file:line:col: error: ...)
_COMPILER_ERROR = re.compile(r"(?:\(\d+\)|:\d+(?::\d+)?): (?:fatal )?error: ")
_LOG_PREFIX = re.compile(r"^(?:#\d+ )?\d+\.\d+ ")  # buildx's "#19 50.69 " or its summary's "50.69 "


def known_failure(lines: Sequence[str]) -> str | None:
    """The hint for a failure with a known cause, else None."""
    for pattern, hint in KNOWN_FAILURES:
        if any(pattern.search(line) for line in lines):
            return hint
    return None


def first_compile_error(lines: Sequence[str]) -> str | None:
    """The compiler's first error line after the build step's failed-compile marker, without buildx's
    prefix and with the build folder's ../src/ left out: `ggml/src/ggml-cuda/argsort.cu(48): error: ...`."""
    after = False
    for line in lines:
        text = _LOG_PREFIX.sub("", line.strip())
        if COMPILE_FAILED in text:
            after = True
        elif after and _COMPILER_ERROR.search(text):
            return text.removeprefix("../src/").removeprefix("/src/")
    return None


def explain(failed: BuildFailed) -> BuildError:
    """The failure in one line: the compiler's first error (with the known cause's hint, else a pointer to the
    output above), else the known cause, else buildx's most telling line."""
    hint = known_failure(failed.error_lines)
    compile_error = first_compile_error(failed.compile_lines)
    if compile_error:
        return BuildError(f"the compile failed: {compile_error}"
                          + (f"; {hint}" if hint else " (the compiler's output is above)"))
    if hint:
        return BuildError(f"docker buildx build failed (exit {failed.code}): {hint}")
    return failed


def run_build_explained(spec: BuildSpec, session: BuildSession, *, stream: OutStream | None = None,
                        last_seconds: float | None = None, last_curve: CompileCurve | None = None,
                        cuda_objects: int | None = None, engine: Engine) -> BuildResult:
    """engine/buildx.run_build with the same arguments, its failure explained (explain)."""
    try:
        return run_build(spec, session, engine, stream=stream,
                         last_seconds=last_seconds, last_curve=last_curve,
                         cuda_objects=cuda_objects)
    except BuildFailed as failed:
        raise explain(failed) from None
