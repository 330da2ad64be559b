"""A bench report kept with its build in buildkit.lock."""

from __future__ import annotations

from pathlib import Path

from buildkit.bench.format import invalid_text
from buildkit.bench.results import BenchReport
from buildkit.core.errors import BenchError, LockError


def find_lock_entry(builds: dict, image_ref: str, image_id: str | None = None) -> str | None:
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


def attach_to_lock(lock_path: Path, key: str, report: BenchReport) -> None:
    """builds[key]["bench"] = the report, written atomically under the lock's writer lock. A report with an
    invalid run (impossible figures) is never written."""
    from buildkit.release.lock import update_lock

    if report.invalid:
        raise BenchError(f"not attached to {lock_path}: {invalid_text(report)}")

    def change(data: dict) -> None:
        if key not in data["builds"]:
            raise LockError(f"{Path(lock_path).resolve()} has no entry {key!r}")
        data["builds"][key]["bench"] = report.to_dict()
    update_lock(lock_path, change)
