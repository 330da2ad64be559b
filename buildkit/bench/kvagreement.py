"""A KV-cache type against the reference (f16): top-1 agreement, teacher-forced (issue 46's TurboQuant check).

The reference server's greedy tokens for each prompt are fed back to a server with the other KV-cache type one
position at a time (the prompt, then the reference's first i tokens, as one mixed prompt of text and ids), and its
next token is compared with the reference's i-th: the share that agree over all positions is the figure a user of
a quantized cache trusts (a drift in the cache shows as disagreement long before free-running output looks
wrong). Free-running output's first difference is reported beside it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from buildkit.core.printable import printable
from buildkit.bench.greedy import complete
from buildkit.bench.servers import Servers


@dataclass(frozen=True)
class KvAgreement:
    label: str
    agree: int
    total: int
    first_difference: tuple[int | None, ...]  # per prompt: free-running output's first differing token, or None
    seconds: float = 0.0

    @property
    def rate(self) -> float | None:
        return self.agree / self.total if self.total else None

    def line(self) -> str:
        rate = "n/a" if self.rate is None else f"{self.rate * 100:.1f}%"
        firsts = ", ".join("never" if f is None else f"token {f}" for f in self.first_difference) or "n/a"
        return (f"kv {self.label}: top-1 agreement with f16 {self.agree}/{self.total} ({rate}); free-running "
                f"output first differs at {firsts}")

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "agree": self.agree, "total": self.total, "rate": self.rate,
                "first_difference": list(self.first_difference), "seconds": round(self.seconds, 1),
                "line": self.line()}

    @classmethod
    def from_dict(cls, data: object) -> KvAgreement:
        if not isinstance(data, dict):
            raise ValueError("a kv agreement is not an object")

        def count(value: object, what: str) -> int:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
                raise ValueError(f"{what} is {str(value)[:24]!r}, not a count")
            return value
        agree, total = count(data.get("agree"), "agree"), count(data.get("total"), "total")
        if agree > total:
            raise ValueError(f"agree {agree} is more than total {total}")
        firsts = data.get("first_difference")
        if not isinstance(firsts, list):
            raise ValueError("first_difference is not a list")
        seconds = data.get("seconds", 0.0)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
            seconds = 0.0
        return cls(printable(str(data.get("label", "")))[:200], agree, total,
                   tuple(None if f is None else count(f, "first_difference") for f in firsts), float(seconds))


def check_kv(servers: Servers, label: str, reference_args: Sequence[str], kv_args: Sequence[str],
             prompts: Sequence[str], n_tokens: int = 64, log: Callable[[str], None] = print) -> KvAgreement:
    """See the module's text: reference_args serve the reference, kv_args the KV-cache type under test."""
    started = time.monotonic()
    with servers.serve(f"{label} reference", reference_args, draft=False) as url:
        ref = [complete(url, p, n_tokens).tokens for p in prompts]
    agree = total = 0
    first: list[int | None] = []
    with servers.serve(f"{label} kv", kv_args, draft=False) as url:
        for prompt, tokens in zip(prompts, ref, strict=True):
            free = complete(url, prompt, n_tokens).tokens
            first.append(next((i for i, (a, b) in enumerate(zip(tokens, free, strict=False)) if a != b), None))
            for i, expected in enumerate(tokens):
                mixed: list[str | int] = [prompt, *tokens[:i]]
                got = complete(url, mixed, 1, cache_prompt=True).tokens
                agree += bool(got) and got[0] == expected
                total += 1
    result = KvAgreement(label, agree, total, tuple(first), time.monotonic() - started)
    log(f"  {result.line()}")
    return result
