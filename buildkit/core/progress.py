"""What a long build shows of itself: stage lines, the compile's progress, a final summary.

* Stage lines (stderr): `buildkit: fetch ...` when a stage starts and `buildkit: fetch done in 1.2s`
  when it ends, for fetch, patch, render, build, verify and push.
* During the compile, the step counter in buildx's output (Ninja's `[193/459]`, or `[ 42%]` from
  CMake's Makefiles) becomes a line `buildkit: compile 42% after 3m10s, about 4m20s left` at most
  every STATUS_EVERY seconds (or on a 10-point step); the estimate (core/compilework.py) is, for a Ninja
  compile, the last build's per-object times when the cache holds them, else its objects weighted by
  kind (CUDA against C/C++) when the tree's CUDA objects were counted; else the last build's time for
  this variant from the lock, else a linear extrapolation; the compile's own pace wins when it is far
  ahead of the last build's (a warm ccache after a cold build: `estimate`). When buildx draws its own TTY
  display, the status goes into the terminal title instead, so it does not tear the display.
* On a terminal with build.progress auto, core/livedisplay.py draws all of it in place instead (the
  stage lines still print above it).
* The summary: the image size and this build's ccache hit rate (the template zeroes ccache's
  statistics before compiling and prints them after, so the figure is this build's own).

Pure parsing lives here (unit-tested); buildx.py feeds the lines.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

from buildkit.core.compilework import CompileCurve, EdgeKind, left_by_curve, left_by_kind, ninja_edge
from buildkit.core.livedisplay import active, duration
from buildkit.core.urlcreds import redact_text

STATUS_EVERY = 30.0  # seconds between two compile status lines
OWN_PACE_FROM = 10  # percent of the compile seen before its own pace may overrule the last build's time
OWN_PACE_AHEAD = 4  # ... and only when it says less than a quarter of what the last build's time says
PERCENT = re.compile(r"\[\s*(\d{1,3})%\]")
# Ninja's counter, `[12/470] Building CXX object ...` (what the templates' CMake generates). buildx's own
# step lines (`#8 [build 3/7] RUN ...`, `#8 [2/5] COPY ...`) carry the same brackets, so the edge's
# description must follow: CMake's Ninja rules say Building, Linking, Creating, Generating or Re-running.
NINJA_STEPS = re.compile(r"\[(\d+)/(\d+)\] (?:Building|Linking|Creating|Generating|Re-running)")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
# ccache 4.x `--show-stats`: "Hits:  12 /  53 (22.64%)" under "Cacheable calls" (the first Hits line);
# with no cacheable call (every call recached, as `reproduce` compiles) it prints a bare "Hits:  0"
CCACHE_HITS = re.compile(r"^\s*(?:#\d+\s+[\d.]+\s+)?Hits:\s+(\d+)(?:\s*/\s*(\d+))?")
# ccache 3.x: "cache hit (direct)  12", "cache miss  41"
CCACHE3 = re.compile(r"^\s*(?:#\d+\s+[\d.]+\s+)?cache (hit \(direct\)|hit \(preprocessed\)|miss)\s+(\d+)")


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def compile_percent(line: str) -> int | None:
    """The compile's step counter in a build output line, as a percentage: Ninja's '#12 45.1 [97/459]
    Building ...' -> 21, or CMake's Makefiles' '#12 45.1 [ 42%] Building ...' -> 42."""
    steps = NINJA_STEPS.search(line)
    if steps:
        done, total = int(steps.group(1)), int(steps.group(2))
        return done * 100 // total if 0 <= done <= total and total > 0 else None
    match = PERCENT.search(line)
    if not match:
        return None
    value = int(match.group(1))
    return value if 0 <= value <= 100 else None


def estimate_left(percent: int, elapsed: float, last_seconds: float | None,
                  compile_elapsed: float | None = None) -> float | None:
    """Seconds left of the compile (estimate's figure)."""
    return estimate(percent, elapsed, last_seconds, compile_elapsed)[0]


def estimate(percent: int, elapsed: float, last_seconds: float | None,
             compile_elapsed: float | None = None) -> tuple[float | None, str]:
    """Seconds left of the compile, and where the figure comes from ("last build" or "extrapolated").

    With the last build's time: what is left of it, unless this compile's own pace (linear from its
    percentage over compile_elapsed, the time since its first counter line) is far ahead of it
    (OWN_PACE_AHEAD times), once OWN_PACE_FROM percent of it is behind: a warm ccache serves a one-file
    change's compile in seconds where the last, cold build took twenty minutes. Without the last
    build's time, or when this build already took longer: linear."""
    own = None
    run = elapsed if compile_elapsed is None else compile_elapsed
    if percent > 0 and run > 0:  # the compile's first counter line has no pace yet
        own = run * (100 - percent) / percent
    if last_seconds and last_seconds > 0 and elapsed < last_seconds:
        by_last = last_seconds - elapsed
        if own is not None and percent >= OWN_PACE_FROM and own * OWN_PACE_AHEAD < by_last:
            return own, "extrapolated"
        return by_last, "last build"
    return own, "extrapolated"


def ccache_stats(lines: Sequence[str]) -> tuple[int, int] | None:
    """(hits, cacheable calls) from ccache's --show-stats output in the build log, else None."""
    for line in lines:
        match = CCACHE_HITS.match(strip_ansi(line))
        if match:
            return int(match.group(1)), int(match.group(2) or 0)
    hits = misses = None
    for line in lines:
        match = CCACHE3.match(strip_ansi(line))
        if match:
            if match.group(1).startswith("hit"):
                hits = (hits or 0) + int(match.group(2))
            else:
                misses = int(match.group(2))
    if hits is not None and misses is not None:
        return hits, hits + misses
    return None


def hit_rate(stats: tuple[int, int] | None, tty: bool = False) -> str:
    if stats is None and tty:
        return "not captured (buildx's TTY display keeps no step logs; --progress plain shows it)"
    if stats is None:
        return "no compile ran (the compile step came from the layer cache)"
    hits, total = stats
    if total == 0:
        return "0 cacheable compiler calls"
    return f"{100.0 * hits / total:.0f}% ({hits}/{total} compiler calls)"


def size_text(size: int | None) -> str:
    if size is None:
        return "unknown"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size} B"


@dataclass
class CompileMeter:
    """Turns buildx output lines into compile status lines (see the module docstring).

    Times count from the start of the buildx run (what the lock's build_seconds measures); the
    linear extrapolation counts from the first counter line (the compile's own start)."""
    last_seconds: float | None = None  # the lock's last build time of this variant
    last_curve: CompileCurve | None = None  # the last compile's per-object times (the cache's)
    cuda_objects: int | None = None  # the CUDA objects this compile will build (counted in the tree)
    every: float = STATUS_EVERY
    clock: object = time.monotonic
    start: float = field(default=0.0)
    percent: int | None = None
    compile_start: float | None = None
    _shown_at: float = -1e9
    _shown_percent: int = -100
    kinds: list[EdgeKind] = field(default_factory=list)  # the kind of each Ninja edge, in the order they started
    finished: int = 0
    total: int = 0
    finish_times: list[float] = field(default_factory=list)  # seconds since the compile's start, per object

    def curve(self) -> CompileCurve | None:
        """This compile's per-object times, when its counter reached the end (for the next build's estimate)."""
        if self.total and len(self.finish_times) == self.total:
            return CompileCurve(self.total, tuple(self.finish_times))
        return None

    def __post_init__(self) -> None:
        self.start = self.clock()  # type: ignore[operator]

    def feed(self, line: str) -> str | None:
        """A status text when this line moves the compile on enough to say so, else None."""
        clean = strip_ansi(line)
        percent = compile_percent(clean)
        if percent is None:
            return None
        now = self.clock()  # type: ignore[operator]
        if self.compile_start is None:
            self.compile_start = now
        self.percent = percent
        edge = ninja_edge(clean)
        if edge is not None:
            done, self.total, kind = edge
            self.kinds.append(kind)
            if done > self.finished:
                self.finish_times += [now - self.compile_start] * (done - len(self.finish_times))
                self.finished = done
        if percent == self._shown_percent:
            return None
        if now - self._shown_at < self.every and percent - self._shown_percent < 10 and percent != 100:
            return None
        self._shown_at, self._shown_percent = now, percent
        return self.status(now)

    def status(self, now: float | None = None) -> str:
        now = self.clock() if now is None else now  # type: ignore[operator]
        elapsed = now - self.start
        percent = self.percent or 0
        text = f"compile {percent}% at {duration(elapsed)}"
        if percent >= 100:
            return text
        compile_elapsed = now - (self.compile_start or now)
        by_objects = self.by_objects(compile_elapsed)
        if by_objects is not None:
            return text + f", about {duration(by_objects[0])} left ({by_objects[1]})"
        left, source = estimate(percent, elapsed, self.last_seconds, compile_elapsed)
        if left is None:
            pass
        elif source == "last build":
            text += f", about {duration(left)} left (last build {duration(self.last_seconds or 0)})"
        elif self.last_seconds and elapsed < self.last_seconds:
            text += f", about {duration(left)} left (this compile's pace; last build {duration(self.last_seconds)})"
        else:
            text += f", about {duration(left)} left (extrapolated)"
        return text


    def by_objects(self, compile_elapsed: float) -> tuple[float, str] | None:
        """Seconds left and where the figure comes from, by the compile's objects (compilework.py)."""
        if self.last_curve is not None:
            left = left_by_curve(self.last_curve, self.total, self.finished, compile_elapsed)
            if left is not None:
                return left, "the last build's objects"
        if self.cuda_objects:
            left = left_by_kind(self.kinds, self.total, self.finished, self.cuda_objects, compile_elapsed)
            if left is not None:
                return left, f"objects by kind, {self.cuda_objects} CUDA"
        return None


class Stages:
    """Stage lines with elapsed times on a stream (stderr by default)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self.times: dict[str, float] = {}

    def _out(self) -> TextIO:
        return sys.stderr if self.stream is None else self.stream

    def say(self, text: str) -> None:
        display = active() if self.stream is None else None
        if display is not None:  # above the live display, which keeps drawing below
            display.say(f"buildkit: {text}")
            return
        out = self._out()
        out.write(f"buildkit: {text}\n")
        try:
            out.flush()
        except (AttributeError, ValueError):
            pass

    @contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        self.say(f"{name} ..." + (f" {redact_text(detail)}" if detail else ""))  # a URL's secret never shows

        display = active() if self.stream is None else None
        if display is not None:
            display.state.begin(name, redact_text(detail))
        start = time.monotonic()
        try:
            yield
        except BaseException:
            self.say(f"{name} failed after {duration(time.monotonic() - start)}")
            raise
        took = time.monotonic() - start
        self.times[name] = self.times.get(name, 0.0) + took  # the summary's total of the stage
        self.say(f"{name} done in {duration(took)}")  # this run of it (a process may build twice)


_STAGES = Stages()


def stages() -> Stages:
    """The process's stage reporter (stderr)."""
    return _STAGES


def stage(name: str, detail: str = "") -> AbstractContextManager[None]:
    return _STAGES.stage(name, detail)


def summary(variant: str, seconds: float, size: int | None, packed: int | None, ccache: tuple[int, int] | None,
            times: dict[str, float] | None = None, tty: bool = False) -> dict[str, Any]:
    """The facts of the final summary line (and of `build --json`); size is the engine's size of
    the image (Engine.image_size)."""
    return {"variant": variant, "build_seconds": round(seconds, 1), "image_size": size,
            "compressed_size": packed, "ccache_hits": ccache[0] if ccache else None,
            "ccache_calls": ccache[1] if ccache else None, "tty": tty,
            "stages": {k: round(v, 1) for k, v in (times or {}).items()}}


def summary_line(facts: Mapping[str, Any]) -> str:
    ccache = (facts["ccache_hits"], facts["ccache_calls"]) if facts["ccache_calls"] is not None else None
    size = size_text(facts["image_size"])
    if facts["compressed_size"] and size_text(facts["compressed_size"]) != size:
        size += f" ({size_text(facts['compressed_size'])} compressed)"
    stages_text = ", ".join(f"{k} {duration(v)}" for k, v in facts["stages"].items())
    return (f"summary: {facts['variant']} built in {duration(facts['build_seconds'])}; image {size}; "
            f"ccache {hit_rate(ccache, facts.get('tty', False))}" + (f"; stages: {stages_text}" if stages_text else ""))
