"""The build machine's CPU (read from /proc/cpuinfo): what `native` compiles for and what the
server in a freshly built image loads on this machine."""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path

from buildkit.core.platforms import machine_arch

CPUINFO = Path("/proc/cpuinfo")


def _cpuinfo(path: Path = CPUINFO) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def cpu_flags(cpuinfo: str) -> set[str]:
    """The first CPU's flags in a /proc/cpuinfo text (x86: `flags`, arm64: `Features`)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def host_cpu_flags(path: Path = CPUINFO) -> set[str]:
    return cpu_flags(_cpuinfo(path))


def host_cpu_model(path: Path = CPUINFO) -> str:
    for line in _cpuinfo(path).splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("model name", "CPU part"):
            return value.strip()
    return platform.processor() or "unknown"


def host_cpu_id(path: Path = CPUINFO) -> str:
    """A stable name for this machine's instruction sets: model and a hash of the flags."""
    flags = " ".join(sorted(host_cpu_flags(path)))
    return f"{host_cpu_model(path)} (flags {hashlib.sha256(flags.encode()).hexdigest()[:12]})"


def host_platform_arch() -> str:
    """amd64 / arm64 / the machine name, as in a Docker platform."""
    return machine_arch(platform.machine().lower())
