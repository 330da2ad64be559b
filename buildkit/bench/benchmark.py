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
message; the runs done before it are kept in the report. A run whose figures cannot be true
(figures.py: negative, above max_tokens, tokens without text, text without tokens, not finite) is
invalid: left out of the figures, listed in the report, exit code 1, never attached to a lock or
compared.

Modules: protocol.py (what is asked), results.py (runs, statistics, the report), figures.py (the
checks of a server's figures), client.py (the SSE client and the benchmark loop), format.py
(tables), gate.py (the bench gate: ratio, threshold, verdict), lockrecord.py (a report kept in the
lock), container.py (`served(spec)`: a llama-server container for `bench --image`, started through
the engine seam, waited for on /health, and always stopped and removed, also on Ctrl-C, SIGTERM and
failures). This module is their public API.
"""

from __future__ import annotations

from buildkit.bench.client import (Endpoint, InvalidFigures, StreamError, error_text, endpoint,
                                   measure_run, run_bench, stream_chat)
from buildkit.bench.container import (Served, container_spec, docker_client, local_image_id, served,
                                      wait_ready)
from buildkit.bench.format import (compare, degradation_line, format_compare, format_report,
                                   invalid_text, protocol_differences, run_row)
from buildkit.bench.lockrecord import attach_to_lock
from buildkit.bench.protocol import (BENCH_LABEL, DEFAULT_MAX_TOKENS, DEFAULT_PROMPT, DEFAULT_RUNS,
                                     DEFAULT_TIMEOUT, DEGRADATION_THRESHOLD, REPORT_VERSION, Protocol)
from buildkit.bench.results import (BenchReport, RequestResult, RunResult, combine, degradation,
                                    load_report, save_report, stats, summarize)

# the public API of `buildkit bench` (cli/bench.py imports it from here)
__all__ = ["Endpoint", "InvalidFigures", "StreamError", "error_text", "endpoint", "measure_run", "run_bench",
           "stream_chat", "Served", "container_spec", "docker_client", "local_image_id", "served", "wait_ready",
           "compare", "degradation_line", "format_compare", "format_report", "invalid_text", "protocol_differences",
           "run_row", "attach_to_lock", "BENCH_LABEL", "DEFAULT_MAX_TOKENS", "DEFAULT_PROMPT",
           "DEFAULT_RUNS", "DEFAULT_TIMEOUT", "DEGRADATION_THRESHOLD", "REPORT_VERSION", "Protocol", "BenchReport",
           "RequestResult", "RunResult", "combine", "degradation", "load_report", "save_report", "stats", "summarize"]
