"""`buildkit bench`: measure a llama-server the way users do, and compare two measurements.

The default protocol is the one people use by hand to judge a fork image: the same prompt (an
HTML Space Invaders game) three times, one run after another, `max_tokens=800` with llama-server's
`ignore_eos` (every run generates the full length, so runs compare), temperature 0 and thinking
disabled through `chat_template_kwargs`. Requests go to the OpenAI-compatible
`/v1/chat/completions` endpoint, streaming, so the client clock sees what a user sees.

Per run: generated tokens, wall time, tokens/s at the client, time to the first token, the
server's own `timings` (prompt and generation tokens/s) and speculative-decoding acceptance
(`timings.draft_n` / `draft_n_accepted`) when the server reports them. The summary has mean, min
and max, and a degradation flag when the last run is markedly slower than the first (the
3.40 -> 1.52 -> 0.97 tokens/s pattern).

A failed run (server down, time-out, malformed answer, HTTP error) ends the benchmark with one
message; the runs done before it are kept in the report.

`served(spec)` starts a llama-server container (docker-py) for `bench --image`, waits for
/health, and always stops and removes it, also on Ctrl-C, SIGTERM and failures.
"""

from __future__ import annotations

import http.client
import json
import math
import signal
import socket
import statistics
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import urlsplit

from buildkit import __version__
from buildkit.core.deadline import Deadline, shut
from buildkit.core.errors import BenchError, LockError

DEFAULT_PROMPT = (
    "Write a complete Space Invaders game in a single HTML file with inline CSS and JavaScript: "
    "a player cannon that moves with the arrow keys and fires with the space bar, rows of invaders "
    "that march sideways and step down, shields, a score, three lives and a game-over screen."
)
DEFAULT_RUNS = 3
DEFAULT_MAX_TOKENS = 800
DEFAULT_TIMEOUT = 600.0
DEGRADATION_THRESHOLD = 0.7  # last run slower than this fraction of the first: degraded
REPORT_VERSION = 1
BENCH_LABEL = "org.llama-buildkit.bench"  # on every container bench starts


@dataclass(frozen=True)
class Protocol:
    prompt: str = DEFAULT_PROMPT
    runs: int = DEFAULT_RUNS
    max_tokens: int = DEFAULT_MAX_TOKENS
    concurrency: int = 1
    timeout: float = DEFAULT_TIMEOUT  # seconds, for each request from sending it to its last byte
    temperature: float = 0.0
    ignore_eos: bool = True
    enable_thinking: bool = False
    cache_prompt: bool = False  # off: every run processes the whole prompt, so prompt tok/s compare too
    degradation_threshold: float = DEGRADATION_THRESHOLD

    def check(self) -> "Protocol":
        for name in ("runs", "max_tokens", "concurrency"):
            if getattr(self, name) < 1:
                raise BenchError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if not self.timeout > 0:
            raise BenchError(f"--timeout must be more than 0 seconds, got {self.timeout:g}")
        if not 0 < self.degradation_threshold <= 1:
            raise BenchError(f"the degradation threshold must be in (0, 1], got {self.degradation_threshold:g}")
        if not self.prompt.strip():
            raise BenchError("the prompt is empty")
        return self

    def body(self) -> dict:
        """The /v1/chat/completions request of every run."""
        return {
            "messages": [{"role": "user", "content": self.prompt}],
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": self.ignore_eos,
            "cache_prompt": self.cache_prompt,
            "chat_template_kwargs": {"enable_thinking": self.enable_thinking},
        }


# ----------------------------------------------------------------------------------------- results


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

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "requests"}
        out["acceptance"] = self.acceptance
        if len(self.requests) > 1:
            out["requests"] = [dict(asdict(r), client_tps=r.client_tps) for r in self.requests]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "RunResult":
        names = {f.name for f in fields(cls)} - {"requests"}
        return cls(**{k: data.get(k) for k in names})


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def combine(run: int, requests: list[RequestResult]) -> RunResult:
    def present(name: str) -> list:
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


def stats(values: list[float | None]) -> dict | None:
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


def summarize(runs: list[RunResult], runs_asked: int, threshold: float = DEGRADATION_THRESHOLD) -> dict:
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
    target: dict  # url, image, image_id, model, model_draft, profile, server_args, gpus, server_build
    protocol: Protocol
    runs: list[RunResult] = field(default_factory=list)
    error: str | None = None
    interrupted: bool = False
    started: str = field(default_factory=lambda: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))

    @property
    def label(self) -> str:
        return self.target.get("image") or self.target.get("url") or "?"

    def summary(self) -> dict:
        return summarize(self.runs, self.protocol.runs, self.protocol.degradation_threshold)

    def to_dict(self) -> dict:
        return {
            "report_version": REPORT_VERSION,
            "tool": f"buildkit {__version__}",
            "started": self.started,
            "target": self.target,
            "protocol": asdict(self.protocol),
            "runs": [r.to_dict() for r in self.runs],
            "summary": self.summary(),
            "error": self.error,
            "interrupted": self.interrupted,
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "report") -> "BenchReport":
        try:
            if data.get("report_version") != REPORT_VERSION:
                raise ValueError(f"report_version {data.get('report_version')!r} is not {REPORT_VERSION}")
            names = {f.name for f in fields(Protocol)}
            protocol = Protocol(**{k: v for k, v in data["protocol"].items() if k in names})
            runs = [RunResult.from_dict(r) for r in data["runs"]]
            return cls(target=dict(data["target"]), protocol=protocol, runs=runs, error=data.get("error"),
                       interrupted=bool(data.get("interrupted")), started=data.get("started", ""))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BenchError(f"{where}: not a buildkit bench report ({exc})") from None


def load_report(path: Path) -> BenchReport:
    """A report written by `buildkit bench --json` or `--output`."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BenchError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise BenchError(f"{path}: cannot read a bench report: {exc}") from None
    if not isinstance(data, dict):
        raise BenchError(f"{path}: not a buildkit bench report (not a JSON object)")
    return BenchReport.from_dict(data, str(path))


# ----------------------------------------------------------------------------------------- client


class StreamError(Exception):
    """One request failed; the message is one line."""


@dataclass(frozen=True)
class Endpoint:
    base: str  # scheme://host:port[/prefix]
    scheme: str
    host: str
    port: int
    prefix: str

    @property
    def chat_path(self) -> str:
        return self.prefix + "/v1/chat/completions"

    @property
    def chat_url(self) -> str:
        return self.base + "/v1/chat/completions"


def endpoint(url: str) -> Endpoint:
    """The server of a URL given as host:port, http://host:port, .../v1 or .../v1/chat/completions."""
    parsed = urlsplit(url if "://" in url else f"http://{url}")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise BenchError(f"--url {url!r}: expected http://HOST:PORT (an OpenAI-compatible server)")
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        raise BenchError(f"--url {url!r}: the port is not a number") from None
    path = parsed.path.rstrip("/")
    for suffix in ("/v1/chat/completions", "/chat/completions", "/v1"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    host = parsed.hostname
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return Endpoint(base=f"{parsed.scheme}://{netloc}{path}", scheme=parsed.scheme, host=host, port=port,
                    prefix=path)


def _error_text(body: bytes) -> str:
    """The message of an error body (OpenAI/llama-server JSON, else the text), on one line."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
        err = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(err, dict):
            text = str(err.get("message") or err)
        elif isinstance(err, str):
            text = err
    except ValueError:
        pass
    text = " ".join(text.split())
    return (text[:200] + "...") if len(text) > 200 else (text or "(empty body)")


def _snippet(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    return repr(text[:80] + ("..." if len(text) > 80 else ""))


def _stream_error(exc: Exception, ep: "Endpoint", received: str) -> StreamError:
    """The one line for a failed request (not a time-out)."""
    if isinstance(exc, ConnectionRefusedError):
        return StreamError(f"cannot connect to {ep.base}: connection refused (is the server running?)")
    if isinstance(exc, (http.client.RemoteDisconnected, http.client.IncompleteRead, ConnectionResetError,
                        BrokenPipeError)):
        return StreamError(f"the server closed the connection after {received} without finishing "
                           f"(did it crash?)")
    if isinstance(exc, http.client.HTTPException):
        return StreamError(f"malformed HTTP answer from {ep.chat_url}: {type(exc).__name__} {exc}"[:300])
    if isinstance(exc, OSError):
        return StreamError(f"cannot talk to {ep.base}: {exc.strerror or exc}")
    return StreamError(f"malformed answer from {ep.chat_url}: {type(exc).__name__}")


def stream_chat(ep: Endpoint, body: dict, timeout: float) -> RequestResult:
    """Send one streaming chat completion and read it to the end; StreamError on any failure."""
    start = time.perf_counter()
    deadline = start + timeout
    conn_cls = http.client.HTTPSConnection if ep.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(ep.host, ep.port, timeout=timeout)
    chunks = 0
    ttft = finish = usage = timings = None
    build = ""
    done = False

    def received() -> str:
        return f"{chunks} token{'s' if chunks != 1 else ''} received"

    # the deadline is for the whole request: a server trickling bytes never trips a socket time-out
    watchdog = Deadline(timeout, lambda: shut(conn.sock))
    watchdog.__enter__()
    try:
        conn.request("POST", ep.chat_path, body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise StreamError(f"HTTP {resp.status} {resp.reason} from {ep.chat_url}: {_error_text(resp.read(65536))}")
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise socket.timeout()
            if conn.sock is not None:
                conn.sock.settimeout(remaining)
            raw = resp.readline(1 << 22)
            if watchdog.expired:
                raise socket.timeout()
            if not raw:
                break
            line = raw.strip()
            if not line or line.startswith(b":") or line.startswith(b"event:") or line.startswith(b"id:"):
                continue
            if not line.startswith(b"data:"):
                raise StreamError(f"the server's answer is not an event stream: {_snippet(line)}")
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            try:
                data = json.loads(payload)
            except ValueError:
                raise StreamError(f"invalid JSON in the response stream after {received()}: "
                                  f"{_snippet(payload)}") from None
            if not isinstance(data, dict):
                raise StreamError(f"invalid JSON in the response stream after {received()}: "
                                  f"expected an object, got {_snippet(payload)}")
            if "error" in data:
                raise StreamError(f"the server reported an error after {received()}: "
                                  f"{_error_text(json.dumps(data).encode())}")
            choices = data.get("choices")
            if not isinstance(choices, list):
                raise StreamError(f"malformed chunk in the response stream (no choices list): {_snippet(payload)}")
            build = build or str(data.get("system_fingerprint") or "")
            for choice in choices:
                if not isinstance(choice, dict):
                    raise StreamError(f"malformed chunk in the response stream: {_snippet(payload)}")
                delta = choice.get("delta") or {}
                if isinstance(delta, dict) and (delta.get("content") or delta.get("reasoning_content")):
                    chunks += 1
                    if ttft is None:
                        ttft = time.perf_counter() - start
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
            if isinstance(data.get("usage"), dict):
                usage = data["usage"]
            if isinstance(data.get("timings"), dict):
                timings = data["timings"]
    except StreamError:
        raise
    except Exception as exc:
        if not watchdog.expired and not isinstance(exc, (socket.timeout, TimeoutError)):
            raise _stream_error(exc, ep, received()) from None
        raise StreamError(f"no complete answer from {ep.chat_url} within {timeout:g}s (--timeout); "
                          f"{received()}") from None
    finally:
        watchdog.__exit__()
        conn.close()
    wall = time.perf_counter() - start

    if not done and finish is None:
        raise StreamError(f"the stream ended after {received()} without a finish reason (did the server crash?)")

    def num(src: dict | None, key: str, kind=float):
        value = (src or {}).get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return kind(value)
        return None

    if num(usage, "completion_tokens", int) is not None:
        tokens, source = num(usage, "completion_tokens", int), "usage"
    elif num(timings, "predicted_n", int) is not None:
        tokens, source = num(timings, "predicted_n", int), "timings"
    else:
        tokens, source = chunks, "chunks"
    prompt_tokens = num(usage, "prompt_tokens", int)
    if prompt_tokens is None:
        prompt_tokens = num(timings, "prompt_n", int)
    return RequestResult(
        tokens=tokens, tokens_source=source, chunks=chunks, wall_s=wall, ttft_s=ttft, finish_reason=finish,
        prompt_tokens=prompt_tokens, prompt_tps=num(timings, "prompt_per_second"),
        predicted_tps=num(timings, "predicted_per_second"), draft_n=num(timings, "draft_n", int),
        draft_accepted=num(timings, "draft_n_accepted", int), server_build=build)


def measure_run(ep: Endpoint, protocol: Protocol, run: int) -> RunResult:
    body = protocol.body()
    if protocol.concurrency == 1:
        return combine(run, [stream_chat(ep, body, protocol.timeout)])
    results: list[RequestResult | None] = [None] * protocol.concurrency
    errors: list[StreamError] = []

    def one(i: int) -> None:
        try:
            results[i] = stream_chat(ep, body, protocol.timeout)
        except StreamError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(protocol.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():  # short joins keep Ctrl-C responsive
            t.join(0.2)
    if errors:
        raise StreamError(f"{errors[0]} ({len(errors)} of {protocol.concurrency} concurrent requests failed)"
                          if len(errors) > 1 else str(errors[0]))
    return combine(run, [r for r in results if r is not None])


def run_bench(url: str, protocol: Protocol, target: dict | None = None,
              on_run: Callable[[RunResult], None] | None = None) -> BenchReport:
    """Run the protocol against the server at url. Failures end it: report.error, runs so far kept."""
    ep = endpoint(url)
    report = BenchReport(target={"url": ep.base, **(target or {})}, protocol=protocol.check())
    for i in range(1, protocol.runs + 1):
        try:
            try:
                result = measure_run(ep, protocol, i)
            except StreamError as exc:
                report.error = f"run {i} of {protocol.runs}: {exc}"
                break
            report.runs.append(result)
            if result.requests and result.requests[0].server_build:
                report.target.setdefault("server_build", result.requests[0].server_build)
            if on_run is not None:
                on_run(result)
        except KeyboardInterrupt:
            report.error = f"interrupted during run {len(report.runs) + 1} of {protocol.runs}"
            report.interrupted = True
            break
    return report


# ----------------------------------------------------------------------------------------- output


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
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                     for r in rows)


def degradation_line(summary: dict, runs: list[RunResult]) -> str:
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
    if report.error:
        lines.append(f"stopped: {report.error} ({len(report.runs)} of {p.runs} runs done, kept)")
    return "\n".join(lines)


COMPARE_ROWS = (
    ("tok/s mean", "client_tps", "mean", _f),
    ("tok/s min", "client_tps", "min", _f),
    ("tok/s max", "client_tps", "max", _f),
    ("gen tok/s mean (server)", "predicted_tps", "mean", _f),
    ("prompt tok/s mean (server)", "prompt_tps", "mean", _f),
    ("wall s mean", "wall_s", "mean", _f),
    ("draft acceptance mean", "acceptance", "mean", _pct),
)


def compare(base: BenchReport, new: BenchReport) -> list[dict]:
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


def format_compare(base: BenchReport, new: BenchReport, base_name: str = "before", new_name: str = "now") -> str:
    fmt = {label: f for label, _, _, f in COMPARE_ROWS}
    rows = [["", base_name, new_name, "ratio"], ["", base.label, new.label, "now/before"]]
    for row in compare(base, new):
        f = fmt.get(row["metric"])
        if f is None:
            def f(v):
                return "-" if v is None else (("yes" if v else "no") if isinstance(v, bool) else
                                              (f"{v:.2f}" if isinstance(v, float) else str(v)))
        rows.append([row["metric"], f(row["base"]), f(row["new"]),
                     "-" if row["ratio"] is None else f"{row['ratio']:.2f}x"])
    text = _table(rows)
    differences = protocol_differences(base, new)
    if differences:
        text += "\nnote: the two benches used different protocols: " + ", ".join(differences)
    return text


# ----------------------------------------------------------------------------------------- lock


def find_lock_entry(builds: dict, image_ref: str, image_id: str | None = None) -> str | None:
    """The key of the lock entry describing image_ref (by tag, else by image id or digest)."""
    wanted = {image_ref, image_ref.removeprefix("docker.io/"), image_ref.removeprefix("docker.io/library/")}
    for key, entry in builds.items():
        tags = set(entry.get("tags") or ()) | set(entry.get("pushed") or ())
        if wanted & tags:
            return key
    if image_id:
        for key, entry in builds.items():
            if image_id in (entry.get("image_id"), entry.get("image_digest")):
                return key
    return None


def attach_to_lock(lock_path: Path, key: str, report: BenchReport) -> None:
    """builds[key]["bench"] = the report, written atomically under the lock's writer lock."""
    from buildkit.release.lock import update_lock

    def change(data: dict) -> None:
        if key not in data["builds"]:
            raise LockError(f"{Path(lock_path).resolve()} has no entry {key!r}")
        data["builds"][key]["bench"] = report.to_dict()
    update_lock(lock_path, change)


# ----------------------------------------------------------------------------------------- container


@dataclass(frozen=True)
class Served:
    url: str
    container_id: str
    container_name: str
    image_id: str
    startup_s: float


def _last_log_line(container) -> str:
    try:
        text = container.logs(tail=40).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001  (the container may be gone)
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:  # the first error line names the cause; the later ones say that it stopped
        low = ln.lower()
        if "error" in low or "failed" in low or "exception" in low:
            return ln
    return lines[-1] if lines else ""


def _health(url: str) -> int | None:
    ep = endpoint(url)
    conn = http.client.HTTPConnection(ep.host, ep.port, timeout=2)
    try:
        with Deadline(2, lambda: shut(conn.sock)) as deadline:  # 2 s for the whole probe
            conn.request("GET", ep.prefix + "/health")
            resp = conn.getresponse()
            resp.read(1 << 16)
        return None if deadline.expired else resp.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def _check_running(container) -> None:
    """BenchError with the server's own error line when the container has stopped."""
    if container.status in ("exited", "dead"):
        code = container.attrs.get("State", {}).get("ExitCode")
        last = _last_log_line(container)
        raise BenchError(f"the server container exited (code {code}) before it was ready"
                         + (f": {last}" if last else ""))


def wait_ready(url: str, container, timeout: float, interval: float = 0.25) -> float:
    """Seconds until /health says 200; BenchError when the container exits or time runs out."""
    from buildkit.core.deadline import say_waiting

    start = time.monotonic()
    noticed = False
    while True:
        container.reload()
        _check_running(container)
        if _health(url) == 200:
            return time.monotonic() - start
        if not noticed and time.monotonic() - start > 10:
            say_waiting(f"waiting for the server to answer {url}/health (up to {timeout:g} s, --startup-timeout)")
            noticed = True
        if time.monotonic() - start > timeout:
            last = _last_log_line(container)
            raise BenchError(f"the server did not answer {url}/health within {timeout:g}s (--startup-timeout)"
                             + (f"; last log line: {last}" if last else ""))
        time.sleep(interval)


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt like Ctrl-C, so the container is removed either way."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextmanager
def _no_interrupts() -> Iterator[None]:
    """Ignore Ctrl-C and SIGTERM while cleaning up (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def docker_client():
    import docker

    try:
        client = docker.from_env()
        client.ping()
        return client
    except Exception as exc:  # noqa: BLE001  (docker-py raises many kinds)
        raise BenchError(f"cannot reach the Docker engine: {exc}") from None


def local_image_id(client, ref: str) -> str:
    import docker

    try:
        return client.images.get(ref).id
    except docker.errors.ImageNotFound:
        raise BenchError(f"image {ref} is not in the local engine (bench never pulls; build or pull it first)") \
            from None
    except docker.errors.APIError as exc:
        raise BenchError(f"cannot inspect image {ref}: {exc.explanation or exc}") from None


@contextmanager
def served(spec, startup_timeout: float = 300.0, log: Callable[[str], None] | None = None) -> Iterator[Served]:
    """Start spec's container (model read-only, port on 127.0.0.1), wait for /health, yield, then always
    stop and remove it: on success, failure, Ctrl-C and SIGTERM."""
    import docker

    from buildkit.plan.profiles import CONTAINER_PORT, container_kwargs

    log = log or (lambda msg: None)
    client = docker_client()
    image_id = local_image_id(client, spec.image)
    kwargs = container_kwargs(spec)
    name = kwargs.setdefault("name", f"buildkit-bench-{uuid.uuid4().hex[:10]}")
    kwargs["labels"] = {**kwargs.get("labels", {}), BENCH_LABEL: "1"}
    container = None
    with _sigterm_as_interrupt():
        try:
            try:
                container = client.containers.create(**kwargs)
                container.start()
            except docker.errors.APIError as exc:
                raise BenchError(f"cannot start a container of {spec.image}: {exc.explanation or exc}") from None
            container.reload()
            try:
                host_port = container.ports[f"{CONTAINER_PORT}/tcp"][0]["HostPort"]
            except (KeyError, IndexError, TypeError):
                _check_running(container)
                status = container.status
                last = _last_log_line(container)
                raise BenchError(f"the server container has no published port (status {status})"
                                 + (f": {last}" if last else "")) from None
            url = f"http://127.0.0.1:{host_port}"
            log(f"started container {name} ({spec.image}) on {url}")
            startup = wait_ready(url, container, startup_timeout)
            log(f"server ready after {startup:.1f}s")
            yield Served(url=url, container_id=container.id, container_name=name, image_id=image_id,
                         startup_s=startup)
        finally:
            if container is not None:
                with _no_interrupts():
                    try:
                        container.stop(timeout=5)
                    except docker.errors.APIError:
                        pass
                    try:
                        container.remove(force=True)
                    except docker.errors.NotFound:
                        pass
                    except docker.errors.APIError as exc:
                        log(f"warning: could not remove container {name}: {exc.explanation or exc}")
                    else:
                        log(f"removed container {name}")
