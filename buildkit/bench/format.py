"""Benchmark reports and comparisons as text tables."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

from buildkit.bench.protocol import Protocol
from buildkit.bench.results import BenchReport, RunResult


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


RUN_COLUMNS = ("run", "tokens", "wall s", "tok/s", "ttft s", "prompt tok/s", "gen tok/s", "draft acc")


def run_row(run: RunResult) -> list[str]:
    draft = "-" if run.draft_n is None else f"{run.draft_accepted or 0}/{run.draft_n} {_pct(run.acceptance)}"
    return [str(run.run), str(run.tokens), _f(run.wall_s), _f(run.client_tps), _f(run.ttft_s, 3),
            _f(run.prompt_tps), _f(run.predicted_tps), draft]


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
                     for r in rows)


def degradation_line(summary: dict[str, Any], runs: list[RunResult]) -> str:
    ratio = summary["last_vs_first"]
    if ratio is None:
        return "degradation: n/a (needs two runs)"
    path = " -> ".join(f"{r.client_tps:.2f}" for r in runs)
    if summary["degraded"]:
        return (f"degradation: DEGRADED, the last run ran at {ratio:.2f}x the first "
                f"({path} tok/s; threshold {summary['degradation_threshold']:g}x)")
    return f"degradation: none (last/first {ratio:.2f}x: {path} tok/s)"


def format_report(report: BenchReport) -> str:
    """The runs table and the summary, as printed."""
    p = report.protocol
    lines = [f"bench {report.label}: {p.runs} run{'s' if p.runs != 1 else ''} x {p.concurrency} request"
             f"{'s' if p.concurrency != 1 else ''}, max_tokens {p.max_tokens}, ignore_eos {str(p.ignore_eos).lower()}, "
             f"temperature {p.temperature:g}"]
    if report.runs:
        lines.append(_table([list(RUN_COLUMNS)] + [run_row(r) for r in report.runs]))
        s = report.summary()
        rows = [["", "tok/s", "gen tok/s", "prompt tok/s", "wall s", "draft acc"]]
        for what in ("mean", "min", "max"):
            rows.append([what] + [_f((s[k] or {}).get(what)) for k in ("client_tps", "predicted_tps", "prompt_tps",
                                                                       "wall_s")]
                        + [_pct((s["acceptance"] or {}).get(what))])
        lines.append(_table(rows))
        lines.append(degradation_line(s, report.runs))
    else:
        lines.append("no run completed")
    for bad in report.invalid:
        lines.append(f"invalid: run {bad['run']}: {bad['reason']} (left out of the figures)")
    if report.error:
        lines.append(f"stopped: {report.error} ({len(report.runs)} of {p.runs} runs done, kept)")
    return "\n".join(lines)


def invalid_text(report: BenchReport) -> str:
    """What a bench with invalid runs says of them, on one line."""
    first = report.invalid[0]
    return (f"{len(report.invalid)} of {report.protocol.runs} runs invalid, the first: run {first['run']}: "
            f"{first['reason']}")


COMPARE_ROWS = (
    ("tok/s mean", "client_tps", "mean", _f),
    ("tok/s min", "client_tps", "min", _f),
    ("tok/s max", "client_tps", "max", _f),
    ("gen tok/s mean (server)", "predicted_tps", "mean", _f),
    ("prompt tok/s mean (server)", "prompt_tps", "mean", _f),
    ("wall s mean", "wall_s", "mean", _f),
    ("draft acceptance mean", "acceptance", "mean", _pct),
)


def compare(base: BenchReport, new: BenchReport) -> list[dict[str, Any]]:
    """Rows of base versus new: value of each and new/base."""
    sb, sn = base.summary(), new.summary()
    rows = []
    for label, key, what, _ in COMPARE_ROWS:
        b, n = (sb[key] or {}).get(what), (sn[key] or {}).get(what)
        rows.append({"metric": label, "key": f"{key}.{what}", "base": b, "new": n,
                     "ratio": (n / b) if (b and n is not None) else None})
    rows.append({"metric": "last/first", "key": "last_vs_first", "base": sb["last_vs_first"],
                 "new": sn["last_vs_first"], "ratio": None})
    rows.append({"metric": "degraded", "key": "degraded", "base": sb["degraded"], "new": sn["degraded"],
                 "ratio": None})
    rows.append({"metric": "runs done", "key": "runs_done", "base": sb["runs_done"], "new": sn["runs_done"],
                 "ratio": None})
    return rows


def protocol_differences(base: BenchReport, new: BenchReport) -> list[str]:
    """What differs between the two protocols (the comparison is then of different things)."""
    out = []
    for f in fields(Protocol):
        if f.name == "degradation_threshold":
            continue
        b, n = getattr(base.protocol, f.name), getattr(new.protocol, f.name)
        if b != n:
            out.append(f"{f.name} {'(differs)' if f.name == 'prompt' else f'{b!r} vs {n!r}'}")
    return out


def _plain(v: object) -> str:
    """A compared value without a format of its row: yes/no, 2 decimals, or as it is."""
    return "-" if v is None else (("yes" if v else "no") if isinstance(v, bool) else
                                  (f"{v:.2f}" if isinstance(v, float) else str(v)))


def format_compare(base: BenchReport, new: BenchReport, base_name: str = "before", new_name: str = "now") -> str:
    fmt: dict[str, Callable[[Any], str]] = {label: f for label, _, _, f in COMPARE_ROWS}
    rows = [["", base_name, new_name, "ratio"], ["", base.label, new.label, "now/before"]]
    for row in compare(base, new):
        f = fmt.get(row["metric"], _plain)
        rows.append([row["metric"], f(row["base"]), f(row["new"]),
                     "-" if row["ratio"] is None else f"{row['ratio']:.2f}x"])
    text = _table(rows)
    differences = protocol_differences(base, new)
    if differences:
        text += "\nnote: the two benches used different protocols: " + ", ".join(differences)
    return text
