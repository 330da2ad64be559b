"""The last compile's per-object times of a variant, kept in the cache (`<cache>/compile-times/`) for the next
build's estimate (core/compilework.py): written whole after a compile Ninja's counter was seen to its end,
read within a bound; a file that is not one is no estimate, never an error."""

from __future__ import annotations

import re
from pathlib import Path

from buildkit.core.boundedread import read_regular
from buildkit.core.compilework import CompileCurve
from buildkit.core.wholefile import write_whole
from buildkit.plan.request import BuildRequest

LIMIT = 1 << 20  # a curve of 444 objects is about 4 KB


def compile_curve_path(cache_root: Path, request: BuildRequest) -> Path:
    """One file per variant, target, platform and CPU level (what the lock's entries are keyed by)."""
    name = "-".join((request.variant, request.target, request.platform, request.cpu_level.name))
    return cache_root / "compile-times" / (re.sub(r"[^A-Za-z0-9._-]+", "_", name) + ".json")


def read_compile_curve(path: Path) -> CompileCurve | None:
    try:
        return CompileCurve.from_json(read_regular(path, LIMIT).decode("utf-8", errors="replace"))
    except OSError:
        return None


def save_compile_curve(path: Path, curve: CompileCurve) -> None:
    """Kept for the next build; a cache that cannot be written costs only that estimate."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, curve.to_json())
    except OSError:
        pass
