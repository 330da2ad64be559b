"""Which of NVIDIA's PyPI wheels make one CUDA toolkit release, read from the package index's metadata.

The meta package ``cuda-toolkit`` pins, per extra, the component releases of its toolkit
(cudaroot.py's docstring says more). resolve_toolkit finds the newest ``cuda-toolkit`` of a release on
the index (pyindex.py), reads its METADATA (PEP 658 when the index serves it, else the tiny meta
wheel, cached) and picks for each pin the newest matching wheel for linux/<arch> with a manylinux tag
up to MAX_GLIBC, as pip would: names, versions, files, URLs and sha256, with no component wheel
downloaded. cudaroot.py downloads exactly those files when it lays the root out.
"""

from __future__ import annotations

import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from buildkit.core.errors import CudaRootError
from buildkit.core.platforms import ARCHES, by_machine, default_platform
from buildkit.source.indexpage import IndexFile
from buildkit.source.pyindex import METADATA_LIMIT, PackageIndex

META_PACKAGE = "cuda-toolkit"
#: Newest glibc a wheel may require: the build images (Debian 12: 2.36, Ubuntu 22.04: 2.35).
MAX_GLIBC = (2, 35)
PYTHON_TAGS = ("cp311", "py311", "py31", "py3")  # pip's --python-version 3.11 interpreters
ABI_TAGS = ("cp311", "abi3", "none")
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


def resolve_pins(metadata: str, *, with_cublas: bool = True, arch: str = default_platform().processor,
                 what: str = META_PACKAGE) -> list[WheelPin]:
    """The component pins in a ``cuda-toolkit`` METADATA for the extras we need."""
    wanted_extras = [e for e in _EXTRAS if with_cublas or e != "cublas"]
    wanted = {p for e in wanted_extras for p in _EXTRAS[e]}
    env = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": norm_arch(arch),
           "os_name": "posix"}
    pins: dict[str, WheelPin] = {}
    for line in metadata.splitlines():
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
        raise CudaRootError(f"{what} pins no {', '.join(missing)} for linux/{arch}; {HINT}")
    if "nvidia-cuda-cuobjdump" not in pins:
        fb = Requirement(CUOBJDUMP_FALLBACK)
        pins[fb.name] = WheelPin(fb.name, str(fb.specifier))
    return sorted(pins.values(), key=lambda p: p.name)


def _wheel_metadata(wheel: Path) -> str:
    """The meta wheel's METADATA, read within METADATA_LIMIT (whatever its entry declares)."""
    try:
        with zipfile.ZipFile(wheel) as z:
            infos = [i for i in z.infolist()
                     if i.filename.endswith(".dist-info/METADATA") and i.filename.count("/") == 1]
            if not infos:
                raise CudaRootError(f"{wheel.name} has no METADATA")
            if infos[0].file_size > METADATA_LIMIT:
                raise CudaRootError(f"{wheel.name}: its METADATA is over {METADATA_LIMIT >> 20} MiB")
            with z.open(infos[0]) as member:
                return member.read(METADATA_LIMIT + 1)[:METADATA_LIMIT].decode("utf-8", "replace")
    except (OSError, zipfile.BadZipFile, EOFError) as e:
        raise CudaRootError(f"cannot read {wheel.name}: {e}") from None


def wheel_name_version(wheel: Path | str) -> tuple[str, str]:
    name, version = Path(wheel).name.split("-")[:2]
    return name.replace("_", "-").lower(), version


@dataclass(frozen=True)
class ResolvedWheel:
    """One wheel as the lock records it: what the build downloads and checks."""

    package: str
    version: str
    filename: str
    sha256: str
    url: str
    size: int | None

    def index_file(self) -> IndexFile:
        return IndexFile(self.filename, self.url, self.sha256, self.size, False, False)

    def record(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Toolkit:
    """A CUDA release resolved on the index: its meta package and the component wheels for one arch."""

    requested: str
    arch: str
    with_cublas: bool
    meta: ResolvedWheel
    wheels: tuple[ResolvedWheel, ...]

    def manifest(self) -> dict[str, Any]:
        """The manifest fields a root laid out from these wheels has (cudaroot.py adds the stub's)."""
        return {"format": 1, "requested": self.requested, "arch": self.arch, "with_cublas": self.with_cublas,
                "toolkit": self.meta.record(), "wheels": [w.record() for w in self.wheels]}


def supported_platforms(arch: str) -> list[str]:
    """The platform tags pip takes for linux/<arch> up to MAX_GLIBC, best first."""
    tags = [f"manylinux_{MAX_GLIBC[0]}_{minor}_{arch}" for minor in range(MAX_GLIBC[1], 4, -1)]
    known = by_machine(arch)
    return tags + [f"{tag}_{arch}" for tag in (known.legacy_wheel_tags if known else ())] + ["any"]


def pick(files: list[IndexFile], project: str, specifier: str, arch: str) -> tuple[IndexFile, str] | None:
    """The file pip would take for project<specifier> on linux/<arch>: the newest matching version
    (no pre-release, nothing yanked), then the best platform tag. (file, version) or None."""
    spec, platforms = SpecifierSet(specifier), supported_platforms(arch)
    best: tuple[Version, int, IndexFile] | None = None
    for f in files:
        if f.yanked or not f.filename.endswith(".whl"):
            continue
        try:
            name, version, _, tags = parse_wheel_filename(f.filename)
        except InvalidWheelFilename:
            continue
        if name != canonicalize_name(project) or not spec.contains(version):
            continue
        ranks = [platforms.index(t.platform) for t in tags
                 if t.interpreter in PYTHON_TAGS and t.abi in ABI_TAGS and t.platform in platforms]
        if ranks and (best is None or (version, -min(ranks)) > (best[0], best[1])):
            best = (version, -min(ranks), f)
    return None if best is None else (best[2], str(best[0]))


def toolkit_releases(index: PackageIndex) -> list[tuple[int, int]]:
    """The CUDA releases (MAJOR.MINOR) the index publishes a ``cuda-toolkit`` of (no pre-release, nothing yanked)."""
    out = set()
    for f in index.files(META_PACKAGE):
        try:
            name, version, _, _ = parse_wheel_filename(f.filename)
        except InvalidWheelFilename:
            continue
        if name == META_PACKAGE and not f.yanked and not version.is_prerelease and len(version.release) >= 2:
            out.add((version.release[0], version.release[1]))
    return sorted(out)


def resolve_toolkit(cuda_version: str, index: PackageIndex, meta_dir: Path, *, with_cublas: bool = True,
                    arch: str = default_platform().processor) -> Toolkit:
    """CUDA `cuda_version` (13.1 or 13.1.1) for linux/<arch>: every wheel, its version, URL and sha256."""
    arch = norm_arch(arch)
    meta_req = f"=={cuda_version}.*"
    got = pick(index.files(META_PACKAGE), META_PACKAGE, meta_req, arch)
    if got is None:
        raise CudaRootError(f"{META_PACKAGE}{meta_req} is not on the package index ({index.describe()}): "
                            f"no such CUDA release?; {HINT}")
    meta_file, meta_version = got
    metadata = index.metadata(meta_file)
    if metadata is None:  # the index serves no METADATA alone: the meta wheel is a few KB
        metadata = _wheel_metadata(index.download(meta_file, meta_dir))
    pins = resolve_pins(metadata, with_cublas=with_cublas, arch=arch, what=meta_file.filename)
    wheels = []
    for pin in pins:
        chosen = pick(index.files(pin.name), pin.name, pin.specifier, arch)
        if chosen is None:
            raise CudaRootError(f"the package index has no wheel of {pin.requirement} for linux/{arch} "
                                f"(manylinux up to glibc {MAX_GLIBC[0]}.{MAX_GLIBC[1]}); {HINT}")
        wheels.append(_resolved(*chosen))
    return Toolkit(cuda_version, arch, with_cublas, _resolved(meta_file, meta_version), tuple(wheels))


def _resolved(f: IndexFile, version: str) -> ResolvedWheel:
    if not f.sha256:
        raise CudaRootError(f"the package index gives no sha256 for {f.filename}; {HINT}")
    return ResolvedWheel(wheel_name_version(f.filename)[0], wheel_name_version(f.filename)[1], f.filename,
                         f.sha256, f.url, f.size)


def norm_arch(arch: str) -> str:
    """The wheels' name of a machine (x86_64, aarch64: uname -m) from either name of it (amd64, arm64 too)."""
    known = by_machine(arch.lower())
    if known is None or not known.cuda_target:
        with_cuda = " or ".join(p.processor for p in ARCHES.values() if p.cuda_target)
        raise CudaRootError(f"no CUDA wheels for architecture {arch!r} ({with_cuda})")
    return known.processor
