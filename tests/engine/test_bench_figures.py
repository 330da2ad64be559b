"""`buildkit bench` against servers whose figures cannot be true (issue 22, class 2): a real server on
127.0.0.1 (tests/hostile.py, `answer` mode) streams a well-formed chat completion with the figures
of the issue. The run is invalid, the report says so, the exit code is 1, and neither the lock nor a
comparison gets it; a report with impossible figures is not compared either."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from buildkit.release.lockfile import LOCK_VERSION
from cliutil import cli_env, run_cli
from hostile import HostileServer

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def stream(texts: list[str], usage: dict | None = None, timings: dict | None = None) -> bytes:
    """A streamed chat completion: one chunk per text, then the finish with usage and timings. json.dumps
    writes what a lying server may send: NaN, and integers of any length."""
    chunks: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"content": t}}]} for t in texts]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}], "usage": usage,
                   "timings": timings})
    return HEAD + b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


FIVE = ["a", "b", "c", "d", "e"]
IMPOSSIBLE = {  # what the issue saw, each with the reason the run is invalid
    "negative": (stream(FIVE, {"completion_tokens": -535048}), "usage.completion_tokens is -535048, negative"),
    "above max_tokens": (stream(FIVE, {"completion_tokens": 10 ** 9}), "more than max_tokens 5 (+16)"),
    "tokens without text": (stream([], {"completion_tokens": 5}), "is 5, but no text was streamed"),
    "text without tokens": (stream(FIVE, None, {"predicted_n": 0}), "timings.predicted_n is 0, but 5 chunks"),
    "astronomical": (stream(FIVE, {"completion_tokens": 10 ** 400}), "impossibly large"),
    "not finite": (stream(FIVE, {"completion_tokens": 5}, {"predicted_per_second": float("inf")}),
                   "timings.predicted_per_second is inf, not a finite number"),
}


def lock_with_entry(path: Path) -> bytes:
    path.write_text(json.dumps({"lock_version": LOCK_VERSION, "builds": {
        "cpu/server": {"image_id": "sha256:aaa", "image_digest": "sha256:aaa", "tags": ["buun:cpu"], "pushed": []}}}))
    return path.read_bytes()


def bench(cwd: Path, url: str, *args: str):
    return run_cli(cwd, "bench", "--url", url, "--runs", "2", "--max-tokens", "5", "--timeout", "20", *args,
                   env=cli_env(cwd / "cache"), timeout=120)


@pytest.mark.parametrize("case", IMPOSSIBLE)
def test_impossible_figures_make_an_invalid_bench(case: str, tmp_path: Path) -> None:
    answer, reason = IMPOSSIBLE[case]
    lock = tmp_path / "buildkit.lock"
    before = lock_with_entry(lock)
    with HostileServer("answer", answer=answer) as server:
        proc = bench(tmp_path, server.url, "--attach-lock", "--lock-entry", "cpu/server", "--lock", str(lock),
                     "--output", str(tmp_path / "report.json"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "2 of 2 runs invalid" in errors[0] and reason in errors[0], proc.stderr
    assert "not attached to a lock or compared" in errors[0]
    shown = [ln for ln in proc.stdout.splitlines() if ln.startswith("invalid: run ")]
    assert len(shown) == 2 and all("the server's figures are impossible: " in ln and reason in ln for ln in shown), \
        proc.stdout
    assert "no run completed" in proc.stdout  # no figure of an invalid run is printed as a result
    assert lock.read_bytes() == before
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["runs"] == [] and [r["run"] for r in report["invalid"]] == [1, 2]


def test_a_sane_server_is_measured_attached_and_compared(tmp_path: Path) -> None:
    """The same server with figures that can be true: rc 0, the lock gets the bench, and a report with
    impossible figures (as --output wrote them before issue 22) is refused by --compare."""
    lock = tmp_path / "buildkit.lock"
    lock_with_entry(lock)
    sane = stream(FIVE, {"completion_tokens": 5, "prompt_tokens": 9}, {"predicted_per_second": 50.0})
    with HostileServer("answer", answer=sane) as server:
        proc = bench(tmp_path, server.url, "--attach-lock", "--lock-entry", "cpu/server", "--lock", str(lock),
                     "--output", str(tmp_path / "good.json"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert [r["tokens"] for r in json.loads(lock.read_text())["builds"]["cpu/server"]["bench"]["runs"]] == [5, 5]
        old = json.loads((tmp_path / "good.json").read_text())
        old["runs"][0].update(tokens=-535048, client_tps=-107009.6)
        (tmp_path / "old.json").write_text(json.dumps(old))
        proc = bench(tmp_path, server.url, "--compare", str(tmp_path / "old.json"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "runs[0] has impossible figures: tokens is -535048, negative" in proc.stderr
