"""What `buildkit doctor` knows of a variant (Variant), and the helpers its checks share: running a tool
with a bound, its last line, version numbers. Each check gives a core/check.py Check (passed, warned or
failed, with the fix); doctor.py prints the statuses as ok, warn and fail."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

@dataclass(frozen=True)
class Variant:
    """What doctor needs to know of one variant of the build."""
    name: str
    cuda: tuple[int, int] | None  # None for cpu
    arch: str  # sm_120 or cpu
    platform: str  # linux/amd64
    runs_on: str = ""  # where its compile runs (build.build_platform; a cross build: this machine)
    provider: str = "nvidia"  # where its CUDA comes from: nvidia (devel image) | wheels | cpu


def run_tool(argv: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def version_tuple(text: str) -> tuple[int, ...]:
    """'26.1.5+dfsg1' -> (26, 1, 5); '580.65.06' -> (580, 65, 6); '' -> ()."""
    match = re.match(r"v?(\d+(?:\.\d+)*)", text.strip())
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()
