"""Is speculative decoding lossless? Greedy tokens with the drafter against the target alone, position by position
(pure).

At temperature 0 a speculative path must give the target's own tokens: the drafter only proposes, the target
verifies. Where the two differ, the first such position decides the verdict. The target's own candidates there
(its top two log-probabilities, asked of the target alone) tell a near-tie from a bug: a batched verify computes
the same logits in another order, so where the target's first two choices are within NEAR_TIE nats of each other
and the speculative path took the second, the flip is rounding (reported as a near-tie, with the margin). Any
other difference is a failure: a token the target did not rank second, or a clear margin.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from buildkit.core.printable import printable

# nats: the logit margin under which the target's first two choices count as tied. float16 activations and a
# reordered reduction move a logit by about 1e-3 of its size; the logits of these models are at most ~20.
NEAR_TIE = 0.05


class Outcome(StrEnum):
    IDENTICAL = "identical"
    NEAR_TIE = "near-tie"
    DIFFERS = "differs"


@dataclass(frozen=True)
class Divergence:
    position: int  # first position (0 = the first generated token) where the tokens differ
    target: int  # the target alone's token there
    speculative: int  # the speculative path's token there
    margin: float | None  # the target's top-1 minus top-2 log-probability there (None: not known)
    second: int | None  # the target's second choice there (None: not known)

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position, "target": self.target, "speculative": self.speculative,
                "margin": self.margin, "target_second": self.second}


@dataclass(frozen=True)
class Comparison:
    """One prompt in one setting (a fresh server, or in sequence on one server)."""

    prompt: int
    setting: str  # "fresh" | "sequence"
    compared: int  # positions compared
    outcome: Outcome
    divergence: Divergence | None = None

    def line(self) -> str:
        head = f"prompt {self.prompt} ({self.setting}): "
        d = self.divergence
        if d is None:
            return head + f"identical, {self.compared} tokens"
        if self.outcome is Outcome.NEAR_TIE:
            return head + (f"near-tie at token {d.position}: the target's top two are {d.margin:.4f} nats apart "
                           f"and the speculative path took its second choice ({d.speculative} for {d.target})")
        if d.speculative < 0:
            return head + f"DIFFERS: the speculative answer ends after {d.position} tokens, the target's goes on"
        if d.target < 0:
            return head + f"DIFFERS: the speculative answer goes on after the target's {d.position} tokens"
        margin = f"{d.margin:.4f} nats" if d.margin is not None else "unknown"
        return head + (f"DIFFERS at token {d.position}: target {d.target}, speculative {d.speculative} "
                       f"(target's margin there {margin}, second choice {d.second})")

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "setting": self.setting, "compared": self.compared,
                "outcome": str(self.outcome), "divergence": self.divergence.to_dict() if self.divergence else None}


def compare(prompt: int, setting: str, target: Sequence[int], speculative: Sequence[int],
            margins: Sequence[float | None] = (), seconds: Sequence[int | None] = (),
            near_tie: float = NEAR_TIE) -> Comparison:
    """The target alone's tokens against the speculative path's, with the target's margin and second choice at
    each position (from a run with n_probs, where known). Sequences of different lengths differ at the shorter
    one's end."""
    n = min(len(target), len(speculative))
    for i in range(n):
        if target[i] != speculative[i]:
            break
    else:
        if len(target) == len(speculative):
            return Comparison(prompt, setting, n, Outcome.IDENTICAL)
        i = n
    margin = margins[i] if i < len(margins) else None
    second = seconds[i] if i < len(seconds) else None
    d = Divergence(position=i, target=target[i] if i < len(target) else -1,
                   speculative=speculative[i] if i < len(speculative) else -1, margin=margin, second=second)
    return Comparison(prompt, setting, i, classify(d, near_tie), d)


def classify(d: Divergence, near_tie: float = NEAR_TIE) -> Outcome:
    """A near-tie when the speculative path took the target's second choice and the target's margin there is
    under near_tie nats; a difference otherwise."""
    tie = d.margin is not None and d.margin < near_tie and d.second is not None and d.speculative == d.second
    return Outcome.NEAR_TIE if tie else Outcome.DIFFERS


def _count(data: dict[str, Any], key: str, low: int = 0) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 2**31:
        raise ValueError(f"{key} is {str(value)[:24]!r}, not a whole number of at least {low}")
    return value


def comparison_from_dict(data: object, near_tie: float = NEAR_TIE) -> Comparison:
    """A recorded comparison (a GPU host's workload.json), judged again here from its divergence: the host's own
    outcome is not taken on trust. ValueError when a field cannot be."""
    if not isinstance(data, dict):
        raise ValueError("a comparison is not an object")
    setting = data.get("setting")
    if setting not in ("fresh", "sequence"):
        raise ValueError(f"setting is {str(setting)[:24]!r}, not fresh or sequence")
    div = data.get("divergence")
    if div is None:
        if data.get("outcome") != Outcome.IDENTICAL:
            raise ValueError("a comparison without a divergence must be identical")
        return Comparison(_count(data, "prompt"), setting, _count(data, "compared"), Outcome.IDENTICAL)
    if not isinstance(div, dict):
        raise ValueError("divergence is not an object")
    margin = div.get("margin")
    if margin is not None and (isinstance(margin, bool) or not isinstance(margin, (int, float))
                               or not math.isfinite(margin) or margin < 0):
        raise ValueError(f"margin is {str(margin)[:24]!r}, not a finite log-probability difference")
    second = div.get("target_second")
    if second is not None:
        second = _count(div, "target_second")
    d = Divergence(position=_count(div, "position"), target=_count(div, "target", -1),
                   speculative=_count(div, "speculative", -1), margin=None if margin is None else float(margin),
                   second=second)
    return Comparison(_count(data, "prompt"), setting, _count(data, "compared"), classify(d, near_tie), d)


@dataclass(frozen=True)
class LosslessVerdict:
    """Every comparison of one model pair and KV type: passed when none differs (near-ties are reported)."""

    label: str
    comparisons: tuple[Comparison, ...]

    @property
    def passed(self) -> bool:
        return bool(self.comparisons) and all(c.outcome is not Outcome.DIFFERS for c in self.comparisons)

    def line(self) -> str:
        n = len(self.comparisons)
        same = sum(c.outcome is Outcome.IDENTICAL for c in self.comparisons)
        ties = sum(c.outcome is Outcome.NEAR_TIE for c in self.comparisons)
        differ = n - same - ties
        if not n:
            return f"lossless {self.label}: FAIL nothing was compared"
        word = "PASS" if self.passed else "FAIL"
        tail = f", {ties} near-tie(s)" if ties else ""
        tail += f", {differ} DIFFER" if differ else ""
        return f"lossless {self.label}: {word} {same}/{n} identical{tail}"

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "passed": self.passed, "line": self.line(),
                "comparisons": [c.to_dict() for c in self.comparisons]}

    @classmethod
    def from_dict(cls, data: object, near_tie: float = NEAR_TIE) -> LosslessVerdict:
        if not isinstance(data, dict) or not isinstance(data.get("comparisons"), list):
            raise ValueError("a lossless verdict is an object with a list of comparisons")
        return cls(printable(str(data.get("label", "")))[:200],
                   tuple(comparison_from_dict(c, near_tie) for c in data["comparisons"]))
