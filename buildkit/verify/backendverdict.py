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
from buildkit.verify.backendops import BackendOps, case_op

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
    def from_dict(cls, data: Mapping[str, Any]) -> GpuCheck:
        failing = tuple(Failing(str(f["case"]), tuple(str(e) for e in f.get("errors") or ()), str(f.get("known") or ""))
                        for f in data.get("failing") or ())
        return cls(str(data.get("backend", "")), tuple(data.get("ops") or ()), int(data.get("passed", 0)),
                   int(data.get("total", 0)), int(data.get("not_supported", 0)), failing, str(data.get("problem", "")),
                   bool(data.get("ok", False)))


def judge(run: BackendOps, backend: str, known: Sequence[Known] = (), ops: Sequence[str] = (),
          exit_code: int | None = None) -> GpuCheck:
    """The verdict on one run of `test-backend-ops test -b BACKEND [-o OPS]`."""
    failing = []
    for case in run.failed:
        reason = next((k.reason for k in known if k.matches(case.name)), "")
        failing.append(Failing(case.name, case.errors, reason))
    problem = ""
    if run.complete and backend not in run.backends:
        problem = f"backend {backend} was not tested (this host has {', '.join(run.skipped) or 'no other backend'})"
    elif not run.complete or run.passed is None or run.total is None:
        said = next((t for t in run.tail if "error" in t.lower()), run.tail[-1] if run.tail else "no output")
        code = f", exit code {exit_code}" if exit_code not in (None, 0, 1) else ""
        after = f" after {run.last_case}" if run.last_case else ""
        problem = f"test-backend-ops ended before its summary{code}{after}: {said}"
    elif run.total == 0:
        problem = f"no case ran{' for -o ' + ','.join(ops) if ops else ''} ({run.not_supported} not supported)"
    elif run.total - run.passed != len(failing):
        problem = (f"the summary says {run.total - run.passed} failed but {len(failing)} failing cases were printed")
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
