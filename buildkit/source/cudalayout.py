"""Unpacking NVIDIA's CUDA wheels into the layout of an ordinary CUDA root (bin/, include/, lib64/,
nvvm/), with the libfoo.so development links the wheels lack."""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path, PurePosixPath

from buildkit.core.errors import CudaRootError
from buildkit.core.printable import printable


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


#: What one wheel may unpack to: NVIDIA's largest, nvidia-cublas 13.1, holds 569 MiB in 14 members and
#: nvidia-cuda-cccl 1,718 members; a zip bomb stops here, before a byte of it is written.
WHEEL_UNPACKED_LIMIT = 4 << 30
WHEEL_MEMBER_LIMIT = 20_000
WHEEL_DEPTH_LIMIT = 32  # parts of a member's path (the deepest of NVIDIA's wheels, cccl's: 10)


def _limits(wheel: Path, infos: list[zipfile.ZipInfo]) -> None:
    """CudaRootError, before anything is written, when the wheel's entries declare more than it may unpack;
    zipfile never reads a member past its declared size (its CRC fails first), so the bytes are bounded too."""
    if len(infos) > WHEEL_MEMBER_LIMIT:
        raise CudaRootError(f"{wheel.name} has {len(infos):,} members, more than the {WHEEL_MEMBER_LIMIT:,} a CUDA "
                            "wheel may have; refusing it")
    total = sum(info.file_size for info in infos)
    if total > WHEEL_UNPACKED_LIMIT:
        raise CudaRootError(f"{wheel.name} unpacks to {total:,} bytes, more than the {WHEEL_UNPACKED_LIMIT >> 30} GiB "
                            "a CUDA wheel may; refusing it")
    for info in infos:
        member = PurePosixPath(info.filename)
        if (member.is_absolute() or ".." in member.parts or "\\" in info.filename
                or len(member.parts) > WHEEL_DEPTH_LIMIT):
            raise CudaRootError(f"{wheel.name}: unsafe member {printable(info.filename[:200])}")


def extract_wheel(wheel: Path, root: Path) -> None:
    """Unpack the wheel's nvidia/<component>/ files into root's layout, within the limits above."""
    try:
        with zipfile.ZipFile(wheel) as z:
            infos = z.infolist()
            _limits(wheel, infos)
            for info in infos:
                if info.is_dir():
                    continue
                member = PurePosixPath(info.filename)
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
    except (zipfile.BadZipFile, EOFError) as e:
        raise CudaRootError(f"{wheel.name} is not a valid wheel: {e}") from e


def add_soname_links(libdir: Path) -> None:
    """libfoo.so -> libfoo.so.N for each versioned library lacking its development link."""
    if not libdir.is_dir():
        return
    for lib in sorted(libdir.iterdir(), key=lambda p: (len(p.name), p.name)):
        m = re.match(r"^(lib.+\.so)(\.\d+)+$", lib.name)
        if m and lib.is_file() and not lib.is_symlink():
            link = libdir / m.group(1)
            if not link.exists() and not link.is_symlink():
                link.symlink_to(lib.name)
