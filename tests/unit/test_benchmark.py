"""The pure parts of `buildkit bench`: protocol, statistics, degradation flag, report JSON, comparison,
URL handling and the lock attachment. The real server is measured in test_benchmark_e2e.py."""

from __future__ import annotations

import json
import re

import pytest

from buildkit.bench.benchmark import (BenchReport, Protocol, RequestResult, RunResult, error_text, attach_to_lock,
                                combine, compare, degradation, endpoint, format_compare,
                                format_report, load_report, stats, summarize)
from buildkit.core.errors import BenchError, LockError
from buildkit.release.lockfile import LOCK_VERSION, Lock


def run(n: int, tps: float, tokens: int = 800, predicted: float | None = None, draft: tuple | None = None) -> RunResult:
    wall = tokens / tps
    return RunResult(run=n, tokens=tokens, wall_s=wall, client_tps=tps, ttft_s=0.1, finish_reason="length",
                     prompt_tokens=62, prompt_tps=500.0, predicted_tps=predicted if predicted else tps * 1.05,
                     draft_n=draft[0] if draft else None, draft_accepted=draft[1] if draft else None)


def report(tps: list[float], error: str | None = None, label: str = "img:a", **protocol) -> BenchReport:
    return BenchReport(target={"image": label}, protocol=Protocol(**protocol),
                       runs=[run(i + 1, t) for i, t in enumerate(tps)], error=error)


def test_default_protocol_is_the_hand_measured_one():
    p = Protocol().check()
    body = p.body()
    assert (p.runs, p.max_tokens, p.concurrency) == (3, 800, 1)
    assert body["max_tokens"] == 800 and body["ignore_eos"] is True and body["temperature"] == 0
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["cache_prompt"] is False
    (message,) = body["messages"]
    assert message["role"] == "user" and "Space Invaders" in message["content"] and "HTML" in message["content"]


@pytest.mark.parametrize("kwargs,message", [
    ({"runs": 0}, "--runs must be at least 1"), ({"max_tokens": 0}, "--max-tokens must be at least 1"),
    ({"concurrency": 0}, "--concurrency must be at least 1"), ({"timeout": 0}, "--timeout must be more than 0"),
    ({"degradation_threshold": 1.5}, "degradation threshold must be in (0, 1]"), ({"prompt": " "}, "prompt is empty"),
])
def test_protocol_checks(kwargs, message):
    with pytest.raises(BenchError) as err:
        Protocol(**kwargs).check()
    assert message in str(err.value)


def test_stats_mean_min_max_skip_missing_values():
    assert stats([1.0, None, 3.0]) == {"mean": 2.0, "min": 1.0, "max": 3.0}
    assert stats([None, None]) is None and stats([]) is None


def test_degradation_flags_the_dflash_pattern():
    ratio, degraded = degradation([run(1, 3.40), run(2, 1.52), run(3, 0.97)])
    assert degraded and ratio == pytest.approx(0.97 / 3.40)
    assert degradation([run(1, 85.0), run(2, 80.0), run(3, 84.0)]) == (pytest.approx(84 / 85), False)
    assert degradation([run(1, 10.0), run(2, 7.0)], threshold=0.7) == (pytest.approx(0.7), False)  # not below
    assert degradation([run(1, 10.0), run(2, 6.9)]) [1] is True
    assert degradation([run(1, 10.0)]) == (None, False)
    assert degradation([]) == (None, False)


def test_summary_of_runs():
    runs = [run(1, 10.0, draft=(100, 80)), run(2, 20.0, draft=(100, 60)), run(3, 30.0)]
    s = summarize(runs, runs_asked=5)
    assert s["runs_done"] == 3 and s["runs_asked"] == 5 and s["tokens"] == 2400
    assert s["client_tps"] == {"mean": 20.0, "min": 10.0, "max": 30.0}
    assert s["acceptance"] == {"mean": pytest.approx(0.7), "min": pytest.approx(0.6), "max": pytest.approx(0.8)}
    assert s["last_vs_first"] == 3.0 and s["degraded"] is False
    assert summarize([], 3)["client_tps"] is None


def test_a_concurrent_run_adds_tokens_and_takes_the_longest_wall_time():
    def req(tokens, wall, tps, draft=None):
        return RequestResult(tokens=tokens, tokens_source="usage", chunks=tokens, wall_s=wall, ttft_s=0.2,
                             finish_reason="length", prompt_tokens=62, prompt_tps=100.0, predicted_tps=tps,
                             draft_n=draft and draft[0], draft_accepted=draft and draft[1])

    r = combine(1, [req(100, 2.0, 60.0, (50, 40)), req(100, 4.0, 30.0, (50, 10))])
    assert r.tokens == 200 and r.wall_s == 4.0 and r.client_tps == 50.0
    assert r.predicted_tps == 45.0 and r.draft_n == 100 and r.draft_accepted == 50 and r.acceptance == 0.5
    d = r.to_dict()
    assert len(d["requests"]) == 2 and d["requests"][0]["client_tps"] == 50.0 and d["acceptance"] == 0.5
    assert "requests" not in combine(1, [req(100, 2.0, 60.0)]).to_dict()  # one request: nothing repeated


def test_report_json_round_trip_keeps_partial_runs_and_the_error(tmp_path):
    rep = report([10.0, 11.0], error="run 3 of 3: HTTP 500 ...")
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rep.to_dict()))
    back = load_report(path)
    assert [r.client_tps for r in back.runs] == [10.0, 11.0] and back.error == rep.error
    assert back.protocol == rep.protocol and back.label == "img:a"
    data = json.loads(path.read_text())
    assert data["summary"]["runs_done"] == 2 and data["summary"]["runs_asked"] == 3


@pytest.mark.parametrize("text,message", [
    ("{", "cannot read a bench report"), ("[]", "not a JSON object"),
    ('{"report_version": 9}', "not a buildkit bench report (report_version 9 is not 1)"),
    ('{"report_version": 1}', "not a buildkit bench report"),
])
def test_bad_compare_files(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(BenchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_report(path)


def test_format_report_shows_runs_summary_and_degradation():
    text = format_report(report([3.40, 1.52, 0.97]))
    assert "run  tokens  wall s" in text
    assert "DEGRADED, the last run ran at 0.29x the first (3.40 -> 1.52 -> 0.97 tok/s; threshold 0.7x)" in text
    lines = text.splitlines()
    assert any(ln.startswith("mean") and "1.96" in ln for ln in lines)
    assert "degradation: none (last/first 1.00x" in format_report(report([5.0, 5.0, 5.0]))


def test_format_report_of_a_partial_bench():
    text = format_report(report([10.0], error="run 2 of 3: the server closed the connection"))
    assert text.splitlines()[-1] == "stopped: run 2 of 3: the server closed the connection (1 of 3 runs done, kept)"
    assert "no run completed" in format_report(report([], error="run 1 of 3: refused"))


def test_compare_ratios_and_table():
    before, now = report([3.40, 1.52, 0.97], label="img:old"), report([85.0, 84.0, 85.0], label="img:new")
    rows = {r["metric"]: r for r in compare(before, now)}
    assert rows["tok/s mean"]["ratio"] == pytest.approx(84.6667 / 1.9633, rel=1e-3)
    assert rows["tok/s min"]["ratio"] == pytest.approx(84 / 0.97)
    assert rows["degraded"]["base"] is True and rows["degraded"]["new"] is False
    assert rows["draft acceptance mean"]["ratio"] is None
    table = format_compare(before, now, "old.json", "now")
    assert "img:old" in table and "img:new" in table
    assert any(ln.startswith("tok/s min") and ln.rstrip().endswith("86.60x") for ln in table.splitlines())
    assert "note:" not in table
    other = format_compare(before, report([5.0], label="x", max_tokens=100))
    assert "max_tokens 800 vs 100" in other


def test_the_slowdown_gate_passes_only_within_max_slowdown():
    from buildkit.bench.gate import make_gate

    before = report([100.0, 100.0, 100.0])
    assert make_gate(compare(before, report([96.0, 95.0, 97.0])), 5).problem() is None  # 0.96x: within 5%
    assert make_gate(compare(before, report([120.0])), 0).problem() is None  # faster always passes
    problem = make_gate(compare(before, report([94.0, 94.0, 94.0])), 5).problem()
    assert problem is not None and problem.startswith(
        "slower than allowed: mean tok/s 0.940x of before, more than --max-slowdown 5% below it")
    with pytest.raises(BenchError, match="cannot show"):  # nothing measured before
        make_gate(compare(report([]), report([90.0])), 5)


@pytest.mark.parametrize("url,base,path", [
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080", "/v1/chat/completions"),
    ("127.0.0.1:8080", "http://127.0.0.1:8080", "/v1/chat/completions"),
    ("http://localhost:8080/v1", "http://localhost:8080", "/v1/chat/completions"),
    ("http://localhost:8080/v1/chat/completions", "http://localhost:8080", "/v1/chat/completions"),
    ("http://h/proxy/v1/", "http://h:80/proxy", "/proxy/v1/chat/completions"),
    ("https://h", "https://h:443", "/v1/chat/completions"),
])
def test_endpoint(url, base, path):
    ep = endpoint(url)
    assert ep.base == base and ep.chat_path == path


def test_error_bodies_become_one_line():
    assert error_text(b'{"error": {"code": 500, "message": "boom\\nagain"}}') == "boom again"
    assert error_text(b"<html>\n Bad gateway </html>") == "<html> Bad gateway </html>"
    assert error_text(b"") == "(empty body)"
    assert error_text(b"x" * 500).endswith("...")


def lock_doc() -> dict:
    return {"lock_version": LOCK_VERSION, "builds": {
        "cpu/server": {"image_id": "sha256:aaa", "image_digest": "sha256:aaa",
                       "tags": ["buun:cpu", "buun:sha-1234567-cpu"], "pushed": []},
        "cuda13.1-sm120/server": {"image_id": "sha256:bbb", "image_digest": "sha256:ccc",
                                  "tags": ["buun:cuda13.1-sm120"], "pushed": ["reg.example/buun:1.0.0-cuda13.1-sm120"]},
    }}


def test_the_lock_entry_describing_an_image_by_tag_pushed_name_or_id(tmp_path):
    (tmp_path / "buildkit.lock").write_text(json.dumps(lock_doc()))
    lock = Lock.read(tmp_path / "buildkit.lock")
    assert lock.describing("buun:sha-1234567-cpu") == "cpu/server"
    assert lock.describing("reg.example/buun:1.0.0-cuda13.1-sm120") == "cuda13.1-sm120/server"
    assert lock.describing("other:tag", "sha256:bbb") == "cuda13.1-sm120/server"
    assert lock.describing("other:tag", "sha256:ccc") == "cuda13.1-sm120/server"
    assert lock.describing("other:tag", "sha256:zzz") is None


def test_attach_to_lock_writes_the_bench_into_the_entry_only(tmp_path):
    path = tmp_path / "buildkit.lock"
    path.write_text(json.dumps(lock_doc()))
    rep = report([10.0, 9.0], error="run 3 of 3: interrupted")
    attach_to_lock(path, "cpu/server", rep)
    data = json.loads(path.read_text())
    bench = data["builds"]["cpu/server"]["bench"]
    assert [r["client_tps"] for r in bench["runs"]] == [10.0, 9.0] and bench["error"] == "run 3 of 3: interrupted"
    assert "bench" not in data["builds"]["cuda13.1-sm120/server"]
    assert data["builds"]["cpu/server"]["tags"] == ["buun:cpu", "buun:sha-1234567-cpu"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["buildkit.lock"]  # no temporary file left
    with pytest.raises(LockError, match="has no entry 'x/y'"):
        attach_to_lock(path, "x/y", rep)


# ---------------------------------------------------------------- a server's figures (issue 22, class 2)

@pytest.mark.parametrize("usage, timings, chunks, said", [
    ({"completion_tokens": -535048}, None, 5, "usage.completion_tokens is -535048, negative"),
    ({"completion_tokens": 10 ** 9}, None, 5, "usage.completion_tokens is 1000000000, more than max_tokens 5 (+16)"),
    (None, None, 22, "the count of text chunks is 22, more than max_tokens 5"),
    ({"completion_tokens": 5}, None, 0, "usage.completion_tokens is 5, but no text was streamed"),
    (None, {"predicted_n": 0}, 5, "timings.predicted_n is 0, but 5 chunks of text were streamed"),
    ({"completion_tokens": 10 ** 400}, None, 5, "impossibly large"),
    ({"completion_tokens": 5.5}, None, 5, "not a whole number"),
    ({"completion_tokens": "5"}, None, 5, "usage.completion_tokens is '5', not a number"),
    ({"completion_tokens": 5}, {"predicted_per_second": float("nan")}, 5, "is nan, not a finite number"),
    ({"completion_tokens": 5}, {"prompt_per_second": -1.5}, 5, "timings.prompt_per_second is -1.5, negative"),
    ({"completion_tokens": 5}, {"draft_n": 4, "draft_n_accepted": 6}, 5, "is 6, more than the 4 drafted"),
])
def test_impossible_figures_are_named(usage, timings, chunks, said):
    from buildkit.bench.figures import Impossible, request_figures

    with pytest.raises(Impossible) as caught:
        request_figures(usage, timings, chunks, max_tokens=5)
    assert said in str(caught.value)


def test_figures_that_can_be_true_pass():
    from buildkit.bench.figures import TOKEN_SLACK, request_figures

    got = request_figures({"completion_tokens": 5 + TOKEN_SLACK, "prompt_tokens": 62},
                          {"predicted_per_second": 80.5, "draft_n": 4, "draft_n_accepted": 3}, 3, max_tokens=5)
    assert (got["tokens"], got["tokens_source"], got["prompt_tokens"], got["predicted_tps"]) == (21, "usage", 62, 80.5)
    assert request_figures(None, None, 0, None)["tokens"] == 0  # an empty answer is not impossible
    # a server that stopped at once counts the end-of-generation token, which it does not stream (the real
    # llama-server: tests/e2e/test_benchmark_e2e.py, ignore_eos off)
    assert request_figures({"completion_tokens": 1}, None, 0, 100)["tokens"] == 1
    assert request_figures(None, {"predicted_n": 5.0}, 5, 5)["tokens"] == 5  # a whole float is a count


def invalid_report() -> BenchReport:
    rep = report([10.0])
    rep.invalid = [{"run": 2, "reason": "the server's figures are impossible: usage.completion_tokens is -1, negative"}]
    return rep


def test_an_invalid_run_is_listed_and_never_attached(tmp_path):
    from buildkit.bench.benchmark import invalid_text

    text = format_report(invalid_report())
    assert "invalid: run 2: the server's figures are impossible: usage.completion_tokens is -1" in text
    assert invalid_text(invalid_report()).startswith("1 of 3 runs invalid, the first: run 2: ")
    path = tmp_path / "buildkit.lock"
    path.write_text(json.dumps(lock_doc()))
    before = path.read_bytes()
    with pytest.raises(BenchError, match="not attached to .*: 1 of 3 runs invalid, the first: run 2: "):
        attach_to_lock(path, "cpu/server", invalid_report())
    assert path.read_bytes() == before


def test_a_report_keeps_its_invalid_runs_and_refuses_impossible_figures(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(invalid_report().to_dict()))
    assert load_report(path).invalid == invalid_report().invalid
    for change, said in [({"client_tps": -107009.6}, "runs[0] has impossible figures: client_tps is -107009.6, "
                                                      "negative"),
                         ({"tokens": 10 ** 9}, "tokens is 1000000000, more than 1 x max_tokens 800 (+16)"),
                         ({"wall_s": 0}, "wall_s (above 0)"), ({"tokens": "800"}, "not a number")]:
        data = invalid_report().to_dict()
        data["runs"][0].update(change)
        path.write_text(json.dumps(data))
        with pytest.raises(BenchError, match=re.escape(said)):
            load_report(path)


# ---------------------------------------------------------------- the bench gate (issue 21, item 4)

def test_the_gate_says_promoted_or_how_much_slower():
    from buildkit.bench.gate import make_gate

    release = report([100.0, 100.0])
    passed = make_gate(compare(release, report([96.0, 96.0])), 5, "img:nightly-cpu", "img:cpu")
    assert passed.passed and passed.verdict == "promoted" and passed.problem() is None
    assert passed.to_dict() == {"ratio": pytest.approx(0.96), "max_slowdown": 5.0, "verdict": "promoted",
                                "passed": True, "new": 96.0, "old": 100.0, "new_image": "img:nightly-cpu",
                                "old_image": "img:cpu", "unsteady": None}
    slower = make_gate(compare(release, report([25.0, 35.0])), 5, "img:nightly-cpu", "img:cpu")
    assert slower.verdict == "stays a nightly: 70.0% slower than the release (threshold 5%)"
    assert not slower.passed and "stays a nightly: 70.0% slower" in (slower.problem() or "")
    table = slower.to_markdown()
    assert "| new | `img:nightly-cpu` | 30.00 |" in table and "| release | `img:cpu` | 100.00 |" in table
    assert ("| 0.300 | 70.0% slower | at most 5% slower | stays a nightly: 70.0% slower than the release "
            "(threshold 5%) |") in table
    assert "| 1.200 | 20.0% faster |" in make_gate(compare(release, report([120.0])), 0).to_markdown()


def test_a_release_measured_unsteadily_promotes_nothing():
    """The e2e gate saw it on a busy runner: the release's second run at 0.27x its first pulled its mean down
    to the nightly's, and a nightly a third slower was promoted. Noise only slows runs down, so an unsteady
    release cannot let a nightly through; the nightly's own noise only makes it look slower."""
    from buildkit.bench.gate import make_gate

    def gate(release: list[float], nightly: list[float]):
        return make_gate(compare(report(release), report(nightly)), 5, "img:nightly-cpu", "img:cpu", release)

    noisy_release = gate([100.0, 20.0], [50.0, 50.0])
    assert noisy_release.ratio == pytest.approx(50 / 60)  # the figures are still reported
    assert not noisy_release.passed
    said = "the release's runs were not steady (run 2 at 20 tok/s, 0.20x its fastest 100; at least 0.7x is steady)"
    assert noisy_release.unsteady == said and noisy_release.to_dict()["unsteady"] == said
    assert noisy_release.verdict == "stays a nightly: 16.7% slower than the release (threshold 5%)"  # slower still
    would_pass = gate([100.0, 100.0, 30.0], [80.0, 80.0])
    assert would_pass.ratio > 1 and not would_pass.passed
    assert would_pass.verdict == ("stays a nightly: the release's runs were not steady (run 3 at 30 tok/s, 0.30x its "
                                  "fastest 100; at least 0.7x is steady), so the comparison proves nothing (bench "
                                  "again on a quiet runner)")
    assert would_pass.problem().startswith("no verdict: the nightly stays a nightly: the release's runs were not")
    assert "## ❌ bench gate: stays a nightly: the release's" in would_pass.to_markdown()
    rows = compare(report([100.0, 100.0]), report([96.0, 96.0]))
    assert "not a finite positive number ([100.0, None])" in make_gate(rows, 5, release_runs=[100.0, None]).unsteady
    # a slow first run is the server's warm-up; the nightly's noise decides as measured; a steady release decides
    assert gate([20.0, 100.0, 100.0], [80.0, 80.0]).passed
    assert gate([50.0, 50.0], [100.0, 30.0]).passed
    assert gate([100.0, 75.0], [100.0, 72.0]).passed
    assert gate([100.0], [96.0]).passed  # one run: nothing to judge


@pytest.mark.parametrize("new,old,ratio,said", [
    (float("nan"), 100.0, float("nan"), "new mean tok/s is nan"),
    (float("inf"), 100.0, float("inf"), "new mean tok/s is inf"),
    (50.0, 0.0, None, "release mean tok/s is 0.0"),
    (-5.0, 100.0, -0.05, "new mean tok/s is -5.0"),
    (50.0, 100.0, 0.9, "ratio 0.9 is not 50.0 / 100.0"),
    (50.0, 100.0, True, "ratio new/release is True"),
    (None, 100.0, None, "no mean tok/s of both"),
])
def test_a_gate_with_figures_that_cannot_be_true_is_refused(new, old, ratio, said):
    from buildkit.bench.gate import make_gate

    rows = [{"metric": "tok/s mean", "key": "client_tps.mean", "base": old, "new": new, "ratio": ratio}]
    with pytest.raises(BenchError, match=re.escape(said)):
        make_gate(rows, 5)
    with pytest.raises(BenchError, match="not a percentage"):
        make_gate([{"key": "client_tps.mean", "base": 1.0, "new": 1.0, "ratio": 1.0}], float("nan"))


def test_attach_to_lock_records_the_gate_with_the_bench(tmp_path):
    from buildkit.bench.gate import make_gate

    path = tmp_path / "buildkit.lock"
    path.write_text(json.dumps(lock_doc()))
    gate = make_gate(compare(report([100.0]), report([80.0])), 5, "buun:sha-1234567-cpu", "buun:cpu")
    attach_to_lock(path, "cpu/server", report([80.0]), gate)
    recorded = json.loads(path.read_text())["builds"]["cpu/server"]["bench"]["gate"]
    assert recorded["ratio"] == pytest.approx(0.8) and recorded["verdict"].startswith("stays a nightly: 20.0% slower")
