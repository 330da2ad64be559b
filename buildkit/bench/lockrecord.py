"""A bench report kept with its build in buildkit.lock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from buildkit.bench.format import invalid_text
from buildkit.bench.gate import Gate
from buildkit.bench.results import BenchReport
from buildkit.core.errors import BenchError, LockError
from buildkit.release.lock import update_lock


def find_lock_entry(builds: dict[str, Any], image_ref: str, image_id: str | None = None) -> str | None:
    """The key of the lock entry describing image_ref (by tag, else by image id or digest)."""
    wanted = {image_ref, image_ref.removeprefix("docker.io/"), image_ref.removeprefix("docker.io/library/")}
    for key, entry in builds.items():
        tags = set(entry.get("tags") or ()) | set(entry.get("pushed") or ())
        if wanted & tags:
            return key
    if image_id:
        for key, entry in builds.items():
            if image_id in (entry.get("image_id"), entry.get("image_digest")):
                return key
    return None


def attach_to_lock(lock_path: Path, key: str, report: BenchReport, gate: Gate | None = None) -> None:
    """builds[key]["bench"] = the report (with the gate's ratio and verdict under "gate" when there is one),
    written atomically under the lock's writer lock. A report with an invalid run (impossible figures) is
    never written."""
    if report.invalid:
        raise BenchError(f"not attached to {lock_path}: {invalid_text(report)}")

    def change(data: dict[str, Any]) -> None:
        if key not in data["builds"]:
            raise LockError(f"{Path(lock_path).resolve()} has no entry {key!r}")
        record = report.to_dict()
        if gate is not None:
            record["gate"] = gate.to_dict()
        data["builds"][key]["bench"] = record
    update_lock(lock_path, change)
