"""Which of NVIDIA's PyPI wheels make one CUDA toolkit release, and getting them with pip.

The meta package ``cuda-toolkit`` pins, per extra, the component releases of its toolkit
(cudaroot.py's docstring says more); resolve_pins reads those pins from its METADATA, and
pip_download fetches wheels for linux/<arch> with every manylinux tag up to MAX_GLIBC.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from buildkit.core.errors import CudaRootError
from buildkit.core.platforms import ARCHES, by_machine, default_platform

META_PACKAGE = "cuda-toolkit"
#: Newest glibc a wheel may require: the build images (Debian 12: 2.36, Ubuntu 22.04: 2.35).
MAX_GLIBC = (2, 35)
PIP_PYTHON_VERSION = "3.11"
#: Used when the toolkit release has no ``cuobjdump`` extra (before 13.2).
CUOBJDUMP_FALLBACK = "nvidia-cuda-cuobjdump==13.2.86.*"

HINT = "to build without PyPI, set base.cuda_root to a local CUDA toolkit directory"

# extra of cuda-toolkit -> packages we take from it (others it pulls in, e.g. nvrtc, are skipped)
_EXTRAS: dict[str, tuple[str, ...]] = {
    "nvcc": ("nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-cuda-crt", "nvidia-nvvm"),
    "cudart": ("nvidia-cuda-runtime",),
    "cccl": ("nvidia-cuda-cccl",),
    "crt": ("nvidia-cuda-crt",),
    "nvvm": ("nvidia-nvvm",),
    "culibos": ("nvidia-cuda-culibos",),
    "cuobjdump": ("nvidia-cuda-cuobjdump",),
    "cublas": ("nvidia-cublas",),
}
_REQUIRED = ("nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-cuda-cccl", "nvidia-cuda-crt",
             "nvidia-nvvm")


@dataclass(frozen=True)
class WheelPin:
    """One component wheel: ``name`` and a PEP 440 specifier such as ``==13.1.115.*``."""

    name: str
    specifier: str

    @property
    def requirement(self) -> str:
        return f"{self.name}{self.specifier}"


def resolve_pins(meta_wheel: Path, *, with_cublas: bool = True,
                 arch: str = default_platform().processor) -> list[WheelPin]:
    """The component pins of a ``cuda-toolkit`` meta wheel for the extras we need."""
    wanted_extras = [e for e in _EXTRAS if with_cublas or e != "cublas"]
    wanted = {p for e in wanted_extras for p in _EXTRAS[e]}
    env = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": norm_arch(arch),
           "os_name": "posix"}
    pins: dict[str, WheelPin] = {}
    for line in _wheel_metadata(meta_wheel).splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        try:
            req = Requirement(line.split(":", 1)[1].strip())
        except InvalidRequirement:
            continue
        if req.name not in wanted or req.marker is None:
            continue
        if req.marker.evaluate({**env, "extra": ""}):
            continue  # not tied to an extra
        if any(req.marker.evaluate({**env, "extra": e}) for e in wanted_extras):
            pins.setdefault(req.name, WheelPin(req.name, str(req.specifier)))
    missing = [p for p in _REQUIRED if p not in pins]
    if with_cublas and "nvidia-cublas" not in pins:
        missing.append("nvidia-cublas")
    if missing:
        raise CudaRootError(f"{meta_wheel.name} pins no {', '.join(missing)} for linux/{arch}; {HINT}")
    if "nvidia-cuda-cuobjdump" not in pins:
        fb = Requirement(CUOBJDUMP_FALLBACK)
        pins[fb.name] = WheelPin(fb.name, str(fb.specifier))
    return sorted(pins.values(), key=lambda p: p.name)


def _wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
        if not names:
            raise CudaRootError(f"{wheel.name} has no METADATA")
        return z.read(names[0]).decode("utf-8", "replace")


def wheel_name_version(wheel: Path) -> tuple[str, str]:
    name, version = wheel.name.split("-")[:2]
    return name.replace("_", "-").lower(), version


def _platform_args(arch: str) -> list[str]:
    args: list[str] = []
    for minor in range(MAX_GLIBC[1], 4, -1):
        args += ["--platform", f"manylinux_{MAX_GLIBC[0]}_{minor}_{arch}"]
    known = by_machine(arch)
    for tag in known.legacy_wheel_tags if known else ():
        args += ["--platform", f"{tag}_{arch}"]
    return args


def pip_download(requirements: list[str], dest: Path, arch: str, *, what: str) -> list[Path]:
    before = set(dest.glob("*.whl")) if dest.is_dir() else set()
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            *_platform_args(arch), "--python-version", PIP_PYTHON_VERSION,
            "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
            "-d", str(dest), *requirements]
    try:
        r = subprocess.run(argv, capture_output=True, text=True)
    except OSError as e:
        raise CudaRootError(f"cannot run pip to download {what}: {e}; {HINT}") from e
    if r.returncode != 0:
        raise CudaRootError(_pip_failure(r.stderr, requirements, what))
    return sorted(set(dest.glob("*.whl")) - before)


def _pip_failure(stderr: str, requirements: list[str], what: str) -> str:
    errors = [ln.strip() for ln in stderr.splitlines() if ln.startswith("ERROR:")]
    culprit = what
    for ln in errors:
        m = re.search(r"(?:No matching distribution found for|satisfies the requirement) (\S+)", ln)
        if m:
            culprit = m.group(1)
            break
    network = re.search(r"NewConnectionError|Network is unreachable|Temporary failure in name resolution"
                        r"|Max retries exceeded|ConnectTimeout|ReadTimeout|ProxyError|SSLError", stderr)
    listed = re.search(r"\(from versions: ([^)]*)\)", stderr)
    if network or (listed and listed.group(1).strip() == "none"):
        return f"cannot get {culprit} from the package index (offline or index unreachable?); {HINT}"
    if any("No matching distribution" in ln for ln in errors):
        return f"{culprit} is not on the package index (no such CUDA release?); {HINT}"
    detail = errors[-1] if errors else (stderr.strip().splitlines() or ["pip failed"])[-1]
    return f"pip download of {culprit} failed: {detail.removeprefix('ERROR: ')}; {HINT}"


def norm_arch(arch: str) -> str:
    """The wheels' name of a machine (x86_64, aarch64: uname -m) from either name of it (amd64, arm64 too)."""
    known = by_machine(arch.lower())
    if known is None or not known.cuda_target:
        with_cuda = " or ".join(p.processor for p in ARCHES.values() if p.cuda_target)
        raise CudaRootError(f"no CUDA wheels for architecture {arch!r} ({with_cuda})")
    return known.processor
