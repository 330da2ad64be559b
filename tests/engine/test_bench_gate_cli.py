"""`buildkit bench --max-slowdown` as the bench gate (issue 21, item 4): a server on 127.0.0.1
(tests/hostile.py, `answer` mode: a well-formed streamed chat completion) is benched against a report
whose mean tok/s is far above or far below anything measured here, so the verdict does not depend on
this machine's speed. The gate goes into the JSON report, the lock entry and the step summary; a gate
whose figures cannot be true (a release at 0 tok/s) gives no verdict, and none is recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_bench_figures import FIVE, bench, lock_with_entry, stream
from hostile import HostileServer

SANE = stream(FIVE, {"completion_tokens": 5, "prompt_tokens": 9}, {"predicted_per_second": 50.0})


def release_report(tmp_path: Path, server_url: str, tps: float, *later: float) -> Path:
    """A report of this server (2 runs), the first run's tok/s set to tps and the second's to later[0] or tps
    (the 'release' measured on another day)."""
    proc = bench(tmp_path, server_url, "--output", str(tmp_path / "measured.json"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "measured.json").read_text())
    for run, value in zip(data["runs"], (tps, *later, tps), strict=False):
        run["client_tps"] = value
    path = tmp_path / "release.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("release_tps,passed", [(1e9, False), (1e-3, True)], ids=["slower", "faster"])
def test_the_gate_goes_into_the_report_the_lock_and_the_step_summary(tmp_path, release_tps, passed):
    lock = tmp_path / "buildkit.lock"
    lock_with_entry(lock)
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier steps\n")
    with HostileServer("answer", answer=SANE) as server:
        release = release_report(tmp_path, server.url, release_tps)
        proc = bench(tmp_path, server.url, "--compare", str(release), "--max-slowdown", "5", "--attach-lock",
                     "--lock-entry", "cpu/server", "--lock", str(lock), "--output", str(tmp_path / "report.json"),
                     "--step-summary", str(summary))
    assert "Traceback" not in proc.stderr
    gate = json.loads((tmp_path / "report.json").read_text())["gate"]
    assert gate["passed"] is passed and gate["max_slowdown"] == 5 and gate["old"] == release_tps
    assert gate["ratio"] == pytest.approx(gate["new"] / gate["old"])
    assert json.loads(lock.read_text())["builds"]["cpu/server"]["bench"]["gate"] == gate
    text = summary.read_text()
    assert text.startswith("earlier steps\n")  # appended, as $GITHUB_STEP_SUMMARY is
    if passed:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert gate["verdict"] == "promoted" and "## ✅ bench gate: promoted" in text
        assert "gate: promoted" in proc.stdout
    else:
        assert proc.returncode == 1
        slower = (1 - gate["ratio"]) * 100
        verdict = f"stays a nightly: {slower:.1f}% slower than the release (threshold 5%)"
        assert gate["verdict"] == verdict and f"## ❌ bench gate: {verdict}" in text
        assert "| ratio new/release | change | threshold | verdict |" in text
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
        assert len(errors) == 1 and verdict in errors[0], proc.stderr


def test_a_gate_without_sane_figures_gives_no_verdict_and_records_none(tmp_path):
    lock = tmp_path / "buildkit.lock"
    before = lock_with_entry(lock)
    summary = tmp_path / "step-summary.md"
    with HostileServer("answer", answer=SANE) as server:
        release = release_report(tmp_path, server.url, 0.0)  # a release at 0 tok/s: no ratio can be true
        proc = bench(tmp_path, server.url, "--compare", str(release), "--max-slowdown", "5",
                     "--output", str(tmp_path / "report.json"), "--step-summary", str(summary), "--json")
        lock_proc = bench(tmp_path, server.url, "--compare", str(release), "--max-slowdown", "5", "--attach-lock",
                          "--lock-entry", "cpu/server", "--lock", str(lock))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "release mean tok/s is 0.0, not a finite positive number" in errors[0], proc.stderr
    assert "gate" not in json.loads(proc.stdout) and "gate" not in json.loads((tmp_path / "report.json").read_text())
    assert "bench gate: no verdict, the nightly stays a nightly" in summary.read_text()
    assert lock_proc.returncode == 1
    assert "gate" not in json.loads(lock.read_text())["builds"]["cpu/server"]["bench"]
    assert before != lock.read_bytes()  # the bench itself is attached, the gate is not


def test_a_release_measured_unsteadily_promotes_nothing(tmp_path):
    """The release's second run at a tenth of its first (a busy runner): its mean is below what it serves, so
    even a nightly far faster than that mean stays a nightly; the job is red, and the summary says why."""
    summary = tmp_path / "step-summary.md"
    with HostileServer("answer", answer=SANE) as server:
        release = release_report(tmp_path, server.url, 2e-3, 2e-4)
        proc = bench(tmp_path, server.url, "--compare", str(release), "--max-slowdown", "5",
                     "--output", str(tmp_path / "report.json"), "--step-summary", str(summary))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    gate = json.loads((tmp_path / "report.json").read_text())["gate"]
    assert gate["ratio"] > 1 and not gate["passed"]  # faster than the release's mean, and still not promoted
    assert gate["unsteady"] == ("the release's runs were not steady (run 2 at 0.0002 tok/s, 0.10x its fastest 0.002; "
                                "at least 0.7x is steady)")
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "no verdict: the nightly stays a nightly: the release's runs were not" in errors[0]
    assert "bench again on a quiet runner" in summary.read_text() and "✅" not in summary.read_text()
