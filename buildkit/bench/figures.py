"""A server's figures are input: what a run's figures must be before they are printed, kept in a
lock or compared (pure).

A count or a rate is a finite number, not negative and below FIGURE_LIMIT; a count is whole. The
tokens of one request are at most max_tokens + TOKEN_SLACK, come with streamed text (but for one: a
server counts the end-of-generation token it stopped at, and streams no text for it; llama-server does),
and text never comes with a count of 0. A run that breaks any of these is invalid, with the first reason found.
"""

from __future__ import annotations

import math
from typing import Any

TOKEN_SLACK = 16  # tokens a server may count past max_tokens (an end-of-sequence token, a last draft batch)
FIGURE_LIMIT = 1e15  # no count or rate of one benchmark comes near it; every figure below it is a float too


class Impossible(ValueError):
    """A figure that cannot be true; the message names it and says why."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


def number(src: dict[str, Any] | None, name: str, key: str, *, whole: bool) -> int | float | None:
    """src[key] as a count (whole) or a rate; None when it is absent or null; Impossible otherwise."""
    value = (src or {}).get(key)
    if value is None:
        return None
    what = f"{name}.{key}" if name else key
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Impossible(f"{what} is {_shown(value)}, not a number")
    if not (isinstance(value, int) or math.isfinite(value)):
        raise Impossible(f"{what} is {value}, not a finite number")
    if value < 0:
        raise Impossible(f"{what} is {_shown(value)}, negative")
    if value >= FIGURE_LIMIT:
        raise Impossible(f"{what} is {_shown(value)}, impossibly large")
    if whole and value != int(value):
        raise Impossible(f"{what} is {_shown(value)}, not a whole number")
    return int(value) if whole else float(value)


def request_figures(usage: dict[str, Any] | None, timings: dict[str, Any] | None, chunks: int,
                    max_tokens: int | None) -> dict[str, Any]:
    """The figures of one streamed answer (RequestResult's fields); Impossible when one cannot be true.
    chunks: the chunks of text streamed; max_tokens: what the request asked for (None: no bound)."""
    completion = number(usage, "usage", "completion_tokens", whole=True)
    predicted = number(timings, "timings", "predicted_n", whole=True)
    if completion is not None:
        tokens, source, what = completion, "usage", "usage.completion_tokens"
    elif predicted is not None:
        tokens, source, what = predicted, "timings", "timings.predicted_n"
    else:
        tokens, source, what = chunks, "chunks", "the count of text chunks"
    if max_tokens is not None and tokens > max_tokens + TOKEN_SLACK:
        raise Impossible(f"{what} is {tokens}, more than max_tokens {max_tokens} (+{TOKEN_SLACK})")
    if tokens > 1 and not chunks:  # one token may be the end-of-generation token, counted but never streamed
        raise Impossible(f"{what} is {tokens}, but no text was streamed")
    if chunks and not tokens:
        raise Impossible(f"{what} is 0, but {chunks} chunks of text were streamed")
    prompt = number(usage, "usage", "prompt_tokens", whole=True)
    figures = {
        "tokens": tokens, "tokens_source": source, "chunks": chunks,
        "prompt_tokens": prompt if prompt is not None else number(timings, "timings", "prompt_n", whole=True),
        "prompt_tps": number(timings, "timings", "prompt_per_second", whole=False),
        "predicted_tps": number(timings, "timings", "predicted_per_second", whole=False),
        "draft_n": number(timings, "timings", "draft_n", whole=True),
        "draft_accepted": number(timings, "timings", "draft_n_accepted", whole=True),
    }
    _check_drafts(figures, "timings.draft_n_accepted")
    return figures


def run_figures(run: dict[str, Any], max_tokens: int, concurrency: int) -> dict[str, Any]:
    """A run of a report read back (RunResult's JSON form), its figures checked as request_figures checks a
    fresh one's, as far as a run keeps them; Impossible otherwise. Returns the run's fields."""
    checked = dict(run)
    for key in ("run", "tokens", "prompt_tokens", "draft_n", "draft_accepted"):
        checked[key] = number(run, "", key, whole=True)
    for key in ("wall_s", "client_tps", "ttft_s", "prompt_tps", "predicted_tps"):
        checked[key] = number(run, "", key, whole=False)
    if checked["run"] is None or checked["tokens"] is None or not checked["wall_s"] or checked["client_tps"] is None:
        raise Impossible("run, tokens, wall_s (above 0) and client_tps are required")
    if checked["tokens"] > (max_tokens + TOKEN_SLACK) * concurrency:
        raise Impossible(f"tokens is {checked['tokens']}, more than {concurrency} x max_tokens {max_tokens} "
                         f"(+{TOKEN_SLACK})")
    _check_drafts(checked, "draft_accepted")
    return checked


def _check_drafts(figures: dict[str, Any], what: str) -> None:
    if (figures["draft_accepted"] or 0) > (figures["draft_n"] or 0):
        raise Impossible(f"{what} is {figures['draft_accepted']}, more than the {figures['draft_n'] or 0} drafted")
