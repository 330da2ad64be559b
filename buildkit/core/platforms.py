"""The platform catalogue (pure): every platform buildkit builds images for, one entry each, holding what
every tool calls it and what buildkit needs to know of it.

One entry is all a platform is: the cross build (plan/platforms.py, the templates), CPU levels
(plan/cpulevels.py through the entry's ggml family, core/ggmlcpu.py), CUDA wheels and roots
(source/), the image checks (verify/: ELF machine, ld.so's folders, objdump, QEMU), the GPU host's
folders (gpu/libplan.py) and the CI runners (flows/nightly/jobs.py) read it from here, and keep no
table of their own (tests/unit/test_platform_catalogue.py holds that). docs/design.md, "Adding a
platform", says what a new one takes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from buildkit.core import ggmlcpu
from buildkit.core.errors import ConfigError
from buildkit.core.ggmlcpu import GgmlCpu


@dataclass(frozen=True)
class Platform:
    """One platform (linux/<docker>) as each tool names it."""
    docker: str  # amd64, arm64: linux/<docker>, the engine's Arch, an index's platform.architecture
    dpkg: str  # Debian's architecture (dpkg --add-architecture, libssl-dev:<dpkg>)
    triplet: str  # GNU triplet: the cross compilers' prefix, Debian's multiarch folders (/usr/lib/<triplet>)
    processor: str  # uname -m, CMAKE_SYSTEM_PROCESSOR, pip's platform_machine, a wheel tag's machine
    elf_machine: int  # e_machine of its ELF files
    elf_name: str  # how readelf names that machine
    objdump_name: str  # how `objdump -i` names it (an objdump that can disassemble its code lists it)
    dynamic_linker: str  # glibc's ld.so soname on it
    lib64: bool  # ld.so also searches /lib64 and /usr/lib64 (x86-64's psABI; AArch64 has none)
    ubuntu_mirror: str  # Ubuntu's archive of this architecture (amd64: archive; the others: ports)
    char_signed: bool  # plain char in its psABI: signed on x86-64, unsigned on AArch64
    long_double: str  # the format of long double in its psABI
    cuda_target: str | None  # the CUDA toolkit's targets/<name> folder; None: no NVIDIA GPU on it
    legacy_wheel_tags: tuple[str, ...]  # manylinux tags older than manylinux_2_X that pip takes for it
    github_runners: tuple[str, ...]  # GitHub-hosted runner labels of this CPU, the default first
    github_arch: str  # the runner.arch label (lower-case) self-hosted runners of this CPU carry
    # ggml's CPU backend family (levels, variants, core/ggmlcpu.py); None: build.cpu_level none only
    cpu: GgmlCpu | None = field(repr=False)

    @property
    def name(self) -> str:
        """linux/amd64: what build.platform and buildx --platform say."""
        return f"linux/{self.docker}"

    @property
    def cross_packages(self) -> tuple[str, ...]:
        """Debian's cross compilers that emit code for this architecture (on any other)."""
        name = self.triplet.replace("_", "-")
        return (f"gcc-{name}", f"g++-{name}", f"binutils-{name}")

    @property
    def cross_binutils(self) -> str:
        """Debian's binutils for this architecture's code on another machine (its objdump)."""
        return self.cross_packages[2]

    @property
    def lib_dirs(self) -> tuple[str, ...]:
        """ld.so's own search when neither a path variable nor the cache names a library (Debian/Ubuntu
        multiarch: the triplet's folders first)."""
        lib64 = ("/lib64", "/usr/lib64") if self.lib64 else ()
        return (f"/lib/{self.triplet}", f"/usr/lib/{self.triplet}", *lib64, "/lib", "/usr/lib")

    @property
    def qemu_handler(self) -> str:
        """The binfmt_misc handler that runs its programs elsewhere (tonistiigi/binfmt, qemu-user-static)."""
        return f"qemu-{self.processor}"


AMD64 = Platform(
    docker="amd64", dpkg="amd64", triplet="x86_64-linux-gnu", processor="x86_64",
    elf_machine=62, elf_name="Advanced Micro Devices X86-64", objdump_name="x86-64",
    dynamic_linker="ld-linux-x86-64.so.2", lib64=True,
    ubuntu_mirror="http://archive.ubuntu.com/ubuntu", char_signed=True, long_double="x87 80-bit extended",
    cuda_target="x86_64-linux", legacy_wheel_tags=("manylinux2014", "manylinux2010", "manylinux1"),
    github_runners=("ubuntu-latest", "ubuntu-24.04", "ubuntu-22.04"), github_arch="x64",
    cpu=ggmlcpu.X86)
ARM64 = Platform(
    docker="arm64", dpkg="arm64", triplet="aarch64-linux-gnu", processor="aarch64",
    elf_machine=183, elf_name="AArch64", objdump_name="aarch64",
    dynamic_linker="ld-linux-aarch64.so.1", lib64=False,
    ubuntu_mirror="http://ports.ubuntu.com/ubuntu-ports", char_signed=False, long_double="IEEE 128-bit quad",
    cuda_target="sbsa-linux", legacy_wheel_tags=("manylinux2014",),
    github_runners=("ubuntu-24.04-arm", "ubuntu-22.04-arm"), github_arch="arm64",
    cpu=ggmlcpu.ARM)

#: The catalogue, by Docker's name of the CPU, in the order every list of platforms is shown.
ARCHES: dict[str, Platform] = {p.docker: p for p in (AMD64, ARM64)}
#: The one cross direction NVIDIA documents for CUDA (build machine, target): x86_64 host, aarch64 target.
NVIDIA_CROSS = ("amd64", "arm64")
#: build.platform when nothing says otherwise (and the platform whose CUDA roots have no suffix).
DEFAULT_PLATFORM = "linux/amd64"


def cpu_arch(platform: str) -> Platform:
    """The entry of linux/amd64, linux/arm64 (or linux/arm64/v8); ConfigError for others."""
    parts = platform.split("/")
    arch = ARCHES.get(parts[1] if len(parts) > 1 else "")
    if arch is None or parts[0] != "linux":
        raise ConfigError(f"platform {platform!r}: buildkit builds {names(' and ')} images")
    return arch


def names(joiner: str = ", ") -> str:
    """linux/amd64 and linux/arm64: the catalogue for a message."""
    return joiner.join(p.name for p in ARCHES.values())


def by_machine(machine: str) -> Platform | None:
    """The entry of a machine name: uname -m (x86_64, aarch64) or Docker's (amd64, arm64)."""
    return next((p for p in ARCHES.values() if machine in (p.docker, p.processor)), None)


def by_elf_machine(machine: int) -> Platform | None:
    return next((p for p in ARCHES.values() if p.elf_machine == machine), None)


def machine_arch(machine: str | None = None) -> str:
    """Docker's name of a machine's CPU (this one's by default: uname -m); an unknown one as it is named."""
    machine = machine or os.uname().machine
    known = by_machine(machine)
    return known.docker if known else machine


def machine_platform(machine: str | None = None) -> str:
    """linux/<arch> of this machine (uname -m), the default build platform."""
    return f"linux/{machine_arch(machine)}"


def engine_platform(engine_arch: str) -> str:
    """linux/<arch> from the engine's own architecture name (docker version's Arch: amd64, arm64)."""
    return machine_platform(engine_arch) if engine_arch else ""


def default_platform() -> Platform:
    return cpu_arch(DEFAULT_PLATFORM)


def cuda_platforms() -> tuple[str, ...]:
    """The platforms with NVIDIA GPUs (a CUDA toolkit for them), in the catalogue's order."""
    return tuple(p.name for p in ARCHES.values() if p.cuda_target)


def platform_names() -> tuple[str, ...]:
    return tuple(p.name for p in ARCHES.values())
