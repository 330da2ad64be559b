"""One greedy completion, token by token: llama-server's /completion at temperature 0 with the generated token
ids (`return_tokens`), optionally the top candidates of each position with their log-probabilities (`n_probs`),
and the server's draft figures. Stdlib only: scripts/gpu_run.py runs it on a GPU host without buildkit's
dependencies.

What the server answers is input: the ids are whole numbers in the vocabulary's range, at most the tokens asked
for (+ figures.TOKEN_SLACK), the log-probabilities finite and not above 0, the draft figures checked as the
bench's are (figures.py); anything else is a BenchError naming the field, never a comparison made of it.
"""

from __future__ import annotations

import http.client
import json
import math
import socket
from dataclasses import dataclass
from typing import Any

from buildkit.bench.client import endpoint, error_text
from buildkit.bench.figures import TOKEN_SLACK, Impossible, number
from buildkit.core.deadline import Deadline, shut
from buildkit.core.errors import BenchError

BODY_LIMIT = 64 * 2**20  # an answer of a few thousand tokens with their candidates is well under 1 MiB
TOKEN_ID_LIMIT = 2**31  # llama_token is an int32


@dataclass(frozen=True)
class Candidate:
    token: int
    logprob: float


@dataclass(frozen=True)
class Completion:
    """One greedy completion: the generated ids, each position's top candidates (empty without n_probs),
    and the server's figures."""

    tokens: tuple[int, ...]
    top: tuple[tuple[Candidate, ...], ...] = ()
    draft_n: int | None = None
    draft_accepted: int | None = None
    predicted_tps: float | None = None
    prompt_tps: float | None = None

    def margin(self, position: int) -> float | None:
        """log p(top 1) - log p(top 2) at position: the logit margin there (softmax keeps logit differences);
        None without two candidates."""
        if position >= len(self.top) or len(self.top[position]) < 2:
            return None
        return self.top[position][0].logprob - self.top[position][1].logprob


Prompt = str | list[int] | list[str | int]  # text, token ids, or text followed by ids (llama-server's mixed prompt)


def request_body(prompt: Prompt, n_predict: int, n_probs: int = 0, cache_prompt: bool = False,
                 ) -> dict[str, Any]:
    """The /completion request: greedy (temperature 0, one candidate kept), end-of-generation ignored, so each
    answer has exactly n_predict tokens; the same body for the target alone and with its drafter."""
    return {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "top_k": 1, "seed": 0,
            "ignore_eos": True, "cache_prompt": cache_prompt, "return_tokens": True, "n_probs": n_probs,
            "stream": False}


def complete(url: str, prompt: Prompt, n_predict: int, *, n_probs: int = 0, n_vocab: int | None = None,
             cache_prompt: bool = False, timeout: float = 300.0) -> Completion:
    """POST one greedy /completion to the server at url and check its answer; BenchError on any failure."""
    ep = endpoint(url)
    path = ep.prefix + "/completion"
    body = json.dumps(request_body(prompt, n_predict, n_probs, cache_prompt)).encode()
    conn_cls = http.client.HTTPSConnection if ep.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(ep.host, ep.port, timeout=timeout)
    watchdog = Deadline(timeout, lambda: shut(conn.sock))
    watchdog.__enter__()
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read(BODY_LIMIT + 1)
        status, reason = resp.status, resp.reason
    except (OSError, http.client.HTTPException, ValueError, AttributeError) as exc:
        if watchdog.expired or isinstance(exc, (socket.timeout, TimeoutError)):
            raise BenchError(f"no answer from {ep.base}{path} within {timeout:g}s") from None
        raise BenchError(f"{ep.base}{path}: {type(exc).__name__}: {exc}"[:300]) from None
    finally:
        watchdog.__exit__()
        conn.close()
    if status != 200:
        raise BenchError(f"HTTP {status} {' '.join(str(reason).split())[:80]} from {ep.base}{path}: "
                         f"{error_text(raw[:65536])}")
    if len(raw) > BODY_LIMIT:
        raise BenchError(f"{ep.base}{path}: the answer is over {BODY_LIMIT // 2**20} MiB")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise BenchError(f"{ep.base}{path}: the answer is not JSON") from None
    try:
        return read_completion(data, n_predict, n_probs, n_vocab)
    except Impossible as exc:
        raise BenchError(f"{ep.base}{path}: {exc}") from None


def _token(value: object, what: str, n_vocab: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < (n_vocab or TOKEN_ID_LIMIT):
        raise Impossible(f"{what} is {str(value)[:24]!r}, not a token id" + (f" below {n_vocab}" if n_vocab else ""))
    return value


def _logprob(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value > 1e-6:
        raise Impossible(f"{what} is {str(value)[:24]!r}, not a log-probability")
    return float(value)


def read_completion(data: object, n_predict: int, n_probs: int = 0, n_vocab: int | None = None) -> Completion:
    """A /completion answer (parsed JSON) as a Completion; Impossible naming the first field that cannot be."""
    if not isinstance(data, dict):
        raise Impossible("the answer is not a JSON object")
    ids = data.get("tokens")
    if not isinstance(ids, list):
        raise Impossible("the answer has no list of generated token ids (`tokens`; does the server take "
                         "return_tokens?)")
    if len(ids) > n_predict + TOKEN_SLACK:
        raise Impossible(f"{len(ids)} tokens came back, more than the {n_predict} asked for (+{TOKEN_SLACK})")
    tokens = tuple(_token(t, f"tokens[{i}]", n_vocab) for i, t in enumerate(ids))
    top: list[tuple[Candidate, ...]] = []
    if n_probs:
        probs = data.get("completion_probabilities")
        if not isinstance(probs, list) or len(probs) != len(tokens):
            raise Impossible(f"completion_probabilities is not a list of {len(tokens)} positions")
        for i, pos in enumerate(probs):
            cands = pos.get("top_logprobs") if isinstance(pos, dict) else None
            if not isinstance(cands, list) or not cands or len(cands) > n_probs:
                raise Impossible(f"completion_probabilities[{i}].top_logprobs is not a list of 1 to {n_probs}")
            row = tuple(Candidate(_token(c.get("id") if isinstance(c, dict) else None, f"[{i}] candidate id", n_vocab),
                                  _logprob(c.get("logprob") if isinstance(c, dict) else None, f"[{i}] logprob"))
                        for c in cands)
            if any(a.logprob < b.logprob for a, b in zip(row, row[1:], strict=False)):
                raise Impossible(f"completion_probabilities[{i}]: the candidates are not in order of probability")
            top.append(row)
    timings = data.get("timings") if isinstance(data.get("timings"), dict) else {}
    draft_n = number(timings, "timings", "draft_n", whole=True)
    accepted = number(timings, "timings", "draft_n_accepted", whole=True)
    if (accepted or 0) > (draft_n or 0):
        raise Impossible(f"timings.draft_n_accepted is {accepted}, more than the {draft_n or 0} drafted")
    predicted = number(timings, "timings", "predicted_per_second", whole=False)
    prompt_tps = number(timings, "timings", "prompt_per_second", whole=False)
    return Completion(tokens=tokens, top=tuple(top), draft_n=int(draft_n) if draft_n is not None else None,
                      draft_accepted=int(accepted) if accepted is not None else None,
                      predicted_tps=float(predicted) if predicted is not None else None,
                      prompt_tps=float(prompt_tps) if prompt_tps is not None else None)
