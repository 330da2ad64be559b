"""What the dynamic linker will load for an ELF program, worked out in pure Python (no ldd, no readelf).

`read_elf` reads an ELF file's dynamic section: DT_NEEDED, DT_SONAME, DT_RPATH and DT_RUNPATH,
plus its class and machine (the linker skips a library of another class or machine).
`resolve` follows the NEEDED entries from one or more objects the way ld.so searches
(DT_RPATH of the loading chain when there is no DT_RUNPATH, then LD_LIBRARY_PATH, then the
object's DT_RUNPATH, then the system folders), each soname once, breadth first.

Stdlib only (and the platform catalogue, core/platforms.py, also stdlib only): it runs on GPU hosts where
pyelftools is not installed (scripts/gpu_run.py).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from buildkit.core.platforms import by_elf_machine, default_platform

PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29

# ld.so's own search when neither a path variable nor the cache names a library: the default platform's
# (x86-64 Debian/Ubuntu, the GPU hosts of scripts/gpu_run.py); machine_system_dirs has each platform's
SYSTEM_DIRS = default_platform().lib_dirs


class ElfError(ValueError):
    """Not an ELF file, or one whose dynamic section cannot be read."""


@dataclass(frozen=True)
class ElfInfo:
    path: Path
    elf_class: int  # 1: 32-bit, 2: 64-bit
    machine: int  # e_machine (62: x86-64)
    needed: tuple[str, ...] = ()
    soname: str | None = None
    rpath: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    interpreter: str | None = None  # PT_INTERP: the dynamic linker a program names (absolute path)

    def compatible(self, other: ElfInfo) -> bool:
        return self.elf_class == other.elf_class and self.machine == other.machine


def read_elf(path: Path) -> ElfInfo:
    """The dynamic-linking facts of one ELF file (static files give empty lists)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ElfError(f"{path}: {exc.strerror or exc}") from None
    if len(data) < 52 or data[:4] != b"\x7fELF":
        raise ElfError(f"{path}: not an ELF file")
    elf_class, order = data[4], data[5]
    if elf_class not in (1, 2) or order not in (1, 2):
        raise ElfError(f"{path}: unknown ELF class {elf_class} or byte order {order}")
    end = "<" if order == 1 else ">"
    try:
        if elf_class == 2:
            (_, machine, _, _, phoff, _, _, _, phentsize, phnum) = struct.unpack_from(end + "HHIQQQIHHH", data, 16)
            ph_fmt, dyn_fmt = end + "IIQQQQQQ", end + "qQ"
        else:
            (_, machine, _, _, phoff, _, _, _, phentsize, phnum) = struct.unpack_from(end + "HHIIIIIHHH", data, 16)
            ph_fmt, dyn_fmt = end + "IIIIIIII", end + "iI"
        loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz) of each PT_LOAD
        dynamic, interp = None, None
        for i in range(phnum):
            fields_ = struct.unpack_from(ph_fmt, data, phoff + i * phentsize)
            if elf_class == 2:
                p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = fields_
            else:
                p_type, p_offset, p_vaddr, _, p_filesz, _, _, _ = fields_
            if p_type == PT_LOAD:
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == PT_DYNAMIC:
                dynamic = (p_offset, p_filesz)
            elif p_type == PT_INTERP:
                interp = data[p_offset:p_offset + p_filesz].split(b"\0", 1)[0].decode("utf-8", "replace")
    except struct.error:
        raise ElfError(f"{path}: truncated ELF header") from None
    if dynamic is None:
        return ElfInfo(path, elf_class, machine, interpreter=interp)

    entries: list[tuple[int, int]] = []
    size = struct.calcsize(dyn_fmt)
    offset, length = dynamic
    for pos in range(offset, min(offset + length, len(data)) - size + 1, size):
        tag, value = struct.unpack_from(dyn_fmt, data, pos)
        if tag == DT_NULL:
            break
        entries.append((tag, value))
    strtab = next((v for t, v in entries if t == DT_STRTAB), None)
    if strtab is None:
        raise ElfError(f"{path}: dynamic section without a string table")

    def file_offset(vaddr: int) -> int:
        for start, off, filesz in loads:
            if start <= vaddr < start + filesz:
                return vaddr - start + off
        raise ElfError(f"{path}: address {vaddr:#x} is in no loaded segment")

    base = file_offset(strtab)

    def string(index: int) -> str:
        stop = data.find(b"\0", base + index)
        if stop < 0:
            raise ElfError(f"{path}: string {index} runs past the end of the file")
        return data[base + index:stop].decode("utf-8", "replace")

    def paths(tag: int) -> tuple[str, ...]:
        return tuple(p for t, v in entries if t == tag for p in string(v).split(":") if p)

    soname = next((string(v) for t, v in entries if t == DT_SONAME), None)
    return ElfInfo(path, elf_class, machine, needed=tuple(string(v) for t, v in entries if t == DT_NEEDED),
                   soname=soname, rpath=paths(DT_RPATH), runpath=paths(DT_RUNPATH), interpreter=interp)


def machine_system_dirs(machine: int) -> tuple[str, ...]:
    """ld.so's system folders for ELF files of this e_machine (only /lib, /usr/lib for one unknown here)."""
    known = by_elf_machine(machine)
    return known.lib_dirs if known else ("/lib", "/usr/lib")


def expand_origin(entry: str, obj: Path) -> str:
    origin = str(Path(obj).parent)
    return entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)


@dataclass
class Resolved:
    soname: str
    path: Path | None  # None: not found anywhere
    needed_by: str  # the object that first needed it
    via: str  # rpath, LD_LIBRARY_PATH, runpath, system, path (a NEEDED with a slash)


@dataclass
class Resolution:
    libraries: dict[str, Resolved] = field(default_factory=dict)

    @property
    def missing(self) -> list[Resolved]:
        return [r for r in self.libraries.values() if r.path is None]


def find_in(name: str, dirs: list[tuple[str, str]], want: ElfInfo) -> tuple[Path, str] | None:
    """The first `dir/name` that is an ELF file of want's class and machine, with the dir's label."""
    for folder, via in dirs:
        candidate = Path(folder) / name
        if not candidate.exists():
            continue
        try:
            info = read_elf(candidate)
        except ElfError:
            continue
        if info.compatible(want):
            return candidate, via
    return None


Finder = Callable[[str, ElfInfo, tuple[str, ...]], "tuple[Path, str] | None"]


def ld_so_finder(ld_library_path: Sequence[str] = (), system_dirs: tuple[str, ...] = SYSTEM_DIRS) -> Finder:
    """ld.so's order: DT_RPATH (of the chain, when the object has no DT_RUNPATH), LD_LIBRARY_PATH,
    DT_RUNPATH, the system folders."""
    def find(name: str, obj: ElfInfo, rpath: tuple[str, ...]) -> tuple[Path, str] | None:
        dirs = ([(p, "rpath") for p in rpath] + [(p, "LD_LIBRARY_PATH") for p in ld_library_path]
                + [(expand_origin(p, obj.path), "runpath") for p in obj.runpath]
                + [(p, "system") for p in system_dirs])
        return find_in(name, dirs, obj)
    return find


def resolve(roots: list[Path], ld_library_path: Sequence[str] = (), system_dirs: tuple[str, ...] = SYSTEM_DIRS,
            finder: Finder | None = None) -> Resolution:
    """Every library the roots need, directly or not, with the file ld.so would pick (or the
    finder, when one is given).

    Each soname is searched once, from the first object that needs it, as ld.so does."""
    find = finder or ld_so_finder(ld_library_path, system_dirs)
    result = Resolution()
    infos = {Path(r): read_elf(r) for r in roots}
    queue: list[tuple[ElfInfo, tuple[str, ...]]] = [(info, ()) for info in infos.values()]
    seen_paths = {os.path.realpath(r) for r in infos}
    while queue:
        obj, inherited_rpath = queue.pop(0)
        rpath = () if obj.runpath else tuple(expand_origin(p, obj.path) for p in obj.rpath) + inherited_rpath
        for name in obj.needed:
            if name in result.libraries:
                continue
            if "/" in name:
                found = (Path(name), "path") if Path(name).exists() else None
            else:
                found = find(name, obj, rpath)
            result.libraries[name] = Resolved(name, found[0] if found else None, obj.path.name,
                                              found[1] if found else "-")
            if found and os.path.realpath(found[0]) not in seen_paths:
                seen_paths.add(os.path.realpath(found[0]))
                queue.append((read_elf(found[0]), rpath))
    return result


__all__ = ["ElfError", "ElfInfo", "Finder", "Resolution", "Resolved", "SYSTEM_DIRS",
           "expand_origin", "find_in", "ld_so_finder", "machine_system_dirs", "read_elf",
           "resolve"]
