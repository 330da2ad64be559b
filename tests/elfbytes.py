"""Small ELF files written byte by byte, for tests that need a given machine, class or dynamic section
without a compiler for it (an AArch64 library on an x86-64 machine).

    write_elf(path, machine=183, needed=["libc.so.6"], soname="libx.so.1", runpath=["$ORIGIN"])

The file has an ELF header, one PT_LOAD segment that maps the whole file at address 0, and a
PT_DYNAMIC segment (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH, DT_STRTAB, DT_STRSZ) when any
dynamic entry is asked for, and a PT_INTERP segment for an interpreter: what ld.so and buildkit's
elfdeps read, nothing else.
"""

from __future__ import annotations

import struct
from pathlib import Path

EM_X86_64, EM_AARCH64, EM_386, EM_ARM = 62, 183, 3, 40
PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29


def elf_bytes(machine: int = EM_X86_64, *, elf_class: int = 2, e_type: int = 3, needed=(), soname: str | None = None,
              rpath=(), runpath=(), dynamic: bool | None = None, interpreter: str | None = None) -> bytes:
    """A little-endian ELF file (class 2: 64-bit, 1: 32-bit) of the machine; e_type 2 EXEC, 3 DYN."""
    wide = elf_class == 2
    ehsize, phentsize = (64, 56) if wide else (52, 32)
    has_dynamic = bool(needed or soname or rpath or runpath) if dynamic is None else dynamic
    phnum = 1 + has_dynamic + bool(interpreter)
    strings = bytearray(b"\0")

    def add(text: str) -> int:
        offset = len(strings)
        strings.extend(text.encode() + b"\0")
        return offset

    entries = [(DT_NEEDED, add(n)) for n in needed]
    if soname:
        entries.append((DT_SONAME, add(soname)))
    if rpath:
        entries.append((DT_RPATH, add(":".join(rpath))))
    if runpath:
        entries.append((DT_RUNPATH, add(":".join(runpath))))
    strtab_off = ehsize + phnum * phentsize
    interp_off = strtab_off + add(interpreter) if interpreter else 0
    interp_len = len(interpreter) + 1 if interpreter else 0
    dyn_off = strtab_off + len(strings)
    dyn_off += (-dyn_off) % 8
    entries += [(DT_STRTAB, strtab_off), (DT_STRSZ, len(strings)), (DT_NULL, 0)]
    dyn_fmt = "<qQ" if wide else "<iI"
    dyn = b"".join(struct.pack(dyn_fmt, tag, value) for tag, value in entries) if has_dynamic else b""
    total = dyn_off + len(dyn)

    ident = b"\x7fELF" + bytes([elf_class, 1, 1, 0]) + b"\0" * 8
    if wide:
        header = ident + struct.pack("<HHIQQQIHHHHHH", e_type, machine, 1, 0, ehsize, 0, 0, ehsize, phentsize,
                                     phnum, 64, 0, 0)
        phdr = struct.pack("<IIQQQQQQ", PT_LOAD, 5, 0, 0, 0, total, total, 0x1000)
        if has_dynamic:
            phdr += struct.pack("<IIQQQQQQ", PT_DYNAMIC, 6, dyn_off, dyn_off, dyn_off, len(dyn), len(dyn), 8)
        if interpreter:
            phdr += struct.pack("<IIQQQQQQ", PT_INTERP, 4, interp_off, interp_off, interp_off, interp_len,
                                interp_len, 1)
    else:
        header = ident + struct.pack("<HHIIIIIHHHHHH", e_type, machine, 1, 0, ehsize, 0, 0, ehsize, phentsize,
                                     phnum, 40, 0, 0)
        phdr = struct.pack("<IIIIIIII", PT_LOAD, 0, 0, 0, total, total, 5, 0x1000)
        if has_dynamic:
            phdr += struct.pack("<IIIIIIII", PT_DYNAMIC, dyn_off, dyn_off, dyn_off, len(dyn), len(dyn), 6, 4)
        if interpreter:
            phdr += struct.pack("<IIIIIIII", PT_INTERP, interp_off, interp_off, interp_off, interp_len,
                                interp_len, 4, 1)
    body = header + phdr + bytes(strings)
    body += b"\0" * (dyn_off - len(body))
    return body + dyn


def write_elf(path: Path, machine: int = EM_X86_64, **kwargs) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(elf_bytes(machine, **kwargs))
    path.chmod(0o755)
    return path
