"""The console output of the fork's `test-backend-ops` read back (pure): each case, the summary, the verdict.

test-backend-ops (tests/test-backend-ops.cpp of llama.cpp and its forks) prints, for every case of the
backend under test (`-b CUDA0`), one line `  OP(params): OK` or `FAIL` (green/red ANSI colours), or
`not supported [CUDA0]`. In `test` mode the reasons of a failure come BEFORE the case's name on the same
line, as the comparison callback prints them without a newline: `sentinel mismatch: sent_2 ` (a write
past a tensor's end), `[OP] NaN at index ...`, `[OP] inf mismatch ...`, `[OP] ERR = 0.1 > 0.0000001 `
(NMSE in older trees); in `grad` mode they come after it (`[OP] MAA = ... `, `compare failed `). A case
whose tensors cannot be allocated prints `failed to allocate tensors [CUDA0] ` and no case line. Then:
`  N/M tests passed`, `\\nFailing tests:` with one `  OP(params)` per failed case, `  Backend CUDA0: OK`
or `FAIL`, and last `K/N backends passed` and `OK`/`FAIL`. A backend not asked for is `Skipping`;
without -b the CPU backend is `Skipping CPU backend` in test mode (it is the reference itself).

Anything else (a CUDA error, an abort on stderr) is kept in order: a failed case gets the lines that
came since the case before it, and a run that never reached its summary keeps its last lines as the
reason it is not a result. What comes after the tool's last line is kept apart (`after_summary`): a line
there that a crash prints (`double free detected in tcache 2` as the process exits, CRASH) is one to the
verdict (backendverdict.py). Other lines there are no reason: stdout and stderr are two streams, and what
the program wrote to stderr early may be read after its buffered stdout (docker's attach does that).
scripts/gpu_run.py ends the log it writes with `[gpu_run] test-backend-ops exited with code N`.

The log is input (issue 48): it is read in linear time and bounded memory, and every text kept of it is
printable, so a case name carrying an OSC, DCS or CSI sequence is shown as its escapes, never sent.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from buildkit.core.printable import printable

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Each pattern is matched once per line and never backtracks more than its own run: a log of 1 GiB (or one
# line of it) is read in linear time. A case line is found from its end (see _case_line), not by an
# expression tried from every start (`^(.*?)  OP\((.*)\): (.*)$` was quadratic in a line's length).
CASE_NAME = re.compile(r"  ([A-Za-z_][A-Za-z0-9_]*)\(")
NOT_SUPPORTED = re.compile(r"^not supported \[[^\]]*\]\s*$")
LARGE_SKIP = re.compile(r"^skipping large tensors for speed\s*$")
TESTS_PASSED = re.compile(r"^\s*(\d{1,9})/(\d{1,9}) tests passed\s*$")
BACKEND_STATUS = re.compile(r"^\s*Backend (\S+): (OK|FAIL)\s*$")
BACKEND_INIT = re.compile(r"^Backend (\d+)/(\d+): (\S+)\s*$")
BACKENDS_PASSED = re.compile(r"^(\d{1,9})/(\d{1,9}) backends passed\s*$")
ALLOC_FAILED = re.compile(r"failed to allocate tensors \[[^\]\n]{0,256}\]")
QUIET = re.compile(r"^\s*(Testing \d+ devices|Device description:|Device memory:|Skipping|OK$|FAIL$)")
#: What glibc, the C++ runtime, a sanitizer, the kernel's shell message or ggml print when a process dies.
CRASH = re.compile(r"double free|free\(\): |malloc\(\): |malloc_consolidate|corrupted (size|double-linked|top)|"
                   r"munmap_chunk|Segmentation fault|Aborted|core dumped|terminate called|stack smashing|"
                   r"Sanitizer|CUDA error|GGML_ASSERT|GGML_ABORT|SIGSEGV|SIGABRT|SIGBUS", re.I)
#: The line scripts/gpu_run.py (gpu/backendrun.py) ends its backend-ops.log with: the process's exit code.
EXIT_LINE = re.compile(r"^\[gpu_run\] test-backend-ops exited with code (-?\d{1,9})$")
KEPT_TAIL = 12
MAX_LINE = 8192  # characters of a line that are read (core/logfile.py cuts there too)
MAX_FAILED = 20_000  # failing cases kept (the whole suite is about 17,000 cases on CUDA)


@dataclass(frozen=True)
class Case:
    """One case of the run: its name as the tool prints it, `OP(params)`, and what it printed of its failure."""
    name: str
    op: str
    passed: bool
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class BackendOps:
    """One run of test-backend-ops, as printed. passed/total are the tool's own summary (None: it never
    printed one); failed is every failed case, from its case line or the closing list. Every text of the
    log kept here (case names, errors, the tail) is printable (core/printable.py): no control sequence."""
    backends: tuple[str, ...]  # the backends it tested (not the skipped ones)
    skipped: tuple[str, ...]
    passed: int | None
    total: int | None
    failed: tuple[Case, ...]
    ok_lines: int  # case lines that said OK
    not_supported: int
    backend_ok: bool | None  # `Backend X: OK/FAIL` (None: not printed)
    complete: bool  # the closing `K/N backends passed` was printed
    tail: tuple[str, ...]  # the last lines that were not the tool's own format (a crash's reason)
    last_case: str = ""  # the last case that printed its line (in test mode a case's line follows its run)
    backends_passed: tuple[int, int] | None = None  # the closing `K/N backends passed`
    verdict_ok: bool | None = None  # the tool's last line, `OK` or `FAIL`, after it (None: not printed)
    after_summary: tuple[str, ...] = ()  # lines printed after that last line (perhaps a crash at exit: CRASH)
    exit_code: int | None = None  # what gpu_run.py's last line says the process exited with
    failed_dropped: int = 0  # failing cases past MAX_FAILED, counted and not kept

    @property
    def failed_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.failed)


def case_op(name: str) -> str:
    """`ARGMAX(type=f32,ne=[32,513,1,1])` -> `ARGMAX`; a bare op name is itself."""
    return name.split("(", 1)[0].strip()


def _case_line(line: str) -> tuple[str, str, str, str] | None:
    """(text before the name, op, params, text after `): `) of a case line `PRE  OP(PARAMS): REST`: REST is
    after the last `): `, OP is the first `  IDENT(` before it (the old expression's choice), in linear time."""
    end = line.rfind("): ")
    if end < 0:
        return None
    m = CASE_NAME.search(line, 0, end + 1)
    if m is None:
        return None
    return line[:m.start()], m.group(1), line[m.end():end], line[end + 3:]


def _lines(log: str | Iterable[str]) -> Iterable[str]:
    return log.splitlines() if isinstance(log, str) else log


def parse(log: str | Iterable[str]) -> BackendOps:
    """The run's console output (stdout and stderr as they came, colours or not; its text, or its lines as
    core/logfile.py gives them) as a BackendOps. Linear in the log's length; memory bounded by the failing
    cases kept (MAX_FAILED) and a few lines, whatever the log holds."""
    backends: list[str] = []
    skipped: list[str] = []
    cases: dict[str, Case] = {}
    listed: list[str] = []
    pending: deque[str] = deque(maxlen=KEPT_TAIL)  # lines since the last case line that were not the tool's format
    tail: deque[str] = deque(maxlen=KEPT_TAIL)
    after: list[str] = []
    passed = total = exit_code = None
    ok_lines = not_supported = dropped = 0
    backend_ok = verdict_ok = None
    backends_passed: tuple[int, int] | None = None
    complete = in_list = False
    current = last_case = ""
    allocs: dict[str, None] = {}
    for raw in _lines(log):
        if not in_list and (not raw or raw.isspace()):
            continue
        line = printable(ANSI.sub("", raw[:MAX_LINE]).rstrip())  # what is kept of it never drives a terminal
        if m := EXIT_LINE.match(line):
            exit_code = int(m.group(1))
            continue
        if verdict_ok is not None:  # the tool's last line was printed: anything after it is not the tool's
            if line.strip() and len(after) < KEPT_TAIL:
                after.append(line.strip())
            continue
        if m := ALLOC_FAILED.search(line):  # printed with no newline: the next case or the summary follows
            if len(allocs) < KEPT_TAIL:
                allocs[m.group(0)] = None
            line = (line[:m.start()] + line[m.end():]).rstrip()
        if in_list:
            if line.startswith("  ") and "(" in line and line.endswith(")"):
                if len(listed) < MAX_FAILED:
                    listed.append(line.strip())
                continue
            in_list = False
        if not line.strip():
            continue
        if complete and line.strip() in ("OK", "FAIL"):
            verdict_ok = line.strip() == "OK"
            continue
        if m := BACKEND_INIT.match(line):
            current = m.group(3)
            continue
        if line.strip().startswith("Skipping"):
            if current:
                skipped.append(current)
            continue
        if m := TESTS_PASSED.match(line):
            passed = (passed or 0) + int(m.group(1))
            total = (total or 0) + int(m.group(2))
            continue
        if line.strip() == "Failing tests:":
            in_list = True
            continue
        if m := BACKEND_STATUS.match(line):
            backends.append(m.group(1))
            backend_ok = (backend_ok is not False) and m.group(2) == "OK"
            continue
        if m := BACKENDS_PASSED.match(line):
            complete, backends_passed = True, (int(m.group(1)), int(m.group(2)))
            continue
        if (parts := _case_line(line)) and (verdict := _case_status(parts[3])):
            status, post = verdict
            if status == "unsupported":
                not_supported += 1
                pending.clear()
                continue
            if status == "skip":
                continue
            pre, op, params, _ = parts
            name = last_case = f"{op}({params})"
            if status == "OK":
                ok_lines += 1
            elif name in cases or len(cases) < MAX_FAILED:
                errors = [*pending, *(t for t in (pre.strip(), post.strip()) if t)]
                cases[name] = Case(name, op, False, tuple(errors))
            else:
                dropped += 1
            pending.clear()
            continue
        if QUIET.match(line):
            continue
        pending.append(line.strip())
        tail.append(line.strip())
    for name in listed:  # a case that failed before its line (tensors not allocated) is only in the list
        if name not in cases and len(cases) < MAX_FAILED:
            cases[name] = Case(name, case_op(name), False, tuple(allocs))
    return BackendOps(tuple(backends), tuple(skipped), passed, total, tuple(cases.values()), ok_lines,
                      not_supported, backend_ok, complete, tuple(tail), last_case, backends_passed, verdict_ok,
                      tuple(after), exit_code, dropped)


def _case_status(rest: str) -> tuple[str, str] | None:
    """(OK | FAIL | unsupported | skip, the text between the name and the status) of a case line's end."""
    rest = rest.strip()
    if NOT_SUPPORTED.match(rest):
        return "unsupported", ""
    if LARGE_SKIP.match(rest):
        return "skip", ""
    for status in ("OK", "FAIL"):
        before = rest[:-len(status)]
        if rest.endswith(status) and (not before or not (before[-1].isalnum() or before[-1] == "_")):
            return status, before
    return None
