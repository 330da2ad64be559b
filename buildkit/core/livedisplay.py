"""buildkit's own live display on a terminal (rich, a well-kept library, rather than escapes drawn by hand):
the stage, the compile's progress bar with the time left, the ccache hits so far and buildx's current step,
redrawn in place below the stage lines, which print above it as before.

It runs only where stderr is a terminal and build.progress is `auto`. Off a terminal the plain lines stay
(core/progress.py); `--progress tty` gives buildx's own display and `--progress plain` its raw lines.
What it shows is read from buildx's plain output: the step lines (`#12 [build 5/9] RUN ...`), CMake's
`[ 42%]` (progress.CompileMeter) and the template's `ccache so far: H hits, M misses` lines (templates/_build.j2
prints them every 15 s of the compile). Parsing is pure (LiveState, unit-tested); rich draws it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported when a display starts
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult

STEP = re.compile(r"^#\d+ \[([^\]]+)\] (.+)$")
CCACHE_SO_FAR = re.compile(r"ccache so far: (\d+) hits, (\d+) misses")
_ACTIVE: list[LiveDisplay] = []


def duration(seconds: float) -> str:
    """1.234 -> '1.2s'; 190 -> '3m10s'; 3725 -> '1h02m'."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


@dataclass
class LiveState:
    """What the display shows, fed line by line."""
    stage: str = ""
    detail: str = ""
    stage_start: float = field(default_factory=time.monotonic)
    step: str = ""
    ccache: tuple[int, int] | None = None  # (hits, misses) so far
    meter: object | None = None  # the compile's progress.CompileMeter

    def begin(self, stage: str, detail: str = "") -> None:
        self.stage, self.detail, self.stage_start = stage, detail, time.monotonic()

    def feed(self, line: str) -> None:
        """One line of buildx's plain output."""
        so_far = CCACHE_SO_FAR.search(line)
        if so_far:
            self.ccache = (int(so_far.group(1)), int(so_far.group(2)))
            return
        step = STEP.match(line)
        if step and not step.group(2).startswith(("DONE", "CACHED", "sha256:")):
            self.step = f"[{step.group(1)}] {' '.join(step.group(2).split())}"

    def rows(self, now: float | None = None) -> list[tuple[str, str]]:
        """(label, text) rows, the bar aside: stage, compile, ccache, buildx."""
        now = time.monotonic() if now is None else now
        rows = [("stage", f"{self.stage} {self.detail}".strip() + f" · {duration(now - self.stage_start)}")]
        meter = self.meter
        if meter is not None and getattr(meter, "percent", None) is not None:
            rows.append(("compile", meter.status().removeprefix("compile ")))  # type: ignore[attr-defined]
        if self.ccache is not None:
            hits, misses = self.ccache
            rows.append(("ccache", f"{hits} hits, {misses} misses so far"))
        if self.step:
            rows.append(("buildx", self.step))
        return rows


class LiveDisplay:
    """The rich Live area of one command; stage lines and buildkit's own lines print above it."""

    def __init__(self, console: Console) -> None:
        from rich.live import Live

        self.console = console
        self.state = LiveState()
        self.live = Live(self, console=console, refresh_per_second=4, transient=True, redirect_stderr=False)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text  # plain text: buildx's "[build 4/7]" is no markup

        label, bar = 8, 30
        room = max(20, options.max_width - label)  # the labels keep their width; the texts are cut to fit
        meter = self.state.meter
        for name, text in self.state.rows():
            row = Table.grid(padding=(0, 1))
            row.add_column(style="bold cyan", no_wrap=True, width=label - 1)
            cells: list[RenderableType] = [name]
            if name == "compile" and meter is not None:
                row.add_column(width=bar)
                cells.append(ProgressBar(total=100, completed=getattr(meter, "percent", 0) or 0, width=bar))
                room -= bar + 1
            row.add_column(no_wrap=True, width=room)
            line = Text(text, no_wrap=True, overflow="ellipsis")
            line.truncate(room, overflow="ellipsis")
            row.add_row(*cells, line)
            yield row
            room = max(20, options.max_width - label)

    def say(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


class _Sink:
    """The stream buildx's piped lines are written to while the display draws: buildkit's own lines (the
    engine turn's notices) print above the display, buildx's lines go to the display only (on_line)."""

    def __init__(self, display: LiveDisplay) -> None:
        self.display = display

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.startswith("buildkit:"):
                self.display.say(line)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def active() -> LiveDisplay | None:
    return _ACTIVE[-1] if _ACTIVE else None


def sink(display: LiveDisplay) -> _Sink:
    return _Sink(display)


@contextmanager
def live_display(enabled: bool) -> Iterator[LiveDisplay | None]:
    """The display for the body when enabled (stderr a terminal, build.progress auto), else nothing."""
    if not enabled:
        yield None
        return
    from rich.console import Console

    display = LiveDisplay(Console(stderr=True))
    _ACTIVE.append(display)
    try:
        with display.live:
            yield display
    finally:
        _ACTIVE.remove(display)
