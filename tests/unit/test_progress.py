"""Progress output: the CMake counter, the estimate, ccache statistics, stage lines (pure)."""

from __future__ import annotations

import io

import pytest

from buildkit.core.livedisplay import duration
from buildkit.core.progress import (CompileMeter, Stages, ccache_stats, compile_percent, estimate_left, hit_rate,
                                    strip_ansi, summary_line)


def test_compile_percent_reads_cmake_counters_in_buildx_plain_lines():
    assert compile_percent("#14 45.12 [ 42%] Building CXX object ggml/src/CMakeFiles/ggml.dir/ggml.c.o") == 42
    assert compile_percent("#14 99.0 [100%] Built target llama-server") == 100
    assert compile_percent("#14 1.0 -- Configuring done") is None
    assert compile_percent(strip_ansi("\x1b[34m#14 3.1 [  7%] Building C object\x1b[0m")) == 7


def test_compile_percent_reads_ninjas_step_counter_but_not_buildx_step_lines():
    """The templates generate Ninja files: `[done/total] description`. buildx numbers its own steps in the
    same brackets; those lines are not the compile's."""
    assert compile_percent("#16 12.30 [97/459] Building CXX object src/CMakeFiles/llama.dir/llama.cpp.o") == 21
    assert compile_percent("#16 40.0 [459/459] Linking CXX executable bin/llama-server") == 100
    assert compile_percent("#16 0.9 [1/459] Generating build details from Git") == 0
    assert compile_percent("#8 [build 3/7] RUN apt-get update") is None
    assert compile_percent("#8 [2/5] COPY src/ /src/") is None
    assert compile_percent("#16 1.0 [5/0] Building C object x.o") is None
    assert compile_percent("#16 1.0 [9/5] Linking C executable x") is None


def test_estimate_uses_the_last_build_time_then_falls_back_to_linear():
    assert estimate_left(50, 100.0, 300.0) == pytest.approx(200.0)
    assert estimate_left(50, 100.0, None) == pytest.approx(100.0)
    assert estimate_left(50, 400.0, 300.0) == pytest.approx(400.0)  # slower than last time: linear
    assert estimate_left(0, 10.0, None) is None


def test_meter_speaks_on_ten_point_steps_or_after_its_interval():
    now = [0.0]
    meter = CompileMeter(last_seconds=600.0, every=30.0, clock=lambda: now[0])
    now[0] = 60.0
    first = meter.feed("#9 60.0 [  5%] Building C object a.o")
    assert first == "compile 5% at 1m00s, about 9m00s left (last build 10m00s)"
    now[0] = 61.0
    assert meter.feed("#9 61.0 [  6%] Building C object b.o") is None  # too soon, small step
    assert meter.feed("#9 61.0 [ 15%] Building C object c.o") is not None  # a 10-point step
    now[0] = 100.0
    assert meter.feed("#9 100.0 [ 16%] Building C object d.o") is not None  # interval passed
    assert meter.feed("#9 100.0 random line") is None
    now[0] = 700.0  # slower than the last build: linear from the compile's first counter line
    assert meter.feed("#9 700.0 [ 50%] Building C object e.o") == \
        "compile 50% at 11m40s, about 10m40s left (extrapolated)"
    assert meter.feed("#9 700.0 [100%] Built target x") == "compile 100% at 11m40s"
    assert meter.feed("#9 700.0 [100%] Built target y") is None  # said once


def test_a_warm_compile_after_a_cold_build_is_estimated_from_its_own_pace():
    """Issue 41: a one-file change's compile, served by the ccache, read "compile 90% at 8.0s, about 20m22s
    left (last build 20m30s)": the last (cold) build's time said nothing of this compile."""
    now = [0.0]
    meter = CompileMeter(last_seconds=1230.0, every=30.0, clock=lambda: now[0])
    now[0] = 3.0
    meter.feed("#9 3.0 [1/460] Building C object ggml/src/ggml.c.o")
    now[0] = 8.0
    line = meter.feed("#9 8.0 [414/460] Building CXX object common/arg.cpp.o")
    assert line is not None and line.startswith("compile 90% at 8.0s, about ")
    left = line.split("about ")[1].split(" left")[0]
    assert left.endswith("s") and "m" not in left, line  # seconds, not the 20 minutes of the cold build
    assert "this compile's pace; last build 20m30s" in line
    # the first counter line gives no pace: no "about 0.0s left"
    first = CompileMeter(clock=lambda: 102.0)
    assert first.feed("#17 2.2 [1/30] Linking C shared library bin/libggml-base.so") == "compile 3% at 0.0s"
    # early on, a few fast first steps do not yet overrule the last build's time
    assert estimate_left(5, 60.0, 600.0, compile_elapsed=1.0) == pytest.approx(540.0)


CCACHE4 = """#14 120.3 Cacheable calls:   53 /  60 (88.33%)
#14 120.3   Hits:            40 /  53 (75.47%)
#14 120.3     Direct:        40 /  40 (100.0%)
#14 120.3   Misses:          13 /  53 (24.53%)
#14 120.3 Local storage:
#14 120.3   Hits:            40 /  53 (75.47%)
""".splitlines()


def test_ccache_statistics_of_ccache4_and_ccache3():
    assert ccache_stats(CCACHE4) == (40, 53)
    assert ccache_stats(["#3 1.0 cache hit (direct)   10", "#3 1.0 cache hit (preprocessed) 2",
                         "#3 1.0 cache miss   4"]) == (12, 16)
    assert ccache_stats(["nothing"]) is None
    # every call recached (reproduce): ccache 4.7 prints no ratio when nothing was cacheable
    recached = ["#14 9.1 Cacheable calls:      0 /   22 ( 0.00%)", "#14 9.1   Hits:               0",
                "#14 9.1     Direct:           0", "#14 9.1   Misses:             0",
                "#14 9.1 Uncacheable calls:   22 /   22 (100.0%)"]
    assert ccache_stats(recached) == (0, 0) and hit_rate((0, 0)) == "0 cacheable compiler calls"
    assert hit_rate((40, 53)) == "75% (40/53 compiler calls)"
    assert "layer cache" in hit_rate(None)


def test_stage_lines_carry_elapsed_times_and_failures():
    out = io.StringIO()
    stages = Stages(out)
    with stages.stage("fetch", "url"):
        pass
    with pytest.raises(RuntimeError):
        with stages.stage("build"):
            raise RuntimeError("x")
    lines = out.getvalue().splitlines()
    assert lines[0] == "buildkit: fetch ... url"
    assert lines[1].startswith("buildkit: fetch done in ") and lines[1].endswith("s")
    assert lines[3].startswith("buildkit: build failed after ")
    assert "fetch" in stages.times and "build" not in stages.times


def test_duration_and_summary_line():
    assert duration(1.234) == "1.2s" and duration(190) == "3m10s" and duration(3725) == "1h02m"
    line = summary_line({"variant": "cpu", "build_seconds": 75.0, "image_size": 91_000_000,
                         "compressed_size": 30_000_000, "ccache_hits": 0, "ccache_calls": 53,
                         "stages": {"fetch": 1.0}})
    assert line == ("summary: cpu built in 1m15s; image 91.00 MB (30.00 MB compressed); "
                    "ccache 0% (0/53 compiler calls); stages: fetch 1.0s")


def test_buildx_output_on_a_terminal_passes_through_a_pseudo_terminal_byte_for_byte():
    """What `run_build` does when stderr is a terminal: the child sees a TTY (so buildx draws its
    display), its bytes reach the terminal unchanged, and the lines still reach the meter."""
    import os
    import pty
    import sys

    from buildkit.engine.runner import _lines_from_pty, _popen_tty, wants_tty

    master, slave = pty.openpty()  # our "terminal"
    with open(slave, "w", closefd=True) as terminal:
        assert wants_tty("auto", terminal)
        assert not wants_tty("plain", terminal)
        argv = [sys.executable, "-c", "import sys; print(sys.stdout.isatty()); print('#9 1.0 [ 42%] Building')"]
        proc, child_master = _popen_tty(argv, terminal)
        lines = [ln.rstrip("\r") for ln in _lines_from_pty(proc, child_master, terminal)]
        os.close(child_master)
        assert proc.wait() == 0
    seen = os.read(master, 4096).decode()
    os.close(master)
    assert lines[:2] == ["True", "#9 1.0 [ 42%] Building"]
    assert "[ 42%] Building" in seen and compile_percent(lines[1]) == 42
    assert not wants_tty("auto", io.StringIO())


def test_a_stage_line_shows_this_run_of_the_stage_not_the_process_total(monkeypatch):
    import io

    from buildkit.core import progress

    now = iter([0.0, 64.0, 100.0, 117.0])  # two builds in one process: 64 s, then 17 s
    monkeypatch.setattr("buildkit.core.progress.time.monotonic", lambda: next(now))
    out = io.StringIO()
    reporter = progress.Stages(out)
    for _ in range(2):
        with reporter.stage("build"):
            pass
    assert [line for line in out.getvalue().splitlines() if "done" in line] == [
        "buildkit: build done in 1m04s", "buildkit: build done in 17.0s"]
    assert reporter.times["build"] == 81.0
