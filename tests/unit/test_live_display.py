"""buildkit's live display (core/livedisplay.py): fed buildx's plain lines it shows the stage, the compile's bar
with the time left, the ccache hits so far and buildx's step; stage lines and buildkit's own lines print
above it; without a terminal nothing of it runs. The template prints the ccache figures it reads."""

import io

from rich.console import Console

from buildkit.core import livedisplay
from buildkit.core.livedisplay import LiveDisplay, LiveState, live_display
from buildkit.core.progress import CompileMeter, Stages
from buildkit.plan.render import render_dockerfile

from test_plan_render import plan_for

LINES = [
    "#11 [build 4/7] RUN --mount=type=cache,id=llama-buildkit-ccache-cpu-amd64,target=/ccache     export CCACHE_DIR",
    "#11 12.3 [ 10%] Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o",
    "#11 27.0 ccache so far: 12 hits, 41 misses",
    "#11 40.2 [ 42%] Building CXX object src/CMakeFiles/llama.dir/llama.cpp.o",
    "#11 DONE 96.1s",
]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fed(lines=LINES) -> LiveState:
    clock = Clock()
    state = LiveState()
    state.begin("build", "tiny-fork:cpu")
    state.meter = CompileMeter(last_seconds=None, clock=clock)
    for line in lines:
        clock.now += 10
        state.meter.feed(line)
        state.feed(line)
    return state


def test_the_state_holds_the_step_the_compile_and_the_ccache_so_far():
    state = fed()
    rows = dict(state.rows())
    assert rows["stage"].startswith("build tiny-fork:cpu")
    assert rows["buildx"].startswith("[build 4/7] RUN --mount=type=cache")  # DONE did not replace it
    assert rows["ccache"] == "12 hits, 41 misses so far"
    assert rows["compile"].startswith("42% at ") and "left" in rows["compile"]
    assert isinstance(state.meter, CompileMeter) and state.meter.percent == 42


def test_before_the_compile_only_the_stage_and_step_show():
    state = fed(LINES[:1])
    assert [label for label, _ in state.rows()] == ["stage", "buildx"]


def test_rich_draws_the_bar_and_every_row():
    console = Console(file=io.StringIO(), width=120, record=True, color_system=None)
    display = LiveDisplay(console)
    display.state = fed()
    console.print(display)
    text = console.export_text()
    for part in ("stage", "build tiny-fork:cpu", "compile", "42% at", "ccache", "12 hits, 41 misses so far",
                 "buildx", "[build 4/7]"):
        assert part in text, text
    assert "━" in text  # the progress bar


def test_stage_lines_and_buildkits_own_lines_print_above_and_buildx_lines_do_not():
    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None)
    display = LiveDisplay(console)
    livedisplay._ACTIVE.append(display)
    try:
        stages = Stages()
        with stages.stage("fetch", "https://example.invalid/fork"):
            assert display.state.stage == "fetch"
        sink = livedisplay.sink(display)
        sink.write("#11 12.3 [ 10%] Building C object\n")
        sink.write("buildkit: waiting for the engine turn\n")
    finally:
        livedisplay._ACTIVE.remove(display)
    text = out.getvalue()
    assert "buildkit: fetch ... https://example.invalid/fork" in text and "buildkit: fetch done in" in text
    assert "waiting for the engine turn" in text and "Building C object" not in text


def test_no_terminal_no_display():
    with live_display(False) as display:
        assert display is None and livedisplay.active() is None


def test_the_compile_step_prints_the_ccache_figures_the_display_reads():
    text = render_dockerfile(plan_for(**{"build.arch": "cpu"}))
    assert "ccache --print-stats" in text and '"ccache so far: "' in text
    assert "kill $!" in text  # the loop stops before the final statistics
    assert "ccache so far" not in render_dockerfile(plan_for(**{"build.arch": "cpu", "build.ccache": False}))
