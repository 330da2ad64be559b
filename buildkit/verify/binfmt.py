"""Can this machine run another architecture's programs: the kernel's binfmt_misc handlers.

Each registered handler is a file /proc/sys/fs/binfmt_misc/<name> such as

    enabled
    interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P
    flags: PF
    offset 0
    magic 7f454c460201010000000000000000000200b700
    mask ffffffffffffff00fffffffffffffffffeffffff

(or `extension .exe` instead of magic and mask), and /proc/sys/fs/binfmt_misc/status says
whether binfmt_misc as a whole is enabled. A program runs under a handler when the handler and
binfmt_misc are enabled and the program's first bytes, masked, equal the handler's magic.

Parsing and matching are pure (tested on sample file contents); `registered` reads the folder.
The handlers read are this machine's: the engine is taken to run here (a remote engine's are unknown).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from buildkit.plan.platforms import cpu_arch

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
NOT_HANDLERS = ("register", "status")


@dataclass(frozen=True)
class Handler:
    name: str
    enabled: bool
    interpreter: str
    flags: str = ""
    offset: int = 0
    magic: bytes = b""
    mask: bytes = b""  # empty: all ones
    extension: str = ""  # an extension handler matches file names, never ELF headers

    def matches(self, header: bytes) -> bool:
        """The file whose first bytes are header is one this handler runs (enabled or not)."""
        if self.extension or not self.magic:
            return False
        chunk = header[self.offset:self.offset + len(self.magic)]
        if len(chunk) < len(self.magic):
            return False
        mask = self.mask or b"\xff" * len(self.magic)  # the kernel keeps a mask as long as its magic
        return all((c & m) == (g & m) for c, m, g in zip(chunk, mask, self.magic, strict=False))


def parse_handler(name: str, text: str) -> Handler | None:
    """One handler file's contents; None when it is not a handler (unreadable, no interpreter)."""
    fields: dict[str, str] = {}
    enabled = False
    for line in text.splitlines():
        line = line.strip()
        if line in ("enabled", "disabled"):
            enabled = line == "enabled"
            continue
        key, _, value = line.partition(" ")
        fields[key.rstrip(":")] = value.strip()
    interpreter = fields.get("interpreter", "")
    if not interpreter:
        return None
    try:
        magic = bytes.fromhex(fields.get("magic", ""))
        mask = bytes.fromhex(fields.get("mask", ""))
        offset = int(fields.get("offset", "0"))
    except ValueError:
        return None
    return Handler(name=name, enabled=enabled, interpreter=interpreter, flags=fields.get("flags", ""),
                   offset=offset, magic=magic, mask=mask, extension=fields.get("extension", ""))


def registered(folder: Path | None = None) -> list[Handler]:
    """The handlers registered here (folder: BINFMT_DIR), each enabled only when binfmt_misc itself is
    (none when it is not mounted)."""
    folder = Path(folder or BINFMT_DIR)
    try:
        names = sorted(p.name for p in folder.iterdir() if p.name not in NOT_HANDLERS)
        status = (folder / "status").read_text().strip() if (folder / "status").exists() else "enabled"
    except OSError:
        return []
    handlers = []
    for name in names:
        try:
            handler = parse_handler(name, (folder / name).read_text())
        except OSError:
            continue
        if handler is not None:
            handlers.append(handler if status == "enabled" else
                            Handler(**{**handler.__dict__, "enabled": False}))
    return handlers


def handler_for(header: bytes, handlers: list[Handler]) -> Handler | None:
    """The enabled handler that would run a file starting with header (the kernel tries them in order)."""
    return next((h for h in handlers if h.enabled and h.matches(header)), None)


def not_runnable(platform: str, engine_arch: str, header: bytes, handlers: list[Handler]) -> str:
    """Why the image's programs cannot run on the engine's machine ("" when they can: the same
    CPU, or an enabled handler for the program's header, e.g. qemu-aarch64)."""
    target = cpu_arch(platform)
    if not engine_arch or target.docker == engine_arch:
        return ""
    if handler_for(header, handlers) is not None:
        return ""
    return (f"{platform} image on a linux/{engine_arch} engine and no binfmt handler for {target.elf_name} "
            "registered: not run")


def elf_header(machine: int, elf_class: int = 2, little_endian: bool = True, e_type: int = 2) -> bytes:
    """The first 20 bytes of an ELF executable of this machine (when no real file is at hand)."""
    order = "<" if little_endian else ">"
    ident = b"\x7fELF" + bytes([elf_class, 1 if little_endian else 2, 1, 0]) + b"\0" * 8
    return ident + struct.pack(order + "HH", e_type, machine)


__all__ = ["BINFMT_DIR", "Handler", "elf_header", "handler_for", "not_runnable", "parse_handler", "registered"]
