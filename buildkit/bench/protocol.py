"""The bench protocol: what every run asks of the server (see benchmark.py for the why)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from buildkit.core.boundedread import MiB, read_regular
from buildkit.core.errors import BenchError


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


MAX_CONCURRENCY = 1024
MAX_SECONDS = 1e6  # a time-out longer than 11 days is a typo (and more than a socket's time-out can hold)


def check_seconds(option: str, value: float) -> float:
    """value, a time-out in seconds: more than 0 and at most MAX_SECONDS (not nan, not inf)."""
    if not value > 0:
        raise BenchError(f"{option} must be more than 0 seconds, got {value:g}")
    if not value <= MAX_SECONDS:
        raise BenchError(f"{option} must be at most {MAX_SECONDS:g} seconds, got {value:g}")
    return value


def read_prompt(path: str | Path) -> str:
    """The text of a --prompt-file (UTF-8), or one BenchError line."""
    try:
        return read_regular(path, 16 * MiB).decode("utf-8")  # a FIFO or device: refused, not waited on
    except UnicodeDecodeError as exc:
        raise BenchError(f"--prompt-file {path}: not UTF-8 text (byte {exc.start}); save the prompt as UTF-8") from None
    except OSError as exc:
        raise BenchError(f"--prompt-file {path}: cannot read it: {exc.strerror or exc}") from None


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

    def check(self) -> Protocol:
        for name in ("runs", "max_tokens", "concurrency"):
            if getattr(self, name) < 1:
                raise BenchError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.concurrency > MAX_CONCURRENCY:  # a thread each
            raise BenchError(f"--concurrency must be at most {MAX_CONCURRENCY}, got {self.concurrency}")
        check_seconds("--timeout", self.timeout)
        if not 0 < self.degradation_threshold <= 1:
            raise BenchError(f"the degradation threshold must be in (0, 1], got {self.degradation_threshold:g}")
        if not self.prompt.strip():
            raise BenchError("the prompt is empty")
        return self

    def body(self) -> dict[str, Any]:
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
