"""Draft acceptance and what it buys (pure): drafted and accepted tokens, the acceptance rate, the mean accepted
length, and tokens/s with the drafter over tokens/s of the target alone, from two bench reports of the same
protocol; and the gate's rule against a release's figures.

Each verify step of speculative decoding yields the accepted drafts plus one token of the target's own, so over a
run the target took `generated - accepted` steps and the mean accepted length (DFlash's tau, tokens per step,
1.0 when nothing is accepted) is generated / (generated - accepted).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from buildkit.core.printable import printable
from buildkit.bench.results import BenchReport, degradation

# the gate: a nightly's acceptance rate may be this much lower than the release's (absolute), no more. A
# greedy run is deterministic; what moves the rate between two builds of one commit is a near-tie flipped.
ACCEPTANCE_TOLERANCE = 0.02


@dataclass(frozen=True)
class Acceptance:
    label: str
    drafted: int
    accepted: int
    generated: int
    runs: int
    spec_tps: float | None  # mean generation tokens/s with the drafter (the server's own figure)
    target_tps: float | None  # the same of the target alone
    degradation: float | None  # the last run's client tokens/s over the first's, with the drafter
    degraded: bool

    @property
    def rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_length(self) -> float | None:
        steps = self.generated - self.accepted
        return self.generated / steps if steps > 0 else None

    @property
    def speedup(self) -> float | None:
        if not self.spec_tps or not self.target_tps:
            return None
        return self.spec_tps / self.target_tps

    def line(self) -> str:
        def fmt(value: float | None, spec: str) -> str:
            return "n/a" if value is None else format(value, spec)
        deg = "" if self.degradation is None else f", last/first run {self.degradation:.2f}" + (
            " DEGRADED" if self.degraded else "")
        return (f"acceptance {self.label}: {self.accepted}/{self.drafted} drafts accepted "
                f"({fmt(self.rate and self.rate * 100, '.1f')}%), mean accepted length {fmt(self.mean_length, '.2f')}, "
                f"{fmt(self.spec_tps, '.1f')} tok/s with the drafter vs {fmt(self.target_tps, '.1f')} alone "
                f"(x{fmt(self.speedup, '.2f')}){deg}")

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "drafted": self.drafted, "accepted": self.accepted, "generated": self.generated,
                "runs": self.runs, "rate": self.rate, "mean_length": self.mean_length, "spec_tps": self.spec_tps,
                "target_tps": self.target_tps, "speedup": self.speedup, "degradation": self.degradation,
                "degraded": self.degraded, "line": self.line()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Acceptance:
        def count(key: str) -> int:
            value = data.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{key} is {value!r}, not a count")
            return value

        def rate(key: str) -> float | None:
            value = data.get(key)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{key} is {value!r}, not a rate")
            return float(value)
        made = cls(label=printable(str(data.get("label", "")))[:200], drafted=count("drafted"),
                   accepted=count("accepted"), generated=count("generated"), runs=count("runs"),
                   spec_tps=rate("spec_tps"),
                   target_tps=rate("target_tps"), degradation=rate("degradation"), degraded=bool(data.get("degraded")))
        if made.accepted > made.drafted or made.accepted > made.generated:
            raise ValueError(f"accepted {made.accepted} is more than drafted {made.drafted} or generated "
                             f"{made.generated}")
        return made


def _mean_tps(report: BenchReport) -> float | None:
    values = [r.predicted_tps for r in report.runs if r.predicted_tps]
    return statistics.fmean(values) if values else None


def measure(label: str, spec: BenchReport, target: BenchReport) -> Acceptance:
    """The acceptance of the runs with the drafter (spec), and their speed over the target alone's."""
    ratio, degraded = degradation(spec.runs)
    return Acceptance(label=label, drafted=sum(r.draft_n or 0 for r in spec.runs),
                      accepted=sum(r.draft_accepted or 0 for r in spec.runs),
                      generated=sum(r.tokens for r in spec.runs), runs=len(spec.runs), spec_tps=_mean_tps(spec),
                      target_tps=_mean_tps(target), degradation=ratio, degraded=degraded)


def gate(new: Acceptance, release: Acceptance | None, tolerance: float = ACCEPTANCE_TOLERANCE) -> str | None:
    """Why the nightly's acceptance fails the gate, or None: no drafts accepted at all, runs that degrade, or a
    rate more than `tolerance` below the release's."""
    if not new.drafted or new.rate is None:
        return f"{new.label}: nothing was drafted (is speculative decoding on?)"
    if new.degraded:
        return f"{new.label}: tokens/s fell from run to run ({new.degradation:.2f}x the first run's)"
    if release is not None and release.rate is not None and new.rate < release.rate - tolerance:
        return (f"{new.label}: acceptance {new.rate * 100:.1f}% is more than {tolerance * 100:g} points below the "
                f"release's {release.rate * 100:.1f}%")
    return None
