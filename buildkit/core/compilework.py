"""How much of a compile is left, by its objects (pure; issue 50 item 6).

A CUDA build's step counter is a poor clock: Ninja starts with the CPU backend's variants, C and C++ objects
of a second or two, and the CUDA objects (half a minute each, most of the time) come after, so a linear
estimate at 5% of the objects was 3-5 times too low ("about 9m44s left" of a build that took 31 minutes).
Two better figures, in this order:

* the last build's per-object times: when the k-th object finished (the curve Ninja's counter drew, kept
  in the cache after each compile); at k objects now, what is left of that build's time, at this build's
  pace (a warm ccache runs it faster, and the pace says so);
* without one, the objects weighted by kind: a CUDA object weighs KIND_WEIGHTS["cuda"] C/C++ objects, as
  measured in the fork's own build (docs/gpu-runs/2026-12-05-h200/native-fa-all-quants.ninja_log: 231 CUDA
  objects 7,485 s, 237 C/C++ objects 656 s: 32.4 s and 2.8 s each), the CUDA objects the tree will compile
  counted from its sources (source/cudasource.py cuda_object_count), and the pace of the weight done so far.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

EdgeKind = Literal["cuda", "cpu", "other"]
KIND_WEIGHTS: dict[EdgeKind, float] = {"cuda": 32.4 / 2.8, "cpu": 1.0, "other": 1.0}
# Ninja's status line: `[12/470] Building CUDA object ggml/src/ggml-cuda/CMakeFiles/...`
NINJA_EDGE = re.compile(r"\[(\d+)/(\d+)\] (Building CUDA object|Building CXX object|Building C object|Linking|"
                        r"Creating|Generating|Re-running)")


def ninja_edge(line: str) -> tuple[int, int, EdgeKind] | None:
    """(finished, total, kind of the edge that starts) of a Ninja status line, else None."""
    match = NINJA_EDGE.search(line)
    if not match:
        return None
    done, total, what = int(match.group(1)), int(match.group(2)), match.group(3)
    if not 0 <= done <= total or total == 0:
        return None
    kind: EdgeKind = "cuda" if what == "Building CUDA object" else "cpu" if what.startswith("Building") else "other"
    return done, total, kind


@dataclass(frozen=True)
class CompileCurve:
    """When each object of a compile had finished: seconds[k-1], since the compile's first counter line."""

    total: int
    seconds: tuple[float, ...]

    def to_json(self) -> str:
        return json.dumps({"total": self.total, "seconds": [round(s, 1) for s in self.seconds]})

    @classmethod
    def from_json(cls, text: str) -> CompileCurve | None:
        """The curve of a cache file; None when it is not one (the estimate then does without)."""
        try:
            data = json.loads(text)
            total, seconds = int(data["total"]), tuple(float(s) for s in data["seconds"])
        except (ValueError, TypeError, KeyError):
            return None
        if total <= 0 or len(seconds) != total or any(b < a for a, b in zip(seconds, seconds[1:], strict=False)):
            return None
        return cls(total, seconds)


def left_by_curve(last: CompileCurve, total: int, finished: int, elapsed: float) -> float | None:
    """Seconds left: what the last build took from `finished` objects on, at this build's pace."""
    if last.total != total or not 0 < finished < total or elapsed <= 0:
        return None
    then = last.seconds[finished - 1]
    if then <= 0:
        return None
    return (last.seconds[-1] - then) * elapsed / then


def left_by_kind(kinds: Sequence[EdgeKind], total: int, finished: int, cuda_objects: int,
                 elapsed: float) -> float | None:
    """Seconds left: the weight of the objects not finished, at the pace of the weight finished. kinds: the
    kinds of the edges in the order they started (the first `finished` of them are taken as the finished
    ones); cuda_objects: how many CUDA objects the whole compile has."""
    if not 0 < finished < total or elapsed <= 0 or not kinds:
        return None
    done = kinds[:finished]
    cuda_done = sum(1 for k in done if k == "cuda")
    weight_done = sum(KIND_WEIGHTS[k] for k in done)
    cuda_left = max(cuda_objects - cuda_done, 0)
    other_left = max(total - finished - cuda_left, 0)
    weight_left = cuda_left * KIND_WEIGHTS["cuda"] + other_left * KIND_WEIGHTS["cpu"]
    return weight_left * elapsed / weight_done if weight_done else None
