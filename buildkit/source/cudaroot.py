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
    lib -> lib64    (the wheels' own nvcc.profile of 13.5 names $(TOP)/lib and $(TOP)/lib/stubs)
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
* Which files: resolved on the package index pip is configured with, from its metadata
  (cudawheels.resolve_toolkit: names, versions, URLs, sha256), so `--print` and `render` know the
  manifest (and the build key) without downloading; the layout downloads exactly those files once into
  ``cache_dir/cuda-wheels`` and checks each sha256 before use.

This module lays out and reuses the root; which wheels: cudawheels.py (the index: pyindex.py); unpacking them:
cudalayout.py; the driver stub: cudastub.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from buildkit.core.errors import CudaRootError
from buildkit.core.filelock import file_lock
from buildkit.core.paths import cache_dir
from buildkit.core.platforms import default_platform
from buildkit.core.treewalk import remove_tree
from buildkit.source.cudalayout import add_soname_links, extract_wheel
from buildkit.source.cudastub import write_libcuda_stub
from buildkit.source.cudawheels import HINT, Toolkit, norm_arch, resolve_toolkit
from buildkit.source.pyindex import PackageIndex

MARKER = ".buildkit-complete"
MANIFEST = "buildkit-cuda-root.json"
MANIFEST_FORMAT = 1

_VERSION_RE = re.compile(r"^\d+\.\d+(?:\.\d+){0,2}$")

# --------------------------------------------------------------------------- public API


def cuda_root_dir(cuda_version: str, cache_dir: Path, *, with_cublas: bool = True,
                  arch: str = default_platform().processor) -> Path:
    """Where :func:`ensure_cuda_root` puts the root (it may not exist yet)."""
    name = cuda_version + ("" if with_cublas else "-nocublas")
    if norm_arch(arch) != default_platform().processor:  # the default platform's roots predate the suffix
        name += f"-{norm_arch(arch)}"
    return Path(cache_dir) / "cuda-root" / name


def is_complete(root: Path) -> bool:
    return (Path(root) / MARKER).is_file()


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of a laid-out root (wheels with sha256, toolkit release, stub facts)."""
    try:
        manifest: dict[str, Any] = json.loads((Path(root) / MANIFEST).read_text())  # written by lay_out
        return manifest
    except (OSError, ValueError) as e:
        raise CudaRootError(f"cannot read {Path(root) / MANIFEST}: {e}") from e


def check_layable(cuda_version: str) -> str:
    """The version, stripped, when it is like 13.1 or 13.1.1 and 13 or newer (CudaRootError otherwise)."""
    cuda_version = cuda_version.strip()
    if not _VERSION_RE.match(cuda_version):
        raise CudaRootError(f"CUDA version {cuda_version!r} is not like 13.1 or 13.1.1")
    major = int(cuda_version.split(".")[0])
    if major < 13:
        raise CudaRootError(
            f"CUDA {cuda_version} cannot be laid out from PyPI: NVIDIA's {major}.x wheels ship no nvcc "
            f"(only ptxas); use CUDA 13.x, or {HINT}")
    return cuda_version


def planned_manifest(cuda_version: str, cache_dir: Path, *, with_cublas: bool = True,
                     arch: str = default_platform().processor, index: PackageIndex | None = None) -> dict[str, Any]:
    """The manifest of the root ensure_cuda_root lays out, without laying it out: the root's own when it
    is complete, else its wheels resolved from the package index's metadata (nothing downloaded but,
    where the index serves no METADATA alone, the few-KB cuda-toolkit meta wheel)."""
    cuda_version = check_layable(cuda_version)
    dest = cuda_root_dir(cuda_version, cache_dir, with_cublas=with_cublas, arch=arch)
    if is_complete(dest):
        return read_manifest(dest)
    index = index or PackageIndex(Path(cache_dir))
    return resolve_toolkit(cuda_version, index, wheel_cache(cache_dir), with_cublas=with_cublas,
                           arch=norm_arch(arch)).manifest()


def wheel_cache(cache_dir: Path) -> Path:
    """Where the wheels of every CUDA root are downloaded to, once (by filename, checked by sha256)."""
    return Path(cache_dir) / "cuda-wheels"


def ensure_cuda_root(cuda_version: str, cache_dir: Path, *, with_cublas: bool = True,
                     arch: str = default_platform().processor, index: PackageIndex | None = None) -> Path:
    """Lay out CUDA ``cuda_version`` (e.g. ``13.1`` or ``13.1.1``) from PyPI wheels; return its root.

    Reuses a complete root. Builds in a temporary directory beside the destination and renames
    it into place, under a lock file, so concurrent callers and interrupted runs are safe.
    """
    cuda_version = check_layable(cuda_version)
    arch = norm_arch(arch)
    dest = cuda_root_dir(cuda_version, cache_dir, with_cublas=with_cublas, arch=arch)
    if is_complete(dest):
        return dest
    parent = dest.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CudaRootError(f"cannot create {parent}: {e}") from e
    with file_lock(parent / f".{dest.name}.lock"):
        if is_complete(dest):
            return dest
        for stale in parent.glob(f".{dest.name}.tmp-*"):  # left by a killed run; we hold the lock
            remove_tree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=parent))
        try:
            root = work / "root"
            toolkit = resolve_toolkit(cuda_version, index or PackageIndex(Path(cache_dir)), wheel_cache(cache_dir),
                                      with_cublas=with_cublas, arch=arch)
            _build(toolkit, root, wheel_cache(cache_dir), index or PackageIndex(Path(cache_dir)))
            if dest.exists() or dest.is_symlink():  # an incomplete leftover
                remove_tree(dest)
            os.rename(root, dest)
        except OSError as e:
            raise CudaRootError(f"cannot lay out CUDA {cuda_version} in {dest}: {e}") from e
        finally:
            remove_tree(work, ignore_errors=True)
    return dest


RUNTIME_LIBRARIES = ("libcudart.so*", "libcublas.so*", "libcublasLt.so*")


def runtime_subset(root: Path, dest: Path | None = None) -> Path:
    """A folder holding only the runtime libraries (cudart, cuBLAS, with their symlinks) under lib64/:
    what the runtime stage copies, so it does not carry the compiler. Hard links where possible.

    By default it sits beside a root laid out by ensure_cuda_root and is reused; with an explicit
    dest (for a user's own CUDA root, which may change) it is laid out anew each time. The files keep
    their times: the image's times of them are fixed by the template (cuda.Dockerfile.j2)."""
    root = Path(root)
    reuse = dest is None
    dest = root.with_name(root.name + ".runtime") if dest is None else dest
    if reuse and is_complete(dest):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(dest.parent / f".{dest.name}.lock"):
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
            (work / MARKER).write_text("")  # scratch: the folder is renamed into place whole
            remove_tree(dest, ignore_errors=True)
            os.rename(work, dest)
        except OSError as e:
            remove_tree(work, ignore_errors=True)
            raise CudaRootError(f"cannot lay out the CUDA runtime libraries in {dest}: {e}") from e
    return dest


# --------------------------------------------------------------------------- build


def _build(toolkit: Toolkit, root: Path, wheel_dir: Path, index: PackageIndex) -> None:
    """Download the toolkit's wheels (each once, into wheel_dir, sha256 checked) and lay them out in root."""
    wheels = [index.download(w.index_file(), wheel_dir) for w in toolkit.wheels]
    root.mkdir()
    for wheel in sorted(wheels):
        extract_wheel(wheel, root)
    add_soname_links(root / "lib64")
    add_soname_links(root / "nvvm" / "lib64")
    if (root / "lib64").is_dir() and not (root / "lib").exists():
        (root / "lib").symlink_to("lib64")  # 13.5's nvcc.profile links from $(TOP)/lib, older ones' from lib64
    if not (root / "bin" / "nvcc").is_file():
        raise CudaRootError(f"the wheels of CUDA {toolkit.requested} contain no bin/nvcc; {HINT}")
    stub = write_libcuda_stub(root, toolkit.arch)
    manifest = {**toolkit.manifest(), "format": MANIFEST_FORMAT, "libcuda_stub": stub}
    # root is scratch (work/root), renamed into the cache whole: its files need no whole-file writes
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    (root / MARKER).write_text(f"{toolkit.meta.package}=={toolkit.meta.version}\n")


# --------------------------------------------------------------------------- helpers


def _main(argv: list[str]) -> int:  # python -m buildkit.cudaroot 13.1 [DIR] [--no-cublas]

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
