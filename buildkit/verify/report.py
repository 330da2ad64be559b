"""What verification found: one Check per smoke check, and the report of one image."""

from __future__ import annotations

from dataclasses import dataclass

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str


@dataclass(frozen=True)
class VerifyReport:
    image: str
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.status != FAILED for c in self.checks)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAILED]


__all__ = ["Check", "FAILED", "PASSED", "SKIPPED", "VerifyReport"]
