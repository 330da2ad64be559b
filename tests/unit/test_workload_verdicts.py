"""The workload checks' pure parts (issue 46): lossless comparisons and their near-tie rule, acceptance and its
gate, the /completion answer read as input, the target alone's arguments, and the verdict of a recorded report
judged again (a GPU host's own outcome is never taken on trust)."""

from __future__ import annotations

import json

import pytest

from buildkit.bench.acceptance import Acceptance, gate, measure
from buildkit.bench.figures import Impossible
from buildkit.bench.greedy import read_completion, request_body
from buildkit.bench.kvagreement import KvAgreement
from buildkit.bench.lossless import NEAR_TIE, LosslessVerdict, Outcome, compare
from buildkit.bench.results import BenchReport, RunResult
from buildkit.bench.workload import draft_only
from buildkit.bench.workloadverdict import judge


# ------------------------------------------------------------------ lossless

def test_identical_tokens_pass():
    c = compare(0, "fresh", [1, 2, 3], [1, 2, 3])
    assert c.outcome is Outcome.IDENTICAL and c.compared == 3 and c.divergence is None


def test_the_first_difference_is_named_with_the_targets_margin_there():
    c = compare(2, "sequence", [5, 6, 7, 8], [5, 6, 9, 8], margins=[3.0, 2.0, 1.5, 0.1], seconds=[1, 1, 9, 1])
    assert c.outcome is Outcome.DIFFERS  # the target's second choice, but 1.5 nats apart: not rounding
    assert c.divergence is not None and (c.divergence.position, c.divergence.margin) == (2, 1.5)
    assert "DIFFERS at token 2: target 7, speculative 9" in c.line()


def test_a_flip_to_the_second_choice_within_the_near_tie_margin_is_a_near_tie():
    c = compare(0, "fresh", [5, 6, 7], [5, 6, 9], margins=[1, 1, NEAR_TIE / 2], seconds=[0, 0, 9])
    assert c.outcome is Outcome.NEAR_TIE
    assert "near-tie at token 2" in c.line()


def test_a_token_the_target_did_not_rank_second_differs_even_at_a_tiny_margin():
    c = compare(0, "fresh", [5, 6, 7], [5, 6, 11], margins=[1, 1, 0.001], seconds=[0, 0, 9])
    assert c.outcome is Outcome.DIFFERS


def test_a_shorter_answer_differs_at_its_end():
    """What the fork's server did when a batch of accepted drafts ended the request: 120 of 128 tokens."""
    c = compare(0, "fresh", [1, 2, 3], [1, 2])
    assert c.outcome is Outcome.DIFFERS and c.divergence is not None and c.divergence.position == 2
    assert "the speculative answer ends after 2 tokens" in c.line()


def test_a_verdict_passes_with_near_ties_and_fails_on_one_difference_or_on_nothing():
    same, tie = compare(0, "fresh", [1], [1]), compare(1, "fresh", [1, 2], [1, 3], [9, 0.01], [0, 3])
    bad = compare(2, "sequence", [1, 2], [1, 3], [9, 4.0], [0, 3])
    assert LosslessVerdict("x", (same, tie)).passed
    assert "PASS 1/2 identical, 1 near-tie(s)" in LosslessVerdict("x", (same, tie)).line()
    assert not LosslessVerdict("x", (same, bad)).passed
    assert not LosslessVerdict("x", ()).passed


def test_a_recorded_verdict_is_judged_again_from_its_divergence():
    """A host that calls a clear difference a near-tie (or passed) is overruled."""
    bad = compare(0, "fresh", [1, 2], [1, 3], [9, 4.0], [0, 3]).to_dict()
    bad["outcome"] = "near-tie"
    record = {"label": "m", "passed": True, "comparisons": [bad]}
    assert not LosslessVerdict.from_dict(record).passed
    with pytest.raises(ValueError):
        LosslessVerdict.from_dict({"comparisons": [{"setting": "fresh", "prompt": 0, "compared": 1,
                                                    "outcome": "near-tie", "divergence": None}]})
    with pytest.raises(ValueError):
        LosslessVerdict.from_dict({"comparisons": [dict(bad, divergence=dict(bad["divergence"], margin=1e999))]})


# ------------------------------------------------------------------ acceptance

def run(n: int, tokens: int, drafted: int, accepted: int, tps: float) -> RunResult:
    return RunResult(run=n, tokens=tokens, wall_s=tokens / tps, client_tps=tps, ttft_s=0.1, finish_reason="length",
                     prompt_tokens=10, prompt_tps=100.0, predicted_tps=tps, draft_n=drafted,
                     draft_accepted=accepted)


def reports(spec_tps=(400.0, 400.0, 400.0), accepted=600):
    from buildkit.bench.protocol import Protocol

    spec = BenchReport(target={}, protocol=Protocol())
    spec.runs = [run(i + 1, 800, 700, accepted, t) for i, t in enumerate(spec_tps)]
    target = BenchReport(target={}, protocol=Protocol())
    target.runs = [run(i + 1, 800, 0, 0, 100.0) for i in range(3)]
    return spec, target


def test_acceptance_rate_mean_length_and_speedup():
    a = measure("m", *reports())
    assert (a.drafted, a.accepted, a.generated) == (2100, 1800, 2400)
    assert a.rate == pytest.approx(1800 / 2100)
    assert a.mean_length == pytest.approx(2400 / 600)  # 600 verify steps gave 2,400 tokens
    assert a.speedup == pytest.approx(4.0)
    assert gate(a, None) is None
    assert "1800/2100 drafts accepted (85.7%), mean accepted length 4.00" in a.line()


def test_the_acceptance_gate():
    a = measure("m", *reports())
    release = Acceptance.from_dict(dict(a.to_dict(), accepted=2000))  # the release accepted more
    assert "more than 2 points below the release's" in (gate(a, release) or "")
    assert gate(a, Acceptance.from_dict(dict(a.to_dict(), accepted=1830))) is None  # within the tolerance
    degraded = measure("m", *reports(spec_tps=(400.0, 200.0, 100.0)))
    assert "fell from run to run" in (gate(degraded, None) or "")
    none = measure("m", *reports(accepted=0))
    assert gate(dataclass_replace(none, drafted=0), None) is not None


def dataclass_replace(obj, **kw):
    from dataclasses import replace
    return replace(obj, **kw)


@pytest.mark.parametrize("bad", [{"accepted": 5000}, {"drafted": -1}, {"spec_tps": float("nan")}, {"runs": True}])
def test_a_recorded_acceptance_that_cannot_be_is_refused(bad):
    good = measure("m", *reports()).to_dict()
    with pytest.raises(ValueError):
        Acceptance.from_dict(dict(good, **bad))


# ------------------------------------------------------------------ the server's answer

def answer(tokens, probs=None, timings=None):
    data = {"tokens": tokens, "timings": timings or {"predicted_per_second": 50.0}}
    if probs is not None:
        data["completion_probabilities"] = probs
    return data


def test_a_completion_with_its_candidates_and_margin():
    probs = [{"top_logprobs": [{"id": 5, "logprob": -0.1}, {"id": 7, "logprob": -2.6}]}]
    c = read_completion(answer([5], probs, {"draft_n": 10, "draft_n_accepted": 4}), 4, n_probs=2, n_vocab=100)
    assert c.tokens == (5,) and c.margin(0) == pytest.approx(2.5) and (c.draft_n, c.draft_accepted) == (10, 4)


@pytest.mark.parametrize("data", [
    [], {"content": "no tokens"}, answer([1, "2"]), answer([1, -3]), answer([1, 2**31]), answer([True]),
    answer(list(range(100))),  # more than asked
    answer([1], [{"top_logprobs": [{"id": 1, "logprob": 0.5}]}]),  # a positive log-probability
    answer([1], [{"top_logprobs": [{"id": 1, "logprob": -2.0}, {"id": 2, "logprob": -1.0}]}]),  # out of order
    answer([1], []),  # candidates missing for a position
    answer([1], timings={"draft_n": 1, "draft_n_accepted": 2}),
])
def test_an_answer_that_cannot_be_is_refused(data):
    with pytest.raises(Impossible):
        read_completion(data, 8, n_probs=2, n_vocab=1000)


def test_the_request_is_greedy_and_ignores_the_end_of_generation():
    body = request_body("hi", 16)
    assert body["temperature"] == 0 and body["top_k"] == 1 and body["ignore_eos"] and body["return_tokens"]
    assert json.loads(json.dumps(body)) == body


# ------------------------------------------------------------------ the target alone

def test_the_target_alone_gets_the_profile_less_its_draft_only_arguments():
    args = ["--spec-type", "dflash", "--n-gpu-layers", "99", "--n-gpu-layers-draft", "99", "--ctx-size", "32000",
            "--ctx-size-draft=256", "-ngld", "99", "--flash-attn", "on", "-ctk", "turbo4"]
    assert draft_only(args) == ("--n-gpu-layers", "99", "--ctx-size", "32000", "--flash-attn", "on", "-ctk",
                                "turbo4")
    upstream = ["--spec-draft-n-max", "8", "--spec-draft-p-min=0", "--spec-draft-backend-sampling", "--ctx-size",
                "2048", "--spec-draft-type-k", "q8_0", "-cmoed", "--parallel", "1"]
    assert draft_only(upstream) == ("--ctx-size", "2048", "--parallel", "1")


# ------------------------------------------------------------------ the verdict

def test_a_report_is_judged_whole():
    lossless = LosslessVerdict("m", (compare(0, "fresh", [1], [1]),)).to_dict()
    acc = measure("m", *reports()).to_dict()
    kv = KvAgreement("m turbo4", 60, 64, (None, 12)).to_dict()
    v = judge({"lossless": [lossless], "acceptance": [acc], "kv": [kv], "errors": []})
    assert v.passed and any(ln.startswith("kv m turbo4: top-1 agreement with f16 60/64 (93.8%)") for ln in v.lines())
    assert not judge({"lossless": [lossless], "errors": ["server\x1b]0;pwned\x07 died"]}).passed
    assert "\x1b" not in v.markdown() and "\x1b" not in "".join(judge({"errors": ["a\x1b[2Jb"]}).lines())
    assert not judge({}).passed  # nothing checked is no pass
    assert not judge({"kv": [kv]}, kv_floor=0.99).passed
    release = judge({"acceptance": [dict(acc, accepted=2090)]})
    assert not judge({"acceptance": [acc]}, release).passed
    with pytest.raises(ValueError):
        judge({"lossless": "x"})
    hostile = judge({"lossless": [dict(lossless, label="m\x1b]52;c;cHduZWQ=\x07")]})
    assert "\x1b" not in "".join(hostile.lines()) and "\\x1b" in hostile.lines()[0]  # shown, never sent
