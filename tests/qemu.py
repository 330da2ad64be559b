"""QEMU user emulation, registered with binfmt_misc only for as long as a test or bench needs it.

This machine has no binfmt handler, and the cross-build tests rely on that: a build that passes
here needed no emulation. Only the tests that are about emulation (and bench/cross_vs_emulated.py)
register one, through ``registered(arch)``: it installs Debian's qemu-user-static if missing (the
package only; nothing registers itself without systemd), mounts binfmt_misc if it is not mounted,
registers the handler with the F flag (the kernel opens the interpreter at registration, so it
works inside containers, which do not have it), and removes both again on the way out, also on
failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator

BINFMT = Path("/proc/sys/fs/binfmt_misc")

# qemu's scripts/qemu-binfmt-conf.sh: the ELF header bytes of each machine, and their mask
MAGIC = {
    "aarch64": (r"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00",
                r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff"),
    "x86_64": (r"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x3e\x00",
               r"\xff\xff\xff\xff\xff\xfe\xfe\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff"),
}


class QemuUnavailable(RuntimeError):
    """QEMU cannot be registered here (not root, no binfmt_misc in this kernel, no package)."""


def handlers() -> list[str]:
    """The binfmt_misc handlers registered now ([] when binfmt_misc is not mounted)."""
    if not (BINFMT / "register").exists():
        return []
    return sorted(p.name for p in BINFMT.iterdir() if p.name not in ("register", "status"))


def handler_for(machine: str) -> str | None:
    """The registered handler that runs `machine` (aarch64, x86_64) programs, if any."""
    return next((h for h in handlers() if h.endswith(machine)), None)


def _install() -> str:
    interpreter = shutil.which("qemu-aarch64-static")
    if interpreter:
        return interpreter
    if os.geteuid() != 0:
        raise QemuUnavailable("installing qemu-user-static needs root")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True)
    proc = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "qemu-user-static"],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise QemuUnavailable(f"apt-get install qemu-user-static failed: {proc.stderr.strip()[-300:]}")
    return shutil.which("qemu-aarch64-static") or "/usr/bin/qemu-aarch64-static"


@contextmanager
def registered(machine: str = "aarch64") -> Iterator[str]:
    """A binfmt_misc handler for `machine` programs while the block runs; yields its name."""
    if handler_for(machine):
        raise QemuUnavailable(f"a {machine} handler ({handler_for(machine)}) is registered already; "
                              "this machine is meant to have none")
    interpreter = Path(_install()).with_name(f"qemu-{machine}-static")
    mounted = False
    if not (BINFMT / "register").exists():
        proc = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise QemuUnavailable(f"cannot mount binfmt_misc: {proc.stderr.strip()}")
        mounted = True
    name = f"qemu-{machine}"
    magic, mask = MAGIC[machine]
    try:
        (BINFMT / "register").write_text(f":{name}:M::{magic}:{mask}:{interpreter}:F\n")
        yield name
    finally:
        entry = BINFMT / name
        if entry.exists():
            entry.write_text("-1\n")
        if mounted:
            subprocess.run(["umount", str(BINFMT)], capture_output=True)
