"""The CUDA toolkit from NVIDIA's PyPI wheels, laid out as an ordinary CUDA root.

For air-gapped machines and tests: no NVIDIA apt repository, no CUDA base image, no GPU and no
driver are needed. The result is passed to the build as the named context ``cuda-root`` and copied
to /usr/local/cuda.

Which wheels: NVIDIA's meta package ``cuda-toolkit`` (a tiny pure wheel) pins, per toolkit
release and per extra (``nvcc``, ``cudart``, ``cccl``, ``crt``, ``nvvm``, ``culibos``, ``cublas``,
``cuobjdump``), the exact component releases that make that toolkit. ``cuda-toolkit==13.1.*``
resolves to the newest 13.1 update; its pins say e.g. nvidia-cuda-nvcc==13.1.115.* and
nvidia-cublas==13.2.2.2.*. This is how a toolkit version maps to a cuBLAS release, whose version
numbers run ahead of the toolkit's (13.0 -> cublas 13.0/13.1, 13.1 -> cublas 13.2, 13.2 -> 13.4).

Layout (``cache_dir/cuda-root/<version>[-nocublas]``)::

    bin/            nvcc nvcc.profile ptxas nvlink fatbinary cudafe++ bin2c cuobjdump crt/
    include/        cuda.h cuda_runtime*.h crt/ cccl/ cublas*.h ...
    lib64/          libcudart.so -> libcudart.so.13, libcudart_static.a, libcudadevrt.a,
                    libcublas.so -> .so.13, libcublasLt.so -> .so.13, libculibos.a, cmake/
    lib64/stubs/    libcuda.so (SONAME libcuda.so.1; generated, see below), libcuda-stub.c
    nvvm/           bin/cicc, libdevice/, lib64/libnvvm.so -> libnvvm.so.4, include/nvvm.h
    buildkit-cuda-root.json   manifest: every wheel used with its sha256 (for locks)

Facts this module relies on (checked against PyPI):

* Only CUDA 13.x can be laid out. The 12.x ``nvidia-cuda-nvcc-cu12`` wheels carry ptxas, the
  crt headers and libnvvm but no nvcc, cicc, nvlink, fatbinary or cudafe++.
* No wheel ships the driver stub ``lib64/stubs/libcuda.so``. It is generated: a C file defining
  every ``cu*`` entry point named in include/cuda.h (including the ``_v2``/``_ptds``/``_ptsz``
  names its macros map to) as a function returning CUDA_ERROR_STUB_LIBRARY (34), compiled with the
  host's C compiler (``$CC``, else cc/gcc/clang) into a shared object with SONAME libcuda.so.1.
  It only serves link-time resolution. Without a host compiler (or when the host architecture
  differs from the target) only ``libcuda-stub.c`` is written; the Dockerfile then compiles it.
* cuobjdump has its own wheel only from 13.2 on; older toolkits get the 13.2 one
  (``CUOBJDUMP_FALLBACK``), which reads their ELF/fatbin output as well.
* ``pip download --platform manylinux_2_28_x86_64`` (pip 23) does not accept older manylinux tags,
  so every ``manylinux_2_X`` up to ``MAX_GLIBC`` is passed explicitly.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement

from buildkit.core.errors import CudaRootError

MARKER = ".buildkit-complete"
MANIFEST = "buildkit-cuda-root.json"
MANIFEST_FORMAT = 1
META_PACKAGE = "cuda-toolkit"
#: Newest glibc a wheel may require: the build images (Debian 12: 2.36, Ubuntu 22.04: 2.35).
MAX_GLIBC = (2, 35)
PIP_PYTHON_VERSION = "3.11"
#: Used when the toolkit release has no ``cuobjdump`` extra (before 13.2).
CUOBJDUMP_FALLBACK = "nvidia-cuda-cuobjdump==13.2.86.*"
#: CUDA_ERROR_STUB_LIBRARY: what every entry point of the generated stub returns.
STUB_RESULT = 34

_HINT = "to build without PyPI, set base.cuda_root to a local CUDA toolkit directory"
_VERSION_RE = re.compile(r"^\d+\.\d+(?:\.\d+){0,2}$")

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
_ARCHES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


@dataclass(frozen=True)
class WheelPin:
    """One component wheel: ``name`` and a PEP 440 specifier such as ``==13.1.115.*``."""

    name: str
    specifier: str

    @property
    def requirement(self) -> str:
        return f"{self.name}{self.specifier}"


# --------------------------------------------------------------------------- public API


def cuda_root_dir(cuda_version: str, cache_dir: Path, *, with_cublas: bool = True,
                  arch: str = "x86_64") -> Path:
    """Where :func:`ensure_cuda_root` puts the root (it may not exist yet)."""
    name = cuda_version + ("" if with_cublas else "-nocublas")
    if _norm_arch(arch) != "x86_64":
        name += f"-{_norm_arch(arch)}"
    return Path(cache_dir) / "cuda-root" / name


def is_complete(root: Path) -> bool:
    return (Path(root) / MARKER).is_file()


def read_manifest(root: Path) -> dict:
    """The manifest of a laid-out root (wheels with sha256, toolkit release, stub facts)."""
    try:
        return json.loads((Path(root) / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise CudaRootError(f"cannot read {Path(root) / MANIFEST}: {e}") from e


def ensure_cuda_root(cuda_version: str, cache_dir: Path, *, with_cublas: bool = True,
                     arch: str = "x86_64") -> Path:
    """Lay out CUDA ``cuda_version`` (e.g. ``13.1`` or ``13.1.1``) from PyPI wheels; return its root.

    Reuses a complete root. Builds in a temporary directory beside the destination and renames
    it into place, under a lock file, so concurrent callers and interrupted runs are safe.
    """
    cuda_version = cuda_version.strip()
    if not _VERSION_RE.match(cuda_version):
        raise CudaRootError(f"CUDA version {cuda_version!r} is not like 13.1 or 13.1.1")
    major = int(cuda_version.split(".")[0])
    if major < 13:
        raise CudaRootError(
            f"CUDA {cuda_version} cannot be laid out from PyPI: NVIDIA's {major}.x wheels ship no nvcc "
            f"(only ptxas); use CUDA 13.x, or {_HINT}")
    arch = _norm_arch(arch)
    dest = cuda_root_dir(cuda_version, cache_dir, with_cublas=with_cublas, arch=arch)
    if is_complete(dest):
        return dest
    parent = dest.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CudaRootError(f"cannot create {parent}: {e}") from e
    with _locked(parent / f".{dest.name}.lock"):
        if is_complete(dest):
            return dest
        for stale in parent.glob(f".{dest.name}.tmp-*"):  # left by a killed run; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=parent))
        try:
            root = work / "root"
            _build(cuda_version, root, work, with_cublas=with_cublas, arch=arch)
            if dest.exists() or dest.is_symlink():  # an incomplete leftover
                shutil.rmtree(dest) if dest.is_dir() and not dest.is_symlink() else dest.unlink()
            os.rename(root, dest)
        except OSError as e:
            raise CudaRootError(f"cannot lay out CUDA {cuda_version} in {dest}: {e}") from e
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return dest


RUNTIME_LIBRARIES = ("libcudart.so*", "libcublas.so*", "libcublasLt.so*")


def runtime_subset(root: Path, dest: Path | None = None) -> Path:
    """A folder holding only the runtime libraries (cudart, cuBLAS, with their symlinks) under lib64/:
    what the runtime stage copies, so it does not carry the compiler. Hard links where possible.

    By default it sits beside a root laid out by ensure_cuda_root and is reused; with an explicit
    dest (for a user's own CUDA root, which may change) it is laid out anew each time."""
    root = Path(root)
    reuse = dest is None
    dest = root.with_name(root.name + ".runtime") if dest is None else dest
    if reuse and is_complete(dest):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _locked(dest.parent / f".{dest.name}.lock"):
        if reuse and is_complete(dest):
            return dest
        work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
        try:
            (work / "lib64").mkdir()
            for pattern in RUNTIME_LIBRARIES:
                for src in sorted((root / "lib64").glob(pattern)):
                    target = work / "lib64" / src.name
                    if src.is_symlink():
                        target.symlink_to(os.readlink(src))
                    else:
                        try:
                            os.link(src, target)
                        except OSError:
                            shutil.copy2(src, target)
            (work / MARKER).write_text("")
            shutil.rmtree(dest, ignore_errors=True)
            os.rename(work, dest)
        except OSError as e:
            shutil.rmtree(work, ignore_errors=True)
            raise CudaRootError(f"cannot lay out the CUDA runtime libraries in {dest}: {e}") from e
    return dest


# --------------------------------------------------------------------------- resolution


def resolve_pins(meta_wheel: Path, *, with_cublas: bool = True, arch: str = "x86_64") -> list[WheelPin]:
    """The component pins of a ``cuda-toolkit`` meta wheel for the extras we need."""
    wanted_extras = [e for e in _EXTRAS if with_cublas or e != "cublas"]
    wanted = {p for e in wanted_extras for p in _EXTRAS[e]}
    env = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": _norm_arch(arch),
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
        raise CudaRootError(f"{meta_wheel.name} pins no {', '.join(missing)} for linux/{arch}; {_HINT}")
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


def _wheel_name_version(wheel: Path) -> tuple[str, str]:
    name, version = wheel.name.split("-")[:2]
    return name.replace("_", "-").lower(), version


def _platform_args(arch: str) -> list[str]:
    args: list[str] = []
    for minor in range(MAX_GLIBC[1], 4, -1):
        args += ["--platform", f"manylinux_{MAX_GLIBC[0]}_{minor}_{arch}"]
    legacy = {"x86_64": ["manylinux2014", "manylinux2010", "manylinux1"], "aarch64": ["manylinux2014"]}
    for tag in legacy.get(arch, []):
        args += ["--platform", f"{tag}_{arch}"]
    return args


def _pip_download(requirements: list[str], dest: Path, arch: str, *, what: str) -> list[Path]:
    before = set(dest.glob("*.whl")) if dest.is_dir() else set()
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            *_platform_args(arch), "--python-version", PIP_PYTHON_VERSION,
            "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
            "-d", str(dest), *requirements]
    try:
        r = subprocess.run(argv, capture_output=True, text=True)
    except OSError as e:
        raise CudaRootError(f"cannot run pip to download {what}: {e}; {_HINT}") from e
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
        return f"cannot get {culprit} from the package index (offline or index unreachable?); {_HINT}"
    if any("No matching distribution" in ln for ln in errors):
        return f"{culprit} is not on the package index (no such CUDA release?); {_HINT}"
    detail = errors[-1] if errors else (stderr.strip().splitlines() or ["pip failed"])[-1]
    return f"pip download of {culprit} failed: {detail.removeprefix('ERROR: ')}; {_HINT}"


# --------------------------------------------------------------------------- layout


def _build(cuda_version: str, root: Path, work: Path, *, with_cublas: bool, arch: str) -> None:
    meta_dir, wheel_dir = work / "meta", work / "wheels"
    meta_dir.mkdir()
    wheel_dir.mkdir()
    meta = _pip_download([f"{META_PACKAGE}=={cuda_version}.*"], meta_dir, arch,
                         what=f"{META_PACKAGE}=={cuda_version}.*")
    if len(meta) != 1:
        raise CudaRootError(f"pip download of {META_PACKAGE}=={cuda_version}.* gave {len(meta)} wheels; {_HINT}")
    pins = resolve_pins(meta[0], with_cublas=with_cublas, arch=arch)
    wheels = _pip_download([p.requirement for p in pins], wheel_dir, arch,
                           what=", ".join(p.requirement for p in pins))
    got = {_wheel_name_version(w)[0] for w in wheels}
    absent = [p.requirement for p in pins if p.name not in got]
    if absent:
        raise CudaRootError(f"pip download gave no wheel for {', '.join(absent)}; {_HINT}")

    root.mkdir()
    for wheel in sorted(wheels):
        _extract(wheel, root)
    _add_soname_links(root / "lib64")
    _add_soname_links(root / "nvvm" / "lib64")
    if not (root / "bin" / "nvcc").is_file():
        raise CudaRootError(f"the wheels of CUDA {cuda_version} contain no bin/nvcc; {_HINT}")
    stub = _write_libcuda_stub(root, arch)

    meta_name, meta_version = _wheel_name_version(meta[0])
    manifest = {
        "format": MANIFEST_FORMAT,
        "requested": cuda_version,
        "arch": arch,
        "with_cublas": with_cublas,
        "toolkit": {"package": meta_name, "version": meta_version, "filename": meta[0].name,
                    "sha256": _sha256(meta[0])},
        "wheels": [
            {"package": n, "version": v, "filename": w.name, "sha256": _sha256(w),
             "size": w.stat().st_size}
            for w in sorted(wheels) for n, v in [_wheel_name_version(w)]
        ],
        "libcuda_stub": stub,
    }
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    (root / MARKER).write_text(f"{meta_name}=={meta_version}\n")


def _dest_for(rel: PurePosixPath) -> PurePosixPath | None:
    """Where a wheel member (path below nvidia/<component>/) goes in the CUDA root, or None."""
    parts = rel.parts
    if not parts or parts[-1] in ("__init__.py",) or "__pycache__" in parts or parts[0] == ".metadata":
        return None
    if parts[0] == "lib":
        if parts[-1].startswith("libnvvm.so"):
            return PurePosixPath("nvvm", "lib64", *parts[1:])
        return PurePosixPath("lib64", *parts[1:])
    if parts[0] == "include" and parts[1:] == ("nvvm.h",):
        return PurePosixPath("nvvm", "include", "nvvm.h")
    return rel


def _extract(wheel: Path, root: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                if info.is_dir():
                    continue
                member = PurePosixPath(info.filename)
                if member.is_absolute() or ".." in member.parts:
                    raise CudaRootError(f"{wheel.name}: unsafe member {info.filename}")
                if len(member.parts) < 3 or member.parts[0] != "nvidia":
                    continue  # dist-info and the like
                rel = _dest_for(PurePosixPath(*member.parts[2:]))
                if rel is None:
                    continue
                target = root.joinpath(*rel.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                mode = (info.external_attr >> 16) & 0o777
                target.chmod(0o755 if mode & 0o111 else 0o644)
    except zipfile.BadZipFile as e:
        raise CudaRootError(f"{wheel.name} is not a valid wheel: {e}") from e


def _add_soname_links(libdir: Path) -> None:
    """libfoo.so -> libfoo.so.N for each versioned library lacking its development link."""
    if not libdir.is_dir():
        return
    for lib in sorted(libdir.iterdir(), key=lambda p: (len(p.name), p.name)):
        m = re.match(r"^(lib.+\.so)(\.\d+)+$", lib.name)
        if m and lib.is_file() and not lib.is_symlink():
            link = libdir / m.group(1)
            if not link.exists() and not link.is_symlink():
                link.symlink_to(lib.name)


# --------------------------------------------------------------------------- libcuda stub


def driver_api_symbols(cuda_h: str) -> list[str]:
    """Every driver entry point name cuda.h declares or maps a name to (incl. _v2/_ptds/_ptsz)."""
    names: set[str] = set(re.findall(r"\bCUresult\s+CUDAAPI\s+(cu\w+)\s*\(", cuda_h))
    for target in re.findall(r"^\s*#\s*define\s+cu\w+\s+(cu\w+)\s*$", cuda_h, re.M):
        names.add(target)
    for kind, inner in re.findall(r"^\s*#\s*define\s+cu\w+\s+__CUDA_API_PT(DS|SZ)\(\s*(cu\w+)\s*\)", cuda_h, re.M):
        names.update({inner, f"{inner}_pt{kind.lower()}"})
    return sorted(names)


def stub_source(symbols: list[str]) -> str:
    lines = [
        "/* Link-time stand-in for the CUDA driver (libcuda.so.1), generated by buildkit from",
        " * include/cuda.h. Every entry point returns CUDA_ERROR_STUB_LIBRARY. Never load it at run time. */",
        "",
    ]
    lines += [f"int {s}(void) {{ return {STUB_RESULT}; }}" for s in symbols]
    return "\n".join(lines) + "\n"


def _host_cc() -> str | None:
    for cand in ([os.environ["CC"]] if os.environ.get("CC") else []) + ["cc", "gcc", "clang"]:
        path = shutil.which(cand.split()[0])
        if path:
            return path
    return None


def _write_libcuda_stub(root: Path, arch: str) -> dict:
    cuda_h = root / "include" / "cuda.h"
    if not cuda_h.is_file():
        raise CudaRootError(f"no include/cuda.h in the runtime wheel: cannot make the libcuda stub; {_HINT}")
    symbols = driver_api_symbols(cuda_h.read_text(errors="replace"))
    stubs = root / "lib64" / "stubs"
    stubs.mkdir(parents=True, exist_ok=True)
    src = stubs / "libcuda-stub.c"
    src.write_text(stub_source(symbols))
    info: dict = {"symbols": len(symbols), "source": "lib64/stubs/libcuda-stub.c", "library": None,
                  "compiler": None}
    cc = _host_cc()
    if cc is None or _norm_arch(platform.machine()) != arch:
        return info  # the Dockerfile compiles the source
    out = stubs / "libcuda.so"
    r = subprocess.run([cc, "-shared", "-fPIC", "-O0", "-w", "-nostdlib", "-Wl,-soname,libcuda.so.1",
                        "-o", str(out), str(src)], capture_output=True, text=True)
    if r.returncode != 0:
        raise CudaRootError(f"compiling the libcuda stub with {cc} failed: "
                            f"{(r.stderr.strip().splitlines() or ['?'])[-1]}")
    out.chmod(0o755)
    info.update(library="lib64/stubs/libcuda.so", compiler=Path(cc).name)
    return info


# --------------------------------------------------------------------------- helpers


def _norm_arch(arch: str) -> str:
    try:
        return _ARCHES[arch.lower()]
    except KeyError:
        raise CudaRootError(f"no CUDA wheels for architecture {arch!r} (x86_64 or aarch64)") from None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _main(argv: list[str]) -> int:  # python -m buildkit.cudaroot 13.1 [DIR] [--no-cublas]
    from buildkit.core.paths import cache_dir

    args = [a for a in argv if not a.startswith("--")]
    if not args:
        print("usage: python -m buildkit.cudaroot VERSION [CACHE_DIR] [--no-cublas]", file=sys.stderr)
        return 2
    try:
        root = ensure_cuda_root(args[0], Path(args[1]) if len(args) > 1 else cache_dir(),
                                with_cublas="--no-cublas" not in argv)
    except CudaRootError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(root)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
