"""verify's cpu-load reads the dynamic loader's trace (verify/loadertrace.py), not llama.cpp's log line.

data/ld_debug_list_devices.txt: `LD_DEBUG=files /app/llama-server -lv 10 --list-devices` in the real
tree's default image on an AVX-512 machine (the loader's `dynamic:`/`entry:` address lines left out).
ggml opened and closed every variant to score it, then opened zen4 again and kept it.
"""

from __future__ import annotations

from pathlib import Path

from buildkit.core import ggmlcpu
from buildkit.verify import loadertrace
from buildkit.verify.checks import check_cpu_loaded
from buildkit.core.check import Status
from fakeengine import FakeEngine
from test_plan_render import plan_for

TRACE = (Path(__file__).parent / "data" / "ld_debug_list_devices.txt").read_text()
LOG_LINE = "0.00.113.513 I load_backend: loaded CPU backend from /app/lib/libggml-cpu-zen4.so\n"


def test_the_variant_still_mapped_at_exit_is_the_one_in_use():
    assert TRACE.count("generating link map") > 14  # every variant was opened to be scored
    assert loadertrace.mapped_at_exit(TRACE, "libggml-cpu") == ["/app/lib/libggml-cpu-zen4.so"]


def test_a_lost_log_line_changes_nothing():
    # common_log prints from a worker thread that exit(0) may end first: the line is sometimes missing
    assert LOG_LINE in TRACE
    assert loadertrace.mapped_at_exit(TRACE.replace(LOG_LINE, ""), "libggml-cpu") == ["/app/lib/libggml-cpu-zen4.so"]


def test_the_program_lines_leave_the_trace_out():
    assert loadertrace.program_lines(TRACE) == [LOG_LINE.strip(), "Available devices:", "  (none)"]


def test_no_backend_left_mapped_and_no_trace_are_told_apart():
    scored_only = "\n".join(ln for ln in TRACE.splitlines()
                            if not ("libggml-cpu-zen4.so" in ln and "generating" in ln))
    # zen4 was both opened to be scored and kept: without its openings only its unmappings are left
    assert loadertrace.mapped_at_exit(scored_only, "libggml-cpu") == []
    assert loadertrace.mapped_at_exit("Available devices:\n  (none)\n", "libggml-cpu") is None


def test_only_files_of_the_prefix_count():
    assert "libggml-base.so" in TRACE
    kept = loadertrace.mapped_at_exit(TRACE, "libggml")
    assert kept is not None
    assert "/app/lib/libggml-cpu-zen4.so" in kept and "/app/lib/libggml-cpu-x64.so" not in kept


def test_several_backends_left_mapped_are_named():
    # a ggml that kept every variant it scored open: the trace alone cannot say which one is in use
    kept_open = "\n".join(ln for ln in TRACE.splitlines() if "destroying link map" not in ln)
    assert len(loadertrace.mapped_at_exit(kept_open, "libggml-cpu") or []) == 14
    # verify then takes the one llama.cpp's log line names, and fails without it
    assert cpu_load(kept_open).status == Status.PASSED
    failed = cpu_load(kept_open.replace(LOG_LINE, ""))
    assert failed.status == Status.FAILED and "kept 14 CPU backends loaded" in failed.detail


ZEN4 = set(ggmlcpu.X86_VARIANTS["zen4"])  # the trace's machine, as the features ggml's score reads
NAMES = sorted(ggmlcpu.X86_VARIANTS)  # the default image's variants


def cpu_load(output: str, host: set[str] = ZEN4):
    """verify's cpu-load check of the default image whose --list-devices printed output."""
    plan = plan_for(**{"build.arch": "cpu", "build.platform": "linux/amd64"})
    engine = FakeEngine(run_result=lambda image, entrypoint, args: (0, output))
    check = check_cpu_loaded(engine, plan, "img", NAMES, host)
    assert engine.calls == [("run", "img", ("/app/llama-server",), ("-lv", "10", "--list-devices"))]
    assert engine.run_env == {"LD_DEBUG": "files"}
    return check


def test_verify_names_the_variant_in_use_with_or_without_the_log_line():
    for output in (TRACE, TRACE.replace(LOG_LINE, "")):
        check = cpu_load(output)
        assert (check.status, check.detail) == (Status.PASSED,
                                                "loaded /app/lib/libggml-cpu-zen4.so (the best for this CPU)")
    # the image's ggml took zen4 where ggml's score picks another variant: failed
    wrong = cpu_load(TRACE, set(ggmlcpu.X86_VARIANTS["haswell"]))
    assert wrong.status == Status.FAILED and wrong.detail.endswith("this machine's best is libggml-cpu-haswell.so")
    # CI's case: no trace and no log line
    lost = cpu_load("Available devices:\n  (none)\n")
    assert lost.status == Status.FAILED and "loaded no CPU backend: ['Available devices:', '  (none)']" in lost.detail
