"""A bench report kept with its build in buildkit.lock."""

from __future__ import annotations

from pathlib import Path

from buildkit.bench.format import invalid_text
from buildkit.bench.gate import Gate
from buildkit.bench.results import BenchReport
from buildkit.core.errors import BenchError, LockError
from buildkit.release.lockfile import Lock, update_lock


def attach_to_lock(lock_path: Path, key: str, report: BenchReport, gate: Gate | None = None) -> None:
    """builds[key]["bench"] = the report (with the gate's ratio and verdict under "gate" when there is one),
    written atomically under the lock's writer lock. A report with an invalid run (impossible figures) is
    never written."""
    if report.invalid:
        raise BenchError(f"not attached to {lock_path}: {invalid_text(report)}")

    def change(lock: Lock) -> Lock:
        if key not in lock.builds:
            raise LockError(f"{Path(lock_path).resolve()} has no entry {key!r}")
        record = report.to_dict()
        if gate is not None:
            record["gate"] = gate.to_dict()
        return lock.with_attached(key, "bench", record)
    update_lock(lock_path, change)
