"""Which file each library of a bundle's llama-server comes from on a GPU host: the image, or the host.

The rules (scripts/gpu_run.py):

* the driver (libcuda.so.1, libnvidia-*) always comes from the host, as the NVIDIA container
  runtime mounts it: `host-driver`;
* the CUDA runtime (cudart, cuBLAS, ...) comes from the image when the bundle carries it and
  `cuda_from` is not "host", else from the host's CUDA (pip wheels' nvidia/*/lib, /usr/local/cuda):
  `host-cuda`;
* every other library comes from the image (/app/lib, then the bundle's extra/ files) if it has it,
  else from the host's system folders: `host-system` (libc, libstdc++, libgomp, libssl, ...).

`plan` decides, following NEEDED from llama-server and every library in /app/lib; `link_farm`
makes one folder of symlinks (soname -> chosen file, glibc's left to ld.so) for LD_LIBRARY_PATH,
so ld.so's search gives exactly the plan; `check` runs ld.so's search on the result (elfdeps.resolve) and says where
each library really resolves; `loaded` reads /proc/PID/maps of the running server, which also
shows the libraries opened with dlopen (cudart opens libcuda.so.1 that way).
"""

from __future__ import annotations

import fnmatch
import glob
import os
import site
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from buildkit.core.platforms import default_platform
from buildkit.core.treewalk import walk
from buildkit.verify.elfdeps import SYSTEM_DIRS, ElfError, ElfInfo, find_in, ld_so_finder, read_elf, resolve
from buildkit.gpu.gpubundle import is_driver_library

IMAGE, HOST_DRIVER, HOST_CUDA, HOST_SYSTEM, MISSING = "image", "host-driver", "host-cuda", "host-system", "missing"
CUDA_FAMILY = ("libcudart.so*", "libcublas.so*", "libcublasLt.so*", "libnvrtc*.so*", "libnvJitLink.so*",
               "libcurand.so*", "libcufft*.so*", "libcusparse.so*", "libcusolver*.so*", "libnvToolsExt.so*",
               "libcupti.so*", "libnvblas.so*")
# The GPU host's platform: the default one (make_bundle's platform unless told otherwise)
HOST = default_platform()
DRIVER_DIRS = ("/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", f"/usr/lib/{HOST.triplet}", f"/lib/{HOST.triplet}",
               *(("/usr/lib64",) if HOST.lib64 else ()))
CUDA_DIRS = ("/usr/local/cuda/lib64", f"/usr/local/cuda/targets/{HOST.cuda_target}/lib")
GLIBC = ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", HOST.dynamic_linker,
         "libresolv.so.2", "libutil.so.1")


def is_cuda_library(name: str) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in CUDA_FAMILY)


def pip_cuda_dirs() -> list[str]:
    """lib folders of NVIDIA's pip wheels in this Python's site-packages (nvidia/cu13/lib, nvidia/cublas/lib...)."""
    roots = list(dict.fromkeys(site.getsitepackages() + [site.getusersitepackages()] +
                               [p for p in sys.path if p.endswith("site-packages")]))
    out = []
    for root in roots:
        for pattern in ("nvidia/cu[0-9]*/lib", "nvidia/*/lib"):
            out += sorted(glob.glob(os.path.join(root, pattern)))
    return list(dict.fromkeys(out))


def ld_so_conf_dirs(conf: Path = Path("/etc/ld.so.conf")) -> list[str]:
    """The folders of /etc/ld.so.conf and its includes (what ldconfig puts in ld.so's cache)."""
    out: list[str] = []

    def read(path: Path, depth: int = 0) -> None:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if line.startswith("include ") and depth < 5:
                pattern = line.split(None, 1)[1]
                if not pattern.startswith("/"):
                    pattern = str(path.parent / pattern)
                for inc in sorted(glob.glob(pattern)):
                    read(Path(inc), depth + 1)
            elif line.startswith("/"):
                out.append(line)

    read(Path(conf))
    return list(dict.fromkeys(out))


@dataclass
class HostDirs:
    driver: list[str] = field(default_factory=lambda: list(DRIVER_DIRS))
    cuda: list[str] = field(default_factory=lambda: pip_cuda_dirs() + list(CUDA_DIRS))
    system: list[str] = field(default_factory=lambda: list(dict.fromkeys(ld_so_conf_dirs() + list(SYSTEM_DIRS))))


@dataclass
class Choice:
    soname: str
    path: str | None
    origin: str
    needed_by: str


def bundle_dirs(bundle: Path) -> dict[str, list[str]]:
    bundle = Path(bundle)
    extra = sorted(str(folder) for folder, _, others in walk(bundle / "extra")
                   if any((folder / n).is_file() or (folder / n).is_symlink() for n in others))
    return {"app": [str(bundle / "app" / "lib"), str(bundle / "app")],
            "cuda": [str(bundle / "cuda" / "lib64")] if (bundle / "cuda" / "lib64").is_dir() else [],
            "extra": extra}


def roots_of(bundle: Path, program: str = "llama-server") -> list[Path]:
    """The program and every ELF shared library of /app/lib (those a backend may dlopen too)."""
    bundle = Path(bundle)
    exe = bundle / "app" / program
    if not exe.is_file():
        exe = bundle / "app" / "bin" / program
    roots = [exe]
    lib = bundle / "app" / "lib"
    for path in sorted(lib.iterdir()) if lib.is_dir() else []:
        if path.is_file() and not path.is_symlink() and ".so" in path.name:
            try:
                read_elf(path)
            except ElfError:
                continue
            roots.append(path)
    return roots


def plan(bundle: Path, host: HostDirs, cuda_from: str = "auto", program: str = "llama-server") -> list[Choice]:
    """The decision for every library the program and /app/lib need."""
    dirs = bundle_dirs(bundle)
    if cuda_from not in ("auto", "image", "host"):
        raise ValueError(f"cuda_from: auto, image or host, not {cuda_from!r}")
    if cuda_from == "image" and not dirs["cuda"]:
        raise ValueError("the bundle carries no CUDA runtime (extract it with --with-cuda), so it cannot come "
                         "from the image")
    cuda_dirs = ([(d, IMAGE) for d in dirs["cuda"]] if cuda_from != "host" else []) + [(d, HOST_CUDA)
                                                                                         for d in host.cuda]

    def find(name: str, obj: ElfInfo, rpath: tuple[str, ...]) -> tuple[Path, str] | None:
        if is_driver_library(name):
            return find_in(name, [(d, HOST_DRIVER) for d in host.driver], obj)
        if is_cuda_library(name):
            return find_in(name, cuda_dirs, obj)
        return find_in(name, [(d, IMAGE) for d in dirs["app"]] + [(d, HOST_SYSTEM) for d in host.system]
                       + [(d, IMAGE) for d in dirs["extra"]], obj)

    res = resolve(roots_of(bundle, program), finder=find)
    return [Choice(r.soname, str(r.path) if r.path else None, r.via if r.path else MISSING, r.needed_by)
            for r in res.libraries.values()]


def link_farm(choices: list[Choice], folder: Path) -> Path:
    """A folder of soname -> chosen file links, for LD_LIBRARY_PATH. Every library is there, the host's
    own too (so nothing depends on ld.so's cache agreeing with our search), except glibc's, which
    must match the host's dynamic linker and are left to it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for c in choices:
        if c.path and c.soname not in GLIBC:
            os.symlink(os.path.abspath(c.path), folder / c.soname)
    return folder


def classify(path: str, soname: str, bundle: Path, host: HostDirs) -> str:
    """Where a file resolved by ld.so lies: the bundle (image), the driver, the host's CUDA, else the system."""
    real = os.path.realpath(path)

    def under(dirs: Iterable[str | Path]) -> bool:
        return any(real.startswith(os.path.realpath(d).rstrip("/") + "/") for d in dirs)

    if under([bundle]):
        return IMAGE
    if is_driver_library(soname) or is_driver_library(os.path.basename(real)):
        return HOST_DRIVER
    if under(host.cuda) or is_cuda_library(os.path.basename(real)):
        return HOST_CUDA
    return HOST_SYSTEM


def check(bundle: Path, farm: Path, host: HostDirs, program: str = "llama-server") -> list[Choice]:
    """What ld.so's own search gives with LD_LIBRARY_PATH=farm, classified by where each file lies."""
    res = resolve(roots_of(bundle, program), finder=ld_so_finder([str(farm)], tuple(host.system)))
    out = []
    for r in res.libraries.values():
        if r.path is None:
            out.append(Choice(r.soname, None, MISSING, r.needed_by))
        else:
            out.append(Choice(r.soname, os.path.realpath(r.path), classify(str(r.path), r.soname, bundle, host),
                              r.needed_by))
    return out


def loaded(pid: int, bundle: Path, host: HostDirs) -> list[Choice]:
    """The shared objects mapped into a running process, classified."""
    seen: dict[str, Choice] = {}
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        path = parts[5].replace(" (deleted)", "")
        name = os.path.basename(path)
        if ".so" not in name or path in seen:
            continue
        seen[path] = Choice(name, path, classify(path, name, bundle, host), "mapped")
    return list(seen.values())


def table(choices: list[Choice], bundle: Path | None = None) -> str:
    """library -> path -> origin, one line each, paths in the bundle shown relative to it."""
    rows = [("library", "path", "origin", "needed by")]
    for c in choices:
        path = c.path or "NOT FOUND"
        if bundle is not None and c.path and c.path.startswith(str(bundle) + "/"):
            path = "<bundle>/" + c.path[len(str(bundle)) + 1:]
        rows.append((c.soname, path, c.origin, c.needed_by))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{r[0].ljust(widths[0])}  {r[1].ljust(widths[1])}  {r[2].ljust(widths[2])}  {r[3]}"
                     for r in rows)


def as_dicts(choices: list[Choice]) -> list[dict[str, Any]]:
    return [asdict(c) for c in choices]


__all__ = ["CUDA_FAMILY", "Choice", "HOST_CUDA", "HOST_DRIVER", "HOST_SYSTEM", "HostDirs", "IMAGE", "MISSING",
           "as_dicts", "bundle_dirs", "check", "classify", "is_cuda_library", "ld_so_conf_dirs", "link_farm", "loaded",
           "pip_cuda_dirs",
           "plan", "roots_of", "table"]
