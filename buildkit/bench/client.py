"""The SSE client: one streamed /v1/chat/completions request measured, runs of them, the benchmark."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit
from typing import Any

from buildkit.bench.figures import Impossible, request_figures
from buildkit.bench.protocol import Protocol
from buildkit.bench.results import BenchReport, RequestResult, RunResult, combine
from buildkit.core.deadline import Deadline, shut
from buildkit.core.interrupts import describe
from buildkit.core.errors import BenchError


class StreamError(Exception):
    """One request failed; the message is one line."""


class InvalidFigures(StreamError):
    """One request was answered, with figures that cannot be true (figures.py): its run is invalid."""


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


def error_text(body: bytes) -> str:
    """The message of an error body (OpenAI/llama-server JSON, else the text), on one line."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
        err = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(err, dict):
            text = str(err.get("message") or err)
        elif isinstance(err, str):
            text = err
    except (ValueError, RecursionError):
        pass
    text = " ".join(text.split())
    return (text[:200] + "...") if len(text) > 200 else (text or "(empty body)")


def _snippet(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    return repr(text[:80] + ("..." if len(text) > 80 else ""))


def _stream_error(exc: Exception, ep: Endpoint, received: str) -> StreamError:
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


def stream_chat(ep: Endpoint, body: dict[str, Any], timeout: float) -> RequestResult:
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
            raise StreamError(f"HTTP {resp.status} {resp.reason} from {ep.chat_url}: {error_text(resp.read(65536))}")
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise TimeoutError()
            if conn.sock is not None:
                conn.sock.settimeout(remaining)
            raw = resp.readline(1 << 22)
            if watchdog.expired:
                raise TimeoutError()
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
            except (ValueError, RecursionError):
                raise StreamError(f"invalid JSON in the response stream after {received()}: "
                                  f"{_snippet(payload)}") from None
            if not isinstance(data, dict):
                raise StreamError(f"invalid JSON in the response stream after {received()}: "
                                  f"expected an object, got {_snippet(payload)}")
            if "error" in data:
                raise StreamError(f"the server reported an error after {received()}: "
                                  f"{error_text(json.dumps(data).encode())}")
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
    except (OSError, http.client.HTTPException, ValueError, AttributeError) as exc:
        # what reading a stream that fails (or that the watchdog shuts under the reader) raises:
        # socket errors and time-outs, http.client's own errors, a bad chunk length or encoding
        # (ValueError), and a connection whose socket is already gone (AttributeError)
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
    try:
        figures = request_figures(usage, timings, chunks, body.get("max_tokens"))
    except Impossible as exc:
        raise InvalidFigures(f"the server's figures are impossible: {exc}") from None
    return RequestResult(wall_s=wall, ttft_s=ttft, finish_reason=finish, server_build=build, **figures)


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
        errors.sort(key=lambda e: isinstance(e, InvalidFigures))  # a failure first: the run did not finish
        raise type(errors[0])(f"{errors[0]} ({len(errors)} of {protocol.concurrency} concurrent requests failed)"
                              if len(errors) > 1 else str(errors[0]))
    return combine(run, [r for r in results if r is not None])


def run_bench(url: str, protocol: Protocol, target: dict[str, Any] | None = None,
              on_run: Callable[[RunResult], None] | None = None,
              on_invalid: Callable[[int, str], None] | None = None) -> BenchReport:
    """Run the protocol against the server at url. Failures end it: report.error, runs so far kept. A run
    with impossible figures is left out of report.runs and listed in report.invalid; the next one runs."""
    ep = endpoint(url)
    report = BenchReport(target={"url": ep.base, **(target or {})}, protocol=protocol.check())
    for i in range(1, protocol.runs + 1):
        try:
            try:
                result = measure_run(ep, protocol, i)
            except InvalidFigures as exc:
                report.invalid.append({"run": i, "reason": str(exc)})
                if on_invalid is not None:
                    on_invalid(i, str(exc))
                continue
            except StreamError as exc:
                report.error = f"run {i} of {protocol.runs}: {exc}"
                break
            report.runs.append(result)
            if result.requests and result.requests[0].server_build:
                report.target.setdefault("server_build", result.requests[0].server_build)
            if on_run is not None:
                on_run(result)
        except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP (core/interrupts.py)
            report.error = f"{describe(exc)} during run {len(report.runs) + 1} of {protocol.runs}"
            report.interrupted = True
            break
    return report
