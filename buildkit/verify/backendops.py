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
reason it is not a result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CASE = re.compile(r"^(?P<pre>.*?)  (?P<op>[A-Za-z_][A-Za-z0-9_]*)\((?P<params>.*)\): (?P<rest>.*)$")
STATUS = re.compile(r"^(?P<post>.*?)\b(?P<status>OK|FAIL)\s*$")
NOT_SUPPORTED = re.compile(r"^not supported \[[^\]]*\]\s*$")
LARGE_SKIP = re.compile(r"^skipping large tensors for speed\s*$")
TESTS_PASSED = re.compile(r"^\s*(\d+)/(\d+) tests passed\s*$")
BACKEND_STATUS = re.compile(r"^\s*Backend (\S+): (OK|FAIL)\s*$")
BACKEND_INIT = re.compile(r"^Backend (\d+)/(\d+): (\S+)\s*$")
BACKENDS_PASSED = re.compile(r"^(\d+)/(\d+) backends passed\s*$")
ALLOC_FAILED = re.compile(r"failed to allocate tensors \[[^\]]*\]")
QUIET = re.compile(r"^\s*(Testing \d+ devices|Device description:|Device memory:|Skipping|OK$|FAIL$)")
KEPT_TAIL = 12


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
    printed one); failed is every failed case, from its case line or the closing list."""
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

    @property
    def failed_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.failed)


def case_op(name: str) -> str:
    """`ARGMAX(type=f32,ne=[32,513,1,1])` -> `ARGMAX`; a bare op name is itself."""
    return name.split("(", 1)[0].strip()


def parse(text: str) -> BackendOps:
    """The run's console output (stdout and stderr as they came, colours or not) as a BackendOps."""
    backends: list[str] = []
    skipped: list[str] = []
    cases: dict[str, Case] = {}
    listed: list[str] = []
    pending: list[str] = []  # lines since the last case line that were not the tool's format
    tail: list[str] = []
    passed = total = None
    ok_lines = not_supported = 0
    backend_ok: bool | None = None
    complete = in_list = False
    current = last_case = ""
    allocs: list[str] = []
    for raw in ANSI.sub("", text).splitlines():
        line = raw.rstrip()
        if m := ALLOC_FAILED.search(line):  # printed with no newline: the next case or the summary follows
            allocs.append(m.group(0))
            line = (line[:m.start()] + line[m.end():]).rstrip()
        if in_list:
            if line.startswith("  ") and "(" in line and line.endswith(")"):
                listed.append(line.strip())
                continue
            in_list = False
        if not line.strip():
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
        if BACKENDS_PASSED.match(line):
            complete = True
            continue
        if (m := CASE.match(line)) and (verdict := _case_status(m.group("rest"))):
            status, post = verdict
            if status == "unsupported":
                not_supported += 1
                pending.clear()
                continue
            if status == "skip":
                continue
            name = last_case = f"{m.group('op')}({m.group('params')})"
            if status == "OK":
                ok_lines += 1
            else:
                errors = [*pending, *(t for t in (m.group("pre").strip(), post.strip()) if t)]
                cases[name] = Case(name, m.group("op"), False, tuple(errors))
            pending.clear()
            continue
        if QUIET.match(line):
            continue
        pending.append(line.strip())
        tail.append(line.strip())
    for name in listed:  # a case that failed before its line (tensors not allocated) is only in the list
        if name not in cases:
            cases[name] = Case(name, case_op(name), False, tuple(dict.fromkeys(allocs)))
    return BackendOps(tuple(backends), tuple(skipped), passed, total, tuple(cases.values()), ok_lines,
                      not_supported, backend_ok, complete, tuple(tail[-KEPT_TAIL:]), last_case)


def _case_status(rest: str) -> tuple[str, str] | None:
    """(OK | FAIL | unsupported | skip, the text between the name and the status) of a case line's end."""
    rest = rest.strip()
    if NOT_SUPPORTED.match(rest):
        return "unsupported", ""
    if LARGE_SKIP.match(rest):
        return "skip", ""
    if m := STATUS.match(rest):
        return m.group("status"), m.group("post")
    return None
