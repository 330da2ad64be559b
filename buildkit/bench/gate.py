"""The bench gate: is the new image's mean tok/s within --max-slowdown of the one it is compared with?

One `Gate` per comparison with `--max-slowdown`: the new and the old mean tok/s (the client's), their
ratio, the threshold, and the verdict, "promoted" or "stays a nightly: N% slower than the release
(threshold M%)". A release measured unsteadily promotes nothing: a busy runner can only slow a run
down, so noise lowers the release's mean and could let a slower nightly through. When a run of the
release after its first is below STEADY (0.7, the bench's degradation threshold) of its fastest, a
nightly that would pass stays a nightly with the verdict "the release's runs were not steady ..."
(`unsteady` says so). The first run may be slow (a server's warm-up), as the nightly's may. Noise in
the nightly's own runs only makes it look slower, the safe side, so it decides as measured; a nightly
slower than an unsteady release's lowered mean is slower still.
Its figures are checked before anything prints or records them (finite, positive, the ratio
agreeing with the two means): a gate that cannot be true is a BenchError, never a verdict.
It goes into the JSON report (`gate`), the lock entry (`--attach-lock`: builds[KEY].bench.gate) and
the step summary (`--step-summary FILE`, a Markdown table appended, as GitHub's
$GITHUB_STEP_SUMMARY wants it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from buildkit.bench.protocol import DEGRADATION_THRESHOLD
from buildkit.core.errors import BenchError

PROMOTED = "promoted"
STEADY = DEGRADATION_THRESHOLD  # each release run after the first / its fastest, at least


@dataclass(frozen=True)
class Gate:
    new: float  # mean tok/s of the new image
    old: float  # mean tok/s of the image it is compared with (the release)
    ratio: float  # new / old
    max_slowdown: float  # percent
    new_label: str = ""
    old_label: str = ""
    unsteady: str = ""  # why the release's measurement cannot let a nightly through, or ""

    @property
    def fast_enough(self) -> bool:
        return self.ratio >= 1 - self.max_slowdown / 100

    @property
    def passed(self) -> bool:
        return self.fast_enough and not self.unsteady

    @property
    def slower_pct(self) -> float:
        """How much slower than the old image, percent (negative: faster)."""
        return (1 - self.ratio) * 100

    @property
    def verdict(self) -> str:
        if self.passed:
            return PROMOTED
        if self.fast_enough:
            return f"stays a nightly: {self.unsteady}, so the comparison proves nothing (bench again on a quiet runner)"
        return (f"stays a nightly: {self.slower_pct:.1f}% slower than the release "
                f"(threshold {self.max_slowdown:g}%)")

    def to_dict(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "max_slowdown": self.max_slowdown, "verdict": self.verdict,
                "passed": self.passed, "new": self.new, "old": self.old,
                "new_image": self.new_label, "old_image": self.old_label, "unsteady": self.unsteady or None}

    def problem(self) -> str | None:
        """The line `bench` fails with when the gate refuses, else None."""
        if self.passed:
            return None
        if self.fast_enough:
            return f"no verdict: the nightly {self.verdict}"
        return (f"slower than allowed: mean tok/s {self.ratio:.3f}x of before, more than --max-slowdown "
                f"{self.max_slowdown:g}% below it; the nightly {self.verdict}")

    def to_markdown(self) -> str:
        icon = "✅" if self.passed else "❌"
        change = (f"{self.slower_pct:.1f}% slower" if self.ratio < 1 else f"{-self.slower_pct:.1f}% faster")
        return "\n".join([
            f"## {icon} bench gate: {self.verdict}", "",
            "| | image | tok/s (mean) |", "| --- | --- | --- |",
            f"| new | `{_md(self.new_label)}` | {self.new:.2f} |",
            f"| release | `{_md(self.old_label)}` | {self.old:.2f} |", "",
            "| ratio new/release | change | threshold | verdict |", "| --- | --- | --- | --- |",
            f"| {self.ratio:.3f} | {change} | at most {self.max_slowdown:g}% slower | {_md(self.verdict)} |", "", ""])


def _md(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|").replace("`", "'")


def _sane(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise BenchError(f"the bench gate's {name} is {value!r}, not a finite positive number; no verdict is "
                         "printed or recorded (nothing proves the new image is not slower)")
    return float(value)


def make_gate(rows: list[dict[str, Any]], max_slowdown: float, new_label: str = "", old_label: str = "",
              release_runs: Sequence[float | None] = ()) -> Gate:
    """The gate of compare()'s rows (bench/format.py): client_tps.mean of both, checked sane; BenchError else.
    release_runs: the release's client tok/s, run by run, judged for steadiness."""
    row = next((r for r in rows if r.get("key") == "client_tps.mean"), None)
    if row is None or row.get("base") is None or row.get("new") is None:
        raise BenchError("the comparison has no mean tok/s of both, so it cannot show the new image is not slower")
    new, old = _sane("new mean tok/s", row["new"]), _sane("release mean tok/s", row["base"])
    ratio = _sane("ratio new/release", row.get("ratio"))
    if not math.isclose(ratio, new / old, rel_tol=1e-9):
        raise BenchError(f"the bench gate's ratio {ratio!r} is not {new!r} / {old!r}; no verdict is recorded")
    if isinstance(max_slowdown, bool) or not (isinstance(max_slowdown, (int, float)) and math.isfinite(max_slowdown)
                                              and 0 <= max_slowdown <= 100):
        raise BenchError(f"--max-slowdown {max_slowdown!r} is not a percentage (0-100)")
    return Gate(new=new, old=old, ratio=ratio, max_slowdown=float(max_slowdown), new_label=new_label,
                old_label=old_label, unsteady=_unsteady(release_runs))


def _unsteady(runs: Sequence[float | None]) -> str:
    """Why the release's runs were not steady, as a phrase; "" when they were (or there is one run)."""
    tps = [float(v) for v in runs
           if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0]
    if len(tps) != len(runs):
        return f"the release's runs hold a tok/s that is not a finite positive number ({list(runs)!r})"
    if len(tps) < 2:
        return ""
    fastest = max(tps)
    slowest = min(range(1, len(tps)), key=tps.__getitem__)  # a slow first run is the server's warm-up
    spread = tps[slowest] / fastest
    if spread >= STEADY:
        return ""
    return (f"the release's runs were not steady (run {slowest + 1} at {tps[slowest]:.3g} tok/s, {spread:.2f}x "
            f"its fastest {fastest:.3g}; at least {STEADY:g}x is steady)")


def failed_markdown(what: str, new_label: str, old_label: str) -> str:
    """The step summary of a gate that has no verdict (the bench failed): nothing is promoted."""
    return "\n".join(["## ❌ bench gate: no verdict, the nightly stays a nightly", "",
                      f"- new: `{_md(new_label)}`", f"- release: `{_md(old_label)}`",
                      f"- {_md(what)}", "", ""])
