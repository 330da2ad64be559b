"""gpu-check believes the process and the tool, and reads what it is given as input (issue 48, items 4 and 7):
a crash after the summary, an exit code other than the cases say, a backend line that says FAIL are failures;
a log is a regular file read bounded, plain or compressed, in linear time; a --compare file is checked field
by field; a case name never drives the terminal or breaks the step summary's table.

The logs are written here in test-backend-ops' own format (tests/unit/data, verify/backendops.py's
docstring); the CLI runs as a real process where the old code needed one to fail safely (a FIFO it waited on,
/dev/zero and a 1 GiB log it read whole: those run with their address space capped at 1 GiB)."""

from __future__ import annotations

import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cliutil import cli_env

from buildkit.cli.main import main
from buildkit.verify.backendops import parse
from buildkit.verify.backendverdict import judge

DATA = Path(__file__).parent / "data"
H200 = Path(__file__).resolve().parents[2] / "docs" / "gpu-runs" / "2026-12-05-h200"
PASSING = ("Testing 2 devices\n\nBackend 1/2: CUDA0\n  Device description: NVIDIA H200\n"
           "  ADD(type=f32,ne=[16,5,4,3]): \x1b[1;32mOK\x1b[0m\n  MUL(type=f32,ne=[16,5,4,3]): \x1b[1;32mOK\x1b[0m\n"
           "  2/2 tests passed\n  Backend CUDA0: \x1b[1;32mOK\x1b[0m\nBackend 2/2: CPU\n  Skipping\n"
           "2/2 backends passed\n\x1b[1;32mOK\x1b[0m\n")


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, monkeypatch):
    """Each test runs in its own folder (no buildkit.toml there: the default settings)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LLAMA_BUILDKIT_CONFIG", raising=False)


def gpu_check(tmp_path: Path, *args: str):
    return CliRunner().invoke(main, ["gpu-check", *args])


def write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


# ---------------------------------------------------------------- the process and the tool (item 4)

def test_a_crash_after_a_complete_summary_fails(tmp_path):
    got = gpu_check(tmp_path, "--log", write(tmp_path, "crash.log", PASSING + "double free detected in tcache 2\n"))
    assert got.exit_code == 1, got.output
    assert got.output.splitlines()[0] == ("gpu-check CUDA0: FAIL: test-backend-ops crashed after its summary: "
                                          "double free detected in tcache 2 (2/2 cases passed)")
    # stderr read after the buffered stdout (docker's attach does that) is no crash
    late = write(tmp_path, "late.log", PASSING + "load_backend: loaded CPU backend from /app/lib/libggml-cpu.so\n")
    assert gpu_check(tmp_path, "--log", late).exit_code == 0


@pytest.mark.parametrize("code, said", [(134, "exit code 134 (SIGABRT)"), (-11, "killed by SIGSEGV"),
                                        (1, "exit code 1")])
def test_an_exit_code_the_cases_do_not_explain_fails(code, said):
    check = judge(parse(PASSING), "CUDA0", exit_code=code)
    assert not check.ok and check.problem == f"test-backend-ops ended with {said} after its summary"
    assert judge(parse(PASSING), "CUDA0", exit_code=0).ok


def test_gpu_runs_log_carries_the_exit_code_to_gpu_check_log(tmp_path):
    """scripts/gpu_run.py ends backend-ops.log with the process's exit code, so --log judges it as the GPU host did."""
    log = write(tmp_path, "backend-ops.log", PASSING + "[gpu_run] test-backend-ops exited with code 134\n")
    got = gpu_check(tmp_path, "--log", log)
    assert got.exit_code == 1 and "ended with exit code 134 (SIGABRT) after its summary" in got.output
    ok = write(tmp_path, "ok.log", PASSING + "[gpu_run] test-backend-ops exited with code 0\n")
    assert gpu_check(tmp_path, "--log", ok).exit_code == 0


@pytest.mark.parametrize("lie, said", [
    ("  Backend CUDA0: \x1b[1;32mOK", "  Backend CUDA0: \x1b[1;31mFAIL"),
    ("2/2 backends passed", "1/2 backends passed"),
    ("2/2 backends passed\n\x1b[1;32mOK", "2/2 backends passed\n\x1b[1;31mFAIL")],
    ids=["Backend CUDA0: FAIL", "1/2 backends passed", "last line FAIL"])
def test_a_tool_line_that_says_fail_while_every_case_passed_fails(lie, said):
    check = judge(parse(PASSING.replace(lie, said)), "CUDA0")
    assert not check.ok and check.problem.startswith("test-backend-ops says ")
    assert check.problem.endswith(" but no case failed")


# ---------------------------------------------------------------- the log as input (item 4)

def capped_gpu_check(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """The CLI in a child whose address space is capped at 1 GiB (the old code read a log whole)."""
    code = ("import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            "sys.argv = ['buildkit', *sys.argv[1:]]; runpy.run_module('buildkit.cli', run_name='__main__')")
    env = cli_env(tmp_path / "cache")
    return subprocess.run([sys.executable, "-c", code, "gpu-check", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-1500:]
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr[-1500:]
    return proc.stderr.strip()


def test_a_fifo_dev_zero_and_a_1_gib_log_are_one_line_each(tmp_path):
    os.mkfifo(tmp_path / "fifo.log")
    with open(tmp_path / "huge.log", "wb") as fh:
        fh.truncate(1 << 30)  # sparse: 1 GiB of text to a reader, no disk
    assert "fifo.log is a FIFO, not a file" in one_error_line(capped_gpu_check(tmp_path, "--log", "fifo.log"))
    assert "/dev/zero is a character device, not a file" in one_error_line(capped_gpu_check(tmp_path, "--log",
                                                                                           "/dev/zero"))
    said = one_error_line(capped_gpu_check(tmp_path, "--log", "huge.log"))
    assert said == "error: --log: huge.log is over 64 MiB, the most buildkit reads of a log"


def test_a_compressed_log_is_read_within_the_same_limit(tmp_path):
    """The H200's full run, kept as .xz (docs/gpu-runs/2026-12-05-h200/): judged as the GPU host judged it.
    An xz that unpacks past the limit, one whose dictionary is 1.5 GiB, a truncated one and a zstd one (no
    decompressor before Python 3.14) are one line each."""
    got = gpu_check(tmp_path, "--log", str(H200 / "fix.backend-ops.log.xz"))
    assert got.exit_code == 0 and got.output == "gpu-check CUDA0: PASS 12195/12195 cases passed\n"
    (tmp_path / "bomb.log.xz").write_bytes(lzma.compress(b"x" * (65 << 20), preset=0))  # 10 KB
    got = gpu_check(tmp_path, "--log", "bomb.log.xz")
    assert got.exit_code == 1 and got.output.strip() == (
        "error: --log: bomb.log.xz holds over 64 MiB of text (xz), the most buildkit reads of a log")
    dictionary = [{"id": lzma.FILTER_LZMA2, "dict_size": 1536 << 20}]  # the decoder would allocate 1.5 GiB
    (tmp_path / "wide.log.xz").write_bytes(lzma.compress(PASSING.encode(), filters=dictionary))
    got = gpu_check(tmp_path, "--log", "wide.log.xz")
    assert got.exit_code == 1 and got.output.strip() == (
        "error: --log: wide.log.xz asks for more than 256 MiB to decompress (its xz dictionary), the most buildkit "
        "gives a log")
    (tmp_path / "cut.log.xz").write_bytes((H200 / "fix.backend-ops.log.xz").read_bytes()[:20000])
    got = gpu_check(tmp_path, "--log", "cut.log.xz")
    assert got.exit_code == 1 and got.output.startswith("error: --log: cut.log.xz is not a whole xz stream")
    if sys.version_info < (3, 14):
        (tmp_path / "run.log.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(64))
        got = gpu_check(tmp_path, "--log", "run.log.zst")
        assert got.exit_code == 1 and "is zstd-compressed and this Python has no zstd decompressor" in got.output


def test_a_line_that_made_the_old_case_expression_quadratic_is_read_as_it_is(tmp_path):
    """`  a(` repeated with no `): ` (the old expression took every start, then every end: hours for 1 MiB),
    then a passing run: read in linear time (bench/hostile_log.py), the line kept as the crash reason it is."""
    got = gpu_check(tmp_path, "--log", write(tmp_path, "run.log", "  a(" * (1 << 18) + "\n" + PASSING))
    assert got.exit_code == 0 and got.output == "gpu-check CUDA0: PASS 2/2 cases passed\n"


@pytest.mark.parametrize("record, said", [
    ('{"passed": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ('{"passed": 1e999, "total": 3, "failing": []}', "passed is float, not int"),
    ('{"failing": [{"case": ["x"]}]}', "case is list, not str"),
    ('{"failing": "ARGMAX"}', "failing is str, not list")], ids=["nested 100,000 deep", "1e999", "a list", "a string"])
def test_a_compare_file_that_is_no_result_is_one_line(tmp_path, record, said):
    (tmp_path / "release.json").write_text(record)
    got = gpu_check(tmp_path, "--log", str(DATA / "backendops-cuda-argmax.txt"), "--compare", "release.json")
    assert got.exit_code == 1 and got.exception is None or isinstance(got.exception, SystemExit)
    assert got.output.splitlines()[-1] == f"error: --compare release.json: not a gpu-check result ({said})"


# ---------------------------------------------------------------- what a case name may carry (item 7)

HOSTILE = {"OSC title": "\x1b]0;owned\x07", "OSC 52": "\x1b]52;c;cm0gLXJmIH4=\x07", "DCS": "\x1bP1$r\x1b\\",
           "C1 CSI": "\x9b2J", "alternate screen": "\x1b[?1049h", "bidi": "\u202e"}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_case_name_never_sends_a_control_sequence(tmp_path, name):
    case = f"ARGMAX(type=f32,name={HOSTILE[name]})"  # what a fork's own test code may print as a parameter
    log = PASSING.replace("  2/2 tests passed", f"{HOSTILE[name]} sentinel mismatch   {case}: \x1b[1;31mFAIL\x1b[0m\n"
                          "  2/3 tests passed").replace("Backend CUDA0: \x1b[1;32mOK", "Backend CUDA0: \x1b[1;31mFAIL")
    log = log.replace("2/2 backends passed\n\x1b[1;32mOK", "1/2 backends passed\n\x1b[1;31mFAIL")
    got = gpu_check(tmp_path, "--log", write(tmp_path, "run.log", log), "--json", "r.json", "--step-summary", "s.md")
    assert got.exit_code == 1, got.output
    for text in (got.output, (tmp_path / "s.md").read_text()):
        assert not any(ch in text for ch in "\x1b\x07\x9b\u202e"), repr(text)
    recorded = json.loads((tmp_path / "r.json").read_text())["failing"][0]["case"]
    assert recorded.isprintable() and recorded.startswith("ARGMAX(type=f32,name=") and recorded in got.output
    if name == "OSC title":
        assert recorded == "ARGMAX(type=f32,name=\\x1b]0;owned\\x07)"


def test_a_pipe_or_html_in_a_case_name_stays_in_its_cell(tmp_path):
    case = "ADD(a=|b|,c=<img src=x onerror=alert(1)>)"
    log = PASSING.replace("  2/2 tests passed", f"[ADD] ERR = 1 | <b>x</b>   {case}: \x1b[1;31mFAIL\x1b[0m\n"
                          "  2/3 tests passed").replace("Backend CUDA0: \x1b[1;32mOK", "Backend CUDA0: \x1b[1;31mFAIL")
    log = log.replace("2/2 backends passed\n\x1b[1;32mOK", "1/2 backends passed\n\x1b[1;31mFAIL")
    got = gpu_check(tmp_path, "--log", write(tmp_path, "run.log", log), "--step-summary", "s.md")
    assert got.exit_code == 1
    rows = [r for r in (tmp_path / "s.md").read_text().splitlines() if r.startswith("| ")]
    cells = [[c for c in _cells(r)] for r in rows]
    assert [len(c) for c in cells] == [3, 3, 3], rows  # header, rule, the one failing case
    # the case a code span (nothing in one is HTML), its pipes escaped; the error plain text, every mark escaped
    assert rows[2] == ("| `ADD(a=\\|b\\|,c=<img src=x onerror=alert(1)>)` | \\[ADD\\] ERR \\= 1 \\| "
                       "\\<b\\>x\\<\\/b\\> | no |")


def _cells(row: str) -> list[str]:
    """The cells of a GitHub table row: split on | not escaped by a backslash."""
    cells, cell, escaped = [], "", False
    for ch in row.strip()[1:-1]:
        if ch == "|" and not escaped:
            cells.append(cell)
            cell = ""
        else:
            cell += ch
        escaped = ch == "\\" and not escaped
    return cells + [cell]
