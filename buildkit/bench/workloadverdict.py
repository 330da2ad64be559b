"""The verdict of the workload checks (pure): a report (bench/workload.py's, or a GPU host's workload.json read
back) judged again here, against a release's where there is one, as lines, a lock record and a step summary.

Fails: any error, any lossless comparison that differs (near-ties pass and are named), acceptance that the gate
refuses (acceptance.gate: nothing drafted, runs that degrade, a rate more than the tolerance below the release's).
KV agreement is recorded and printed, judged by a floor only where one is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from buildkit.bench.acceptance import ACCEPTANCE_TOLERANCE, Acceptance, gate
from buildkit.bench.kvagreement import KvAgreement
from buildkit.bench.lossless import NEAR_TIE, LosslessVerdict
from buildkit.core.printable import markdown_cell, printable

RECORD_VERSION = 1


def _printable(text: object, limit: int = 300) -> str:
    """A line of remote text (a host's report, a server's message) as it may be printed: core/printable.py."""
    return printable(str(text))[:limit]


@dataclass(frozen=True)
class WorkloadVerdict:
    lossless: tuple[LosslessVerdict, ...]
    acceptance: tuple[Acceptance, ...]
    kv: tuple[KvAgreement, ...]
    errors: tuple[str, ...]
    problems: tuple[str, ...]  # the gate's reasons to refuse, besides errors and lossless failures

    @property
    def passed(self) -> bool:
        return not self.errors and not self.problems and all(v.passed for v in self.lossless) and bool(
            self.lossless or self.acceptance or self.kv)

    def lines(self) -> list[str]:
        out = [v.line() for v in self.lossless] + [a.line() for a in self.acceptance] + [k.line() for k in self.kv]
        out += [f"error: {e}" for e in self.errors] + [f"refused: {p}" for p in self.problems]
        if not (self.lossless or self.acceptance or self.kv or self.errors):
            out.append("workload: nothing was checked")
        return out

    def line(self) -> str:
        """The one verdict line."""
        return ("workload: PASS " if self.passed else "workload: FAIL ") + "; ".join(self.lines())

    def to_dict(self) -> dict[str, Any]:
        return {"version": RECORD_VERSION, "passed": self.passed,
                "lossless": [v.to_dict() for v in self.lossless], "acceptance": [a.to_dict() for a in self.acceptance],
                "kv": [k.to_dict() for k in self.kv], "errors": list(self.errors), "problems": list(self.problems)}

    def markdown(self) -> str:
        icon = "✅" if self.passed else "❌"
        rows = [f"### {icon} workload checks", "", "| check | result |", "| --- | --- |"]
        for line in self.lines():
            head, _, rest = line.partition(": ")
            rows.append(f"| {_md(head)} | {_md(rest)} |")
        return "\n".join(rows) + "\n\n"


def _md(text: str) -> str:
    return markdown_cell(text)


def judge(report: object, release: WorkloadVerdict | None = None, *, tolerance: float = ACCEPTANCE_TOLERANCE,
          near_tie: float = NEAR_TIE, kv_floor: float | None = None) -> WorkloadVerdict:
    """A report's verdict; ValueError naming the field when the report cannot be one (it is input)."""
    if not isinstance(report, dict):
        raise ValueError("a workload report is a JSON object")

    def entries(key: str) -> list[Any]:
        value = report.get(key, [])
        if not isinstance(value, list):
            raise ValueError(f"{key} is not a list")
        return value

    lossless = tuple(LosslessVerdict.from_dict(v, near_tie) for v in entries("lossless"))
    acceptance = tuple(Acceptance.from_dict(a) for a in entries("acceptance"))
    kv = tuple(KvAgreement.from_dict(k) for k in entries("kv"))
    errors = [_printable(e) for e in entries("errors")]
    if isinstance(report.get("error"), str):
        errors.append(_printable(report["error"]))
    released = {a.label: a for a in release.acceptance} if release else {}
    problems = [p for a in acceptance if (p := gate(a, released.get(a.label), tolerance))]
    if kv_floor is not None:
        problems += [f"{k.label}: top-1 agreement {k.rate * 100:.1f}% is under {kv_floor * 100:g}%"
                     for k in kv if k.rate is not None and k.rate < kv_floor]
    return WorkloadVerdict(lossless, acceptance, kv, tuple(errors), tuple(problems))


def from_record(record: object) -> WorkloadVerdict:
    """A verdict recorded in a lock (builds[KEY].workload) or a --json file, judged again: the release's figures
    for the acceptance gate."""
    return judge(record)
