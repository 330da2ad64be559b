"""doctor's disk check: free space where the engine keeps images and where buildkit keeps its caches,
against what the variants to be built need."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from buildkit.core.check import Check, Status
from buildkit.flows.doctor.check import Variant

# Free disk space (GB) a build needs on the engine's data root, by variant kind: the base images,
# the build stage's layers, the exported archive and the loaded image, plus the ccache mount.
# Figures from this project's builds: a CUDA 13.1 devel image (provider nvidia) is ~9 GB unpacked,
# while the PyPI wheels of provider wheels unpack to ~2 GB (cuBLAS included) and are copied into
# the build once more as a named context; an sm_120 server build stage ~6 GB, the archive and the
# loaded image ~2.5 GB each, ccache up to ~3 GB per arch. A cpu build of the real tree stays under 3 GB.
REQUIRED_GB = {"cuda-nvidia": 25.0, "cuda-wheels": 16.0, "cpu": 4.0}
EXTRA_VARIANT_GB = {"cuda-nvidia": 8.0, "cuda-wheels": 8.0, "cpu": 1.5}  # each further variant (bases shared)


def disk_kind(variant: Variant) -> str:
    """The REQUIRED_GB row of a variant: cpu, or cuda by provider (a devel image or wheels)."""
    if variant.cuda is None:
        return "cpu"
    return "cuda-wheels" if variant.provider == "wheels" else "cuda-nvidia"


def required_gb(variants: Sequence[Variant]) -> float:
    """Free space the variants need together: the first of each kind in full, each further one of
    that kind its build stage and image (it shares the base images)."""
    need = 0.0
    for kind in REQUIRED_GB:
        count = sum(1 for v in variants if disk_kind(v) == kind)
        if count:
            need += REQUIRED_GB[kind] + EXTRA_VARIANT_GB[kind] * (count - 1)
    return need


def free_gb(path: Path) -> float | None:
    """Free space (GB) of the file system that holds path (or its nearest existing parent)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free / 1e9
    except OSError:
        return None


def check_disk(places: Sequence[tuple[str, Path]], need_gb: float, origin: str) -> Check:
    """Each place's free space against need_gb; places on one file system are counted once."""
    seen: dict[int, str] = {}
    found: list[str] = []
    short: list[str] = []
    unknown: list[str] = []
    for label, path in places:
        free = free_gb(path)
        if free is None:
            unknown.append(f"{label} {path}")
            continue
        try:
            dev = os.stat(_existing(path)).st_dev
        except OSError:
            dev = -1
        if dev in seen:
            continue
        seen[dev] = label
        found.append(f"{free:.1f} GB free at {path} ({label})")
        if free < need_gb:
            short.append(f"{path} ({label})")
    detail = "; ".join(found) or "no folder could be measured"
    detail += f"; need {need_gb:g} GB ({origin})"
    if unknown:
        detail += f"; cannot measure {', '.join(unknown)}"
    if short:
        return Check("disk", Status.FAILED, detail, f"free space on {', '.join(short)}: `docker image prune` (your own "
                     "images), `docker buildx prune --keep-storage 20GB`, move cache.dir to a larger disk, or "
                     "set --min-free-gb if you know the build needs less")
    if unknown and not found:
        return Check("disk", Status.WARNED, detail, "check free space by hand (`df -h`)")
    return Check("disk", Status.PASSED, detail)


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
