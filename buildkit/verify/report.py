"""What verification found: the report of one image, one Check (core/check.py) per smoke check."""

from __future__ import annotations

from dataclasses import dataclass

from buildkit.core.check import Check


@dataclass(frozen=True)
class VerifyReport:
    image: str
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return not self.failures()

    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.failed]


__all__ = ["VerifyReport"]
