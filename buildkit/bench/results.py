"""Results of a benchmark: per request, per run, the statistics over runs, and the report (JSON)."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildkit import __version__
from buildkit.bench.figures import Impossible, run_figures
from buildkit.bench.protocol import DEGRADATION_THRESHOLD, REPORT_VERSION, Protocol
from buildkit.core.boundedread import MiB, read_regular
from buildkit.core.errors import BenchError
from buildkit.core.savefile import write_or_keep

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


@dataclass(frozen=True)
class RequestResult:
    """One streamed chat completion."""

    tokens: int  # generated tokens: usage.completion_tokens, else timings.predicted_n, else content chunks
    tokens_source: str  # usage | timings | chunks
    chunks: int  # content chunks received
    wall_s: float  # from sending the request to the last byte
    ttft_s: float | None  # to the first content chunk
    finish_reason: str | None
    prompt_tokens: int | None = None
    prompt_tps: float | None = None  # server timings.prompt_per_second
    predicted_tps: float | None = None  # server timings.predicted_per_second
    draft_n: int | None = None
    draft_accepted: int | None = None
    server_build: str = ""  # system_fingerprint, llama.cpp's build info

    @property
    def client_tps(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0


@dataclass(frozen=True)
class RunResult:
    """One run: `concurrency` identical requests sent at once."""

    run: int
    tokens: int
    wall_s: float
    client_tps: float  # all tokens of the run / its wall time
    ttft_s: float | None
    finish_reason: str | None
    prompt_tokens: int | None
    prompt_tps: float | None  # mean over the run's requests
    predicted_tps: float | None  # mean over the run's requests (per stream)
    draft_n: int | None
    draft_accepted: int | None
    requests: tuple[RequestResult, ...] = ()

    @property
    def acceptance(self) -> float | None:
        if not self.draft_n:
            return None
        return (self.draft_accepted or 0) / self.draft_n

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "requests"}
        out["acceptance"] = self.acceptance
        if len(self.requests) > 1:
            out["requests"] = [dict(asdict(r), client_tps=r.client_tps) for r in self.requests]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        names = {f.name for f in fields(cls)} - {"requests"}
        values: dict[str, Any] = {k: data.get(k) for k in names}
        return cls(**values)


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def combine(run: int, requests: list[RequestResult]) -> RunResult:
    def present(name: str) -> list[Any]:  # the numbers of one field, where the requests have it
        return [getattr(r, name) for r in requests if getattr(r, name) is not None]

    tokens = sum(r.tokens for r in requests)
    wall = max(r.wall_s for r in requests)
    drafts, accepted = present("draft_n"), present("draft_accepted")
    return RunResult(
        run=run, tokens=tokens, wall_s=wall, client_tps=tokens / wall if wall > 0 else 0.0,
        ttft_s=_mean(present("ttft_s")), finish_reason=requests[0].finish_reason,
        prompt_tokens=requests[0].prompt_tokens, prompt_tps=_mean(present("prompt_tps")),
        predicted_tps=_mean(present("predicted_tps")), draft_n=sum(drafts) if drafts else None,
        draft_accepted=sum(accepted) if accepted else None, requests=tuple(requests))


def stats(values: list[float | None]) -> dict[str, Any] | None:
    """mean, min and max of the values that are there (None when there is none)."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"mean": statistics.fmean(present), "min": min(present), "max": max(present)}


def degradation(runs: list[RunResult], threshold: float = DEGRADATION_THRESHOLD) -> tuple[float | None, bool]:
    """(last run's client tokens/s / the first's, degraded?); needs two runs."""
    if len(runs) < 2 or not runs[0].client_tps:
        return None, False
    ratio = runs[-1].client_tps / runs[0].client_tps
    return ratio, ratio < threshold


def summarize(runs: list[RunResult], runs_asked: int, threshold: float = DEGRADATION_THRESHOLD) -> dict[str, Any]:
    ratio, degraded = degradation(runs, threshold)
    return {
        "runs_done": len(runs),
        "runs_asked": runs_asked,
        "tokens": sum(r.tokens for r in runs),
        "client_tps": stats([r.client_tps for r in runs]),
        "predicted_tps": stats([r.predicted_tps for r in runs]),
        "prompt_tps": stats([r.prompt_tps for r in runs]),
        "wall_s": stats([r.wall_s for r in runs]),
        "ttft_s": stats([r.ttft_s for r in runs]),
        "acceptance": stats([r.acceptance for r in runs]),
        "last_vs_first": ratio,
        "degraded": degraded,
        "degradation_threshold": threshold,
    }


@dataclass
class BenchReport:
    target: dict[str, Any]  # url, image, image_id, model, model_draft, profile, server_args, gpus, server_build
    protocol: Protocol
    runs: list[RunResult] = field(default_factory=list)  # the valid runs
    invalid: list[dict[str, Any]] = field(default_factory=list)  # {"run": N, "reason": ...}: impossible figures
    error: str | None = None
    interrupted: bool = False
    started: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))

    @property
    def label(self) -> str:
        return self.target.get("image") or self.target.get("url") or "?"

    def summary(self) -> dict[str, Any]:
        return summarize(self.runs, self.protocol.runs, self.protocol.degradation_threshold)

    def to_dict(self) -> dict[str, Any]:
        return {
            "report_version": REPORT_VERSION,
            "tool": f"buildkit {__version__}",
            "started": self.started,
            "target": self.target,
            "protocol": asdict(self.protocol),
            "runs": [r.to_dict() for r in self.runs],
            "summary": self.summary(),
            "invalid": self.invalid,
            "error": self.error,
            "interrupted": self.interrupted,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "report") -> BenchReport:
        """A report read back, checked key by key (a hand-edited or foreign one is one BenchError line)."""
        try:
            return cls._from_dict(data, where)
        except ValueError as exc:
            raise BenchError(f"{where}: not a buildkit bench report ({exc})") from None

    @classmethod
    def _from_dict(cls, data: object, where: str) -> BenchReport:
        if not isinstance(data, dict) or data.get("report_version") != REPORT_VERSION:
            got = data.get("report_version") if isinstance(data, dict) else data
            raise ValueError(f"report_version {str(got)[:40]} is not {REPORT_VERSION}")
        protocol = Protocol(**_typed(Protocol, data.get("protocol"), "protocol", defaults=True))
        runs, target = data.get("runs"), data.get("target")
        if not isinstance(runs, list):
            raise ValueError(f"runs must be a list, got {_kind(runs)}")
        if not isinstance(target, dict) or not all(isinstance(target.get(k), (str, type(None)))
                                                   for k in ("image", "url")):
            raise ValueError("target must be an object whose image and url are strings")
        error, started, interrupted = data.get("error"), data.get("started", ""), data.get("interrupted", False)
        if not isinstance(error, (str, type(None))) or not isinstance(started, str) \
                or not isinstance(interrupted, bool):
            raise ValueError("error and started must be strings, interrupted true or false")
        checked = []
        for i, run in enumerate(runs):
            try:  # sane as figures (bench/figures.py), as a fresh run's are, and then of the right types
                if isinstance(run, dict):
                    run_figures(run, protocol.max_tokens, protocol.concurrency)
            except Impossible as exc:
                raise BenchError(f"{where}: runs[{i}] has impossible figures: {exc}") from None
            checked.append(RunResult(**_typed(RunResult, run, f"runs[{i}]", defaults=False)))
        invalid = data.get("invalid") or []
        if not isinstance(invalid, list) or not all(
                isinstance(r, dict) and isinstance(r.get("run"), int) and isinstance(r.get("reason"), str)
                for r in invalid):
            raise ValueError("invalid must be a list of {run, reason} objects")
        return cls(target=dict(target), protocol=protocol, error=error, started=started, interrupted=interrupted,
                   runs=checked, invalid=list(invalid))


MAX_FIGURE = 1e12  # tokens, seconds, tokens/s: a number in a report is from 0 to this
_KINDS = {"int": ((int,), "a whole number"), "float": ((int, float), "a number"), "str": ((str,), "a string"),
          "bool": ((bool,), "true or false")}


def _kind(value: object) -> str:
    return type(value).__name__ if value is not None else "null"


def _typed(cls: type[DataclassInstance], data: object, where: str, *, defaults: bool) -> dict[str, Any]:
    """data's fields of dataclass cls, checked against their annotations (`int`, `float | None`, ...): ValueError
    naming the first that is not. An absent field takes its default (defaults) or None (when it may be None)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be an object, got {_kind(data)}")
    out: dict[str, Any] = {}
    for f in fields(cls):
        kind, _, optional = f.type.partition(" | ")
        if kind not in _KINDS or (f.name not in data and defaults):
            continue
        value: Any = data.get(f.name)  # a JSON value, checked below
        if value is None and optional:
            out[f.name] = None
            continue
        types, want = _KINDS[kind]
        ok = isinstance(value, types) and (kind == "bool") == isinstance(value, bool)
        if ok and kind in ("int", "float") and not 0 <= value <= MAX_FIGURE:  # nan and inf are not
            ok, want = False, f"{want} from 0 to {MAX_FIGURE:g}"
        if not ok:
            raise ValueError(f"{where}.{f.name} must be {want}, got {_kind(value)} {str(value)[:40]}")
        out[f.name] = value
    return out


def save_report(path: Path, report: BenchReport, doc: dict[str, Any] | None = None) -> str:
    """Write report as JSON to path (doc: the report's dict with what `bench` adds to it, its comparison and
    gate): "" when done, else one line saying where it is instead (core/savefile.py)."""
    return write_or_keep(path, json.dumps(doc if doc is not None else report.to_dict(), indent=2) + "\n",
                         "the report")


def load_report(path: Path) -> BenchReport:
    """A report written by `buildkit bench --json` or `--output`."""
    try:
        data = json.loads(read_regular(path, 64 * MiB))  # a FIFO or device: refused, not waited on
    except FileNotFoundError:
        raise BenchError(f"{path}: no such file") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise BenchError(f"{path}: cannot read a bench report: {str(exc)[:200] or 'nested too deeply'}") from None
    if not isinstance(data, dict):
        raise BenchError(f"{path}: not a buildkit bench report (not a JSON object)")
    return BenchReport.from_dict(data, str(path))
