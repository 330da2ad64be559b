"""verify's cpu-load reads the dynamic loader's trace (verify/loadertrace.py), not llama.cpp's log line.

data/ld_debug_list_devices.txt: `LD_DEBUG=files /app/llama-server -lv 10 --list-devices` in the real
tree's default image on an AVX-512 machine (the loader's `dynamic:`/`entry:` address lines left out).
ggml opened and closed every variant to score it, then opened zen4 again and kept it.
"""

from __future__ import annotations

from pathlib import Path

from buildkit.verify import loadertrace

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
    assert "/app/lib/libggml-cpu-zen4.so" in kept and "/app/lib/libggml-cpu-x64.so" not in kept
