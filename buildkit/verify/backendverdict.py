"""gpu-check's verdict on a test-backend-ops run (pure): known failures, the one verdict line, the lock's
record, and the gate's comparison of a nightly with its release.

A failing case fails the check unless `gpu_check.known_failures` declares it, with a reason, as
`"CASE: reason"` where CASE is a case's full name as the tool prints it (`ARGMAX(type=f32,ne=[32,513,1,1])`)
or an op name alone (`ARGMAX`: every case of that op). A known failure stays in the report, and in the
verdict line, as known. A run is also a failure when it is not a result: it never printed its summary
(a crash, a CUDA error, a timeout), tested no backend (the one asked for is not on this host) or ran
no case at all (an `-o` filter that matches nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from buildkit.core.errors import ConfigError
from buildkit.core.printable import printable
from buildkit.verify.backendops import CRASH, BackendOps, case_op

SHOWN = 4  # failing cases named in the verdict line; the report has them all


@dataclass(frozen=True)
class Known:
    case: str  # a full case name or an op name
    reason: str

    def matches(self, name: str) -> bool:
        return name == self.case or ("(" not in self.case and case_op(name) == self.case)


def known_failures(entries: Iterable[str], where: str = "gpu_check.known_failures") -> tuple[Known, ...]:
    """The config's `"CASE: reason"` entries; a ConfigError names one without a reason."""
    out = []
    for entry in entries:
        depth, cut = 0, -1
        for i, ch in enumerate(entry):  # the ':' after the case: outside its parentheses
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if ch == ":" and depth == 0:
                cut = i
                break
        case, reason = (entry[:cut].strip(), entry[cut + 1:].strip()) if cut >= 0 else (entry.strip(), "")
        if not case or not reason:
            raise ConfigError(f"{where}: {entry!r} is not \"CASE: reason\" (a known failure needs its reason)")
        out.append(Known(case, reason))
    return tuple(out)


@dataclass(frozen=True)
class Failing:
    case: str
    errors: tuple[str, ...]
    known: str = ""  # the reason it is known; empty: a failure


@dataclass(frozen=True)
class GpuCheck:
    """The result gpu-check prints, keeps in the lock and the gate compares."""
    backend: str
    ops: tuple[str, ...]
    passed: int
    total: int
    not_supported: int
    failing: tuple[Failing, ...]
    problem: str  # why the run is not a result; empty when it is one
    ok: bool

    @property
    def unknown(self) -> tuple[Failing, ...]:
        return tuple(f for f in self.failing if not f.known)

    @property
    def known(self) -> tuple[Failing, ...]:
        return tuple(f for f in self.failing if f.known)

    def line(self) -> str:
        what = f"gpu-check {self.backend}{' -o ' + ','.join(self.ops) if self.ops else ''}"
        counts = f"{self.passed}/{self.total} cases passed"
        parts = []
        if self.unknown:
            shown = "; ".join(f"{f.case}{' (' + f.errors[-1] + ')' if f.errors else ''}"
                              for f in self.unknown[:SHOWN])
            more = f"; and {len(self.unknown) - SHOWN} more" if len(self.unknown) > SHOWN else ""
            parts.append(f"{len(self.unknown)} failing: {shown}{more}")
        if self.known:
            parts.append(f"{len(self.known)} known: " + "; ".join(f"{f.case} ({f.known})" for f in self.known[:SHOWN])
                         + (f"; and {len(self.known) - SHOWN} more" if len(self.known) > SHOWN else ""))
        if self.problem:  # the counts and failures of the cases that printed their line before it ended
            return f"{what}: FAIL: {self.problem} ({counts}" + ("; " + "; ".join(parts) if parts else "") + ")"
        return f"{what}: {'PASS' if self.ok else 'FAIL'} {counts}" + (", " + ", ".join(parts) if parts else "")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ops"] = list(self.ops)
        data["failing"] = [{"case": f.case, "errors": list(f.errors), "known": f.known} for f in self.failing]
        return data

    @classmethod
    def from_dict(cls, data: object) -> GpuCheck:
        """A result read back (a --compare file, a lock's gpu_check): each field of its type, or ValueError
        naming the first that is not (never a traceback: 1e999, a list, a string where a count is)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"not a JSON object but {type(data).__name__}")
        failing = []
        for f in _field(data, "failing", list, []):
            if not isinstance(f, Mapping):
                raise ValueError("failing: an entry that is not an object")
            errors = _field(f, "errors", list, [])
            if not all(isinstance(e, str) for e in errors):
                raise ValueError("failing: an error that is not text")
            failing.append(Failing(printable(_field(f, "case", str)), tuple(printable(e) for e in errors),
                                   printable(_field(f, "known", str, ""))))
        ops = _field(data, "ops", list, [])
        if not all(isinstance(o, str) for o in ops):
            raise ValueError("ops: an entry that is not text")
        return cls(printable(_field(data, "backend", str, "")), tuple(ops), _count(data, "passed"),
                   _count(data, "total"), _count(data, "not_supported"), tuple(failing),
                   printable(_field(data, "problem", str, "")), _field(data, "ok", bool, False))


_MISSING = object()


def _field(data: Mapping[str, Any], key: str, kind: type[Any], default: Any = _MISSING) -> Any:
    value = data.get(key, default)
    if value is _MISSING:
        raise ValueError(f"no {key}")
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ValueError(f"{key} is {type(value).__name__}, not {kind.__name__}")
    return value


def _count(data: Mapping[str, Any], key: str) -> int:
    value = _field(data, key, int, 0)
    if not 0 <= value <= 10**9:
        raise ValueError(f"{key} is {value}, not a count")
    return int(value)


_SIGNALS = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 7: "SIGBUS", 8: "SIGFPE", 4: "SIGILL", 15: "SIGTERM"}


def _exit_text(code: int) -> str:
    """134 -> 'exit code 134 (SIGABRT)'; a negative code (subprocess's for a signal) -> 'killed by SIGABRT'."""
    if code < 0:
        return f"killed by {_SIGNALS.get(-code, f'signal {-code}')}"
    signal = _SIGNALS.get(code - 128) if code > 128 else None
    return f"exit code {code}" + (f" ({signal})" if signal else "")


def _tool_disagrees(run: BackendOps, cases_failed: bool) -> str:
    """What of the tool's own verdict lines contradicts its cases (empty when they agree): a backend line
    that says FAIL, fewer backends passed than tested, or a last line FAIL, where no case failed; or the
    reverse. test-backend-ops exits 1 exactly when a backend failed."""
    said = []
    if run.backend_ok is not None and run.backend_ok == cases_failed:
        said.append(f"Backend {'/'.join(run.backends)}: {'OK' if run.backend_ok else 'FAIL'}")
    if run.backends_passed is not None and (run.backends_passed[0] < run.backends_passed[1]) != cases_failed:
        said.append(f"{run.backends_passed[0]}/{run.backends_passed[1]} backends passed")
    if run.verdict_ok is not None and run.verdict_ok == cases_failed:
        said.append("OK" if run.verdict_ok else "FAIL")
    if not said:
        return ""
    cases = "cases failed" if cases_failed else "no case failed"
    return f"test-backend-ops says {', '.join(said)} but {cases}"


def judge(run: BackendOps, backend: str, known: Sequence[Known] = (), ops: Sequence[str] = (),
          exit_code: int | None = None) -> GpuCheck:
    """The verdict on one run of `test-backend-ops test -b BACKEND [-o OPS]`. exit_code is the process's (None:
    not known; the log's own `[gpu_run] ... exited with code N` line is taken then). The run is a result only
    when the process and the tool agree with its cases: exit 0 with none failing, 1 with some (any other
    exit, a crash printed after the summary (backendops.CRASH), a backend line that says FAIL with no case
    failing, or the reverse, is a problem)."""
    code = exit_code if exit_code is not None else run.exit_code
    failing = []
    for case in run.failed:
        reason = next((k.reason for k in known if k.matches(case.name)), "")
        failing.append(Failing(case.name, case.errors, reason))
    problem = ""
    if run.complete and backend not in run.backends:
        problem = f"backend {backend} was not tested (this host has {', '.join(run.skipped) or 'no other backend'})"
    elif not run.complete or run.passed is None or run.total is None:
        said = next((t for t in run.tail if "error" in t.lower()), run.tail[-1] if run.tail else "no output")
        code_text = f", {_exit_text(code)}" if code not in (None, 0, 1) else ""
        after = f" after {run.last_case}" if run.last_case else ""
        problem = f"test-backend-ops ended before its summary{code_text}{after}: {said}"
    elif run.total == 0:
        problem = f"no case ran{' for -o ' + ','.join(ops) if ops else ''} ({run.not_supported} not supported)"
    elif run.failed_dropped:
        problem = f"more than {len(failing):,} failing cases ({run.failed_dropped:,} more not kept)"
    elif run.total - run.passed != len(failing):
        problem = (f"the summary says {run.total - run.passed} failed but {len(failing)} failing cases were printed")
    elif said := _tool_disagrees(run, bool(failing)):
        problem = said
    elif crash := next((line for line in run.after_summary if CRASH.search(line)), ""):
        problem = f"test-backend-ops crashed after its summary: {crash}"
    elif code is not None and code != (1 if failing else 0):
        problem = f"test-backend-ops ended with {_exit_text(code)} after its summary"
    if run.passed is not None and run.total is not None:
        passed, total = run.passed, run.total
    else:  # no summary (a crash, a time limit): what the case lines said until then, failures named
        passed, total = run.ok_lines, run.ok_lines + len(run.failed)
    ok = not problem and not any(not f.known for f in failing)
    return GpuCheck(backend, tuple(ops), passed, total, run.not_supported, tuple(failing), problem, ok)


def new_failures(nightly: GpuCheck, release: GpuCheck | None) -> tuple[Failing, ...]:
    """The nightly's failing cases that the release did not have and that are not declared known: what
    stops a promotion. Without a release record every unknown failure is new."""
    before = set(f.case for f in release.failing) if release is not None else set()
    return tuple(f for f in nightly.failing if not f.known and f.case not in before)
