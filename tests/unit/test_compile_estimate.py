"""Issue 50 item 6: the compile's estimate holds for CUDA.

Checked against the real tree's recorded build: the ninja log of the DFlash fork's head compiled with its own
flags (docs/gpu-runs/2026-12-05-h200/native-fa-all-quants.ninja_log: 488 edges, 231 CUDA objects, 8.6 minutes
of wall time on 16 cores). The 31-minute sm_120 build of docs/bench-runs/2026-12-05-cuda-current.txt kept its
summary only, not its log. Ninja, writing to a pipe as under buildx, prints an edge's line when it finishes,
`[finished/total] Building CUDA object ...`: the meter sees exactly which objects are done, and when."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from buildkit.core.compilework import CompileCurve, left_by_curve, left_by_kind, ninja_edge
from buildkit.core.progress import CompileMeter
from buildkit.source.cudasource import cuda_object_count

ROOT = Path(__file__).resolve().parents[2]
NINJA_LOG = ROOT / "docs" / "gpu-runs" / "2026-12-05-h200" / "native-fa-all-quants.ninja_log"


def recorded_build() -> list[tuple[float, str, str]]:
    """(seconds since the compile's start at which it finished, kind, output) of every edge, in finish order."""
    rows = []
    for line in NINJA_LOG.read_text().splitlines():
        if line.startswith("#"):
            continue
        start, end, _mtime, output, _hash = line.split("\t")
        rows.append((int(start) / 1000, int(end) / 1000, output))
    t0 = min(start for start, _, _ in rows)
    kind = {True: "cuda", False: "cpu"}
    return sorted((end - t0, kind[out.endswith(".cu.o")] if out.endswith(".o") else "other", out)
                  for _, end, out in rows)


def status_line(finished: int, total: int, kind: str, output: str) -> str:
    what = {"cuda": "Building CUDA object", "cpu": "Building CXX object", "other": "Linking CXX shared library"}
    return f"#19 12.3 [{finished}/{total}] {what[kind]} {output}"


def test_by_kind_the_estimate_holds_where_a_linear_one_was_several_times_low():
    """Over the first half of the objects (2% to 50%), weighted by kind: never more than 3x off, 1.6x on
    (geometric) average; the linear estimate it replaces was up to 5.9x off (2.8x low at 5%)."""
    build = recorded_build()
    total, cuda = len(build), sum(1 for _, k, _ in build if k == "cuda")
    assert (total, cuda) == (488, 231)
    end = build[-1][0]
    kinds: list = []
    weighted, linear = [], []
    for finished, (at, kind, _) in enumerate(build, 1):
        kinds.append(kind)
        if 0.02 * total <= finished <= 0.5 * total:
            actual = end - at
            left = left_by_kind(kinds, total, finished, cuda, at)
            assert left is not None
            weighted.append(left / actual)
            linear.append(at * (total - finished) / finished / actual)
    worst = {name: math.exp(max(abs(math.log(r)) for r in ratios)) for name, ratios in
             (("weighted", weighted), ("linear", linear))}
    mean = {name: math.exp(sum(abs(math.log(r)) for r in ratios) / len(ratios)) for name, ratios in
            (("weighted", weighted), ("linear", linear))}
    assert worst["weighted"] < 3.0 < 5.0 < worst["linear"], worst
    assert mean["weighted"] < 1.7 < 2.0 < mean["linear"], mean


@pytest.mark.parametrize("pace", [1.0, 1.5, 0.1])
def test_by_the_last_builds_objects_the_estimate_is_that_build_at_this_pace(pace):
    """The same tree again, slower (other builds on the cores) or ten times faster (a warm ccache)."""
    build = recorded_build()
    last = CompileCurve(len(build), tuple(at for at, _, _ in build))
    end = build[-1][0] * pace
    for finished in range(10, len(build) - 1, 37):
        now = build[finished - 1][0] * pace
        left = left_by_curve(last, len(build), finished, now)
        assert left == pytest.approx(end - now, rel=1e-6, abs=1e-6)
    assert left_by_curve(last, len(build) + 1, 10, 5.0) is None  # another tree: no figure from it


def test_the_meter_reads_ninja_lines_says_its_source_and_keeps_the_curve():
    build = recorded_build()
    total, cuda = len(build), sum(1 for _, k, _ in build if k == "cuda")
    now = [0.0]
    meter = CompileMeter(cuda_objects=cuda, clock=lambda: now[0])
    texts: list[str] = []
    for finished, (at, kind, output) in enumerate(build, 1):
        now[0] = 5.0 + at
        text = meter.feed(status_line(finished, total, kind, output))
        texts.append(text or "")
    assert any(f"left (objects by kind, {cuda} CUDA)" in t for t in texts)
    curve = meter.curve()
    assert curve is not None and curve.total == total
    assert curve.seconds[-1] == pytest.approx(build[-1][0] - build[0][0], abs=1e-6)
    again = CompileCurve.from_json(curve.to_json())
    assert again is not None and again.total == total
    # the next build of the same tree: the last build's objects make the figure
    now[0] = 0.0
    second = CompileMeter(cuda_objects=cuda, last_curve=again, clock=lambda: now[0])
    text = ""
    for finished, (at, kind, output) in enumerate(build[:50], 1):
        now[0] = at
        text = second.feed(status_line(finished, total, kind, output)) or text
    assert "left (the last build's objects)" in text


@pytest.mark.parametrize("text", ["", "[]", '{"total": 2, "seconds": [1]}', '{"total": 2, "seconds": [3, 1]}',
                                  '{"total": "x"}', "not json"])
def test_a_cache_file_that_is_not_a_curve_is_no_estimate(text):
    assert CompileCurve.from_json(text) is None


def test_ninja_lines_and_others():
    assert ninja_edge("#19 3.5 [1/444] Building CXX object ggml.cpp.o") == (1, 444, "cpu")
    assert ninja_edge("[90/444] Building CUDA object x.cu.o") == (90, 444, "cuda")
    assert ninja_edge("[444/444] Linking CXX shared library bin/libggml-cuda.so") == (444, 444, "other")
    assert ninja_edge("#8 [build 3/7] RUN cmake") is None and ninja_edge("[5/4] Building C object x") is None


def test_the_cuda_objects_a_tree_compiles(tmp_path):
    cuda = tmp_path / "ggml" / "src" / "ggml-cuda"
    (cuda / "template-instances").mkdir(parents=True)
    for name in ("ggml-cuda.cu", "fattn.cu", "common.cuh"):
        (cuda / name).write_text("")
    for name in ("mmq-instance-q4_0.cu", "fattn-mma-f16-instance-ncols1_8.cu", "fattn-tile-instance-dkq64.cu",
                 "mmf-instance-ncols_1.cu", "fattn-vec-instance-q8_0-q8_0.cu", "fattn-vec-instance-q8_0-f16.cu",
                 "fattn-vec-instance-turbo3_0-q8_0.cu", "fattn-vec-instance-f16-f16.cu"):
        (cuda / "template-instances" / name).write_text("")
    assert cuda_object_count(tmp_path, []) == 2 + 4 + 3  # not the mixed q8_0-f16 pair
    assert cuda_object_count(tmp_path, ["-DGGML_CUDA_FA_ALL_QUANTS=ON"]) == 2 + 4 + 4
    assert cuda_object_count(tmp_path / "nothing", []) is None
