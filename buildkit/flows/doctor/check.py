"""What `buildkit doctor` knows of a variant (Variant) and of the build it checks (DoctorSpec), and the helpers
its checks share: running a tool with a bound, its last line, version numbers. Each check gives a core/check.py
Check (passed, warned or failed, with the fix); doctor.py prints the statuses as ok, warn and fail."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from buildkit.plan.archs import parse_cuda_version
from buildkit.plan.request import BuildRequest


@dataclass(frozen=True)
class Variant:
    """What doctor needs to know of one variant of the build."""
    name: str
    cuda: tuple[int, int] | None  # None for cpu
    arch: str  # sm_120 or cpu
    platform: str  # linux/amd64
    runs_on: str = ""  # where its compile runs (build.build_platform; a cross build: this machine)
    provider: str = "nvidia"  # where its CUDA comes from: nvidia (devel image) | wheels | cpu

    @classmethod
    def of(cls, req: BuildRequest) -> Variant:
        cuda = parse_cuda_version(req.cuda_version) if req.cuda_version else None
        return cls(req.variant, cuda, req.arch.name, req.platform, req.build_platform, req.provider)


@dataclass(frozen=True)
class DoctorSpec:
    """What doctor checks, resolved from the config by the CLI (cli/matrixspecs.doctor_spec): the variants of the
    configured build (or of the matrix), the base images they start from, where buildkit keeps its caches, the
    builder, image.name, and the free disk space asked for. config_error: the configured build does not resolve
    (then that is the one check)."""
    variants: tuple[Variant, ...]
    cache_root: Path
    builder: str
    image_name: str
    base_refs: tuple[str, ...] = ()  # resolved for the whole screen only (not for build's preflight)
    min_free_gb: float | None = None  # None: the estimate by the variants' kinds
    min_free_origin: str = ""  # where min_free_gb was given: --min-free-gb or build.min_free_gb
    config_error: str = ""


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
