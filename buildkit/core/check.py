"""What one check found, for every command that checks something: the smoke checks of a built image
(verify/), `buildkit verify-image` (release/verifyimage.py) and `buildkit doctor` (flows/doctor/run.py).

One Status for all of them; each command keeps its own words where it renders (doctor prints ok/warn/fail,
verify-image ok/FAIL, verify the status's value): to_json(words) maps a status to the word of the document.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    PASSED = "passed"
    WARNED = "warned"  # doctor: works, but not as asked (a build may still fail or be slow)
    FAILED = "failed"
    SKIPPED = "skipped"  # verify: the check cannot run here (the detail says why); never a pass


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""  # what to do about a warning or a failure (doctor's checks)

    @property
    def failed(self) -> bool:
        return self.status == Status.FAILED  # (a status read back as its plain string compares equal too)

    def to_json(self, words: Mapping[Status, str] | None = None) -> dict[str, str]:
        """{name, status, detail}; the status as words names it (else its value). The fix is the caller's
        to add: a document that has it (doctor's) has it for every check."""
        word = (words or {}).get(self.status, self.status.value)
        return {"name": self.name, "status": word, "detail": self.detail}


__all__ = ["Check", "Status"]
