"""Build machine and target platform (pure): when a build cross-compiles, and with what.

A build runs its compile on the build platform (the machine buildx builds on) and makes an image
for the target platform (build.platform). When they differ, the build stage still runs natively
(``FROM --platform=$BUILDPLATFORM``) and cross-compiles: Debian's cross gcc/g++ for the target
triplet, a CMake toolchain file, nvcc with the cross g++ as its host compiler, and the target's
libraries from multiarch packages (and, for CUDA, the target's toolkit libraries). No binary of
the target architecture runs at any step, so no QEMU or binfmt handler is needed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from buildkit.core.errors import ConfigError


@dataclass(frozen=True)
class CpuArch:
    """One CPU architecture as each tool names it."""
    docker: str  # amd64, arm64 (linux/<docker>)
    dpkg: str  # Debian's architecture (dpkg --add-architecture)
    triplet: str  # GNU triplet, Debian's multiarch folder (/usr/lib/<triplet>)
    processor: str  # CMAKE_SYSTEM_PROCESSOR, uname -m
    cuda_target: str  # the CUDA toolkit's targets/<name> folder of this architecture
    elf_machine: int  # e_machine of its ELF files
    elf_name: str  # how readelf names that machine
    ubuntu_mirror: str  # Ubuntu's archive of this architecture (amd64: archive; the others: ports)
    char_signed: bool  # plain char in its psABI: signed on x86-64, unsigned on AArch64
    long_double: str  # the format of long double in its psABI

    @property
    def cross_packages(self) -> tuple[str, ...]:
        """Debian's cross compilers that emit code for this architecture (on any other)."""
        name = self.triplet.replace("_", "-")
        return (f"gcc-{name}", f"g++-{name}", f"binutils-{name}")


def gcc_packages(build_platform: str, platform: str, major: int | None) -> tuple[str, ...]:
    """The packages of GCC `major` for the target (Debian's and Ubuntu's names): gcc-14, g++-14 natively;
    gcc-14-aarch64-linux-gnu, g++-14-aarch64-linux-gnu across. () for the base's own compiler (None)."""
    if major is None:
        return ()
    if not is_cross(build_platform, platform):
        return (f"gcc-{major}", f"g++-{major}")
    name = cpu_arch(platform).triplet.replace("_", "-")
    return (f"gcc-{major}-{name}", f"g++-{major}-{name}")


def gcc_commands(build_platform: str, platform: str, major: int | None) -> tuple[str, str]:
    """The C and C++ compilers of a build for platform: (gcc, g++) natively, the triplet's across; with
    the release's suffix when a release other than the base's own is asked for (gcc-14)."""
    prefix = f"{cpu_arch(platform).triplet}-" if is_cross(build_platform, platform) else ""
    suffix = f"-{major}" if major is not None else ""
    return f"{prefix}gcc{suffix}", f"{prefix}g++{suffix}"


ARCHES: dict[str, CpuArch] = {
    a.docker: a for a in (
        CpuArch("amd64", "amd64", "x86_64-linux-gnu", "x86_64", "x86_64-linux", 62, "Advanced Micro Devices X86-64",
                "http://archive.ubuntu.com/ubuntu", True, "x87 80-bit extended"),
        CpuArch("arm64", "arm64", "aarch64-linux-gnu", "aarch64", "sbsa-linux", 183, "AArch64",
                "http://ports.ubuntu.com/ubuntu-ports", False, "IEEE 128-bit quad"),
    )
}
_MACHINE_ALIASES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def cpu_arch(platform: str) -> CpuArch:
    """The CPU architecture of linux/amd64, linux/arm64 (or linux/arm64/v8); ConfigError for others."""
    parts = platform.split("/")
    arch = ARCHES.get(parts[1] if len(parts) > 1 else "")
    if arch is None or parts[0] != "linux":
        raise ConfigError(f"platform {platform!r}: buildkit builds linux/amd64 and linux/arm64 images")
    return arch


def machine_platform(machine: str | None = None) -> str:
    """linux/<arch> of this machine (uname -m), the default build platform."""
    machine = machine or os.uname().machine
    return f"linux/{_MACHINE_ALIASES.get(machine, machine)}"


def engine_platform(engine_arch: str) -> str:
    """linux/<arch> from the engine's own architecture name (docker version's Arch: amd64, arm64)."""
    return machine_platform(engine_arch) if engine_arch else ""


def is_cross(build_platform: str, platform: str) -> bool:
    return cpu_arch(build_platform).docker != cpu_arch(platform).docker


def judge_build_machine(build_platform: str, platform: str, engine: str, *, emulate: bool = False) -> str | None:
    """Whether the engine (running on `engine`, "" when unknown) can run this build's compile natively.

    None: it can. A line to show: the compile is emulated (a native build for another platform, or a
    cross build whose build machine is emulated on purpose: build.emulate_build_platform; slow).
    ConfigError: a cross build planned for another build machine without that (its build stage would
    run the other machine's compilers here)."""
    if not engine or cpu_arch(build_platform).docker == cpu_arch(engine).docker:
        return None
    if is_cross(build_platform, platform):
        if emulate:
            return (f"the build machine is emulated: a {build_platform} build stage cross-compiles for {platform} "
                    f"on a {engine} engine (build.emulate_build_platform); many times slower than on a "
                    f"{build_platform} machine, meant for tests and CI")
        raise ConfigError(f"this build cross-compiles for {platform} on a {build_platform} machine "
                          f"(build.build_platform), but the engine runs on {engine}: leave build.build_platform "
                          f"unset (this machine), build on a {build_platform} engine, or emulate that machine "
                          "(--emulate-build-platform, for tests and CI)")
    return (f"the compile runs under emulation: a {platform} build stage on a {engine} engine "
            f"(build.build_platform is {build_platform}); leave build.build_platform unset to cross-compile "
            "natively, many times faster")


def cuda_char_flags(build_platform: str, platform: str) -> tuple[str, ...]:
    """nvcc flags that give its front ends the target's plain char.

    cudafe++ and cicc take char's signedness from the machine nvcc runs on, not from the host compiler
    it is given: a cross build would see char as signed in one half of a .cu file and unsigned in the
    other (device loads, and host templates chosen on std::is_signed<char>, which cudafe++ decides).
    A cross build tells both the target's; a native build needs nothing."""
    if not is_cross(build_platform, platform):
        return ()
    kind = "signed" if cpu_arch(platform).char_signed else "unsigned"
    return (f"-Xcudafe=--{kind}_chars", f"-Xcicc=--{kind}_chars")


def long_double_differs(build_platform: str, platform: str) -> bool:
    """True when the build machine folds long double constants in another format than the target's
    (nvcc's front ends follow the machine they run on, and no flag changes that)."""
    return cpu_arch(build_platform).long_double != cpu_arch(platform).long_double


TOOLCHAIN_PATH = "/toolchain.cmake"  # where the build stage has it (templates/toolchain.cmake.j2, in the context)


def parse_platforms(text: str, where: str = "build.platform") -> tuple[str, ...]:
    """'linux/amd64,linux/arm64' -> ('linux/amd64', 'linux/arm64'), in the order written (the order of
    the index's manifests). One line for an empty item, a duplicate (also linux/arm64 next to
    linux/arm64/v8: one CPU) or a platform buildkit does not build."""
    items = [p.strip() for p in str(text).split(",")]
    if not any(items):
        raise ConfigError(f"{where} is empty; name a platform such as linux/amd64")
    seen: dict[str, str] = {}
    for item in items:
        if not item:
            raise ConfigError(f"{where} {text!r} has an empty entry (platforms are separated by one comma)")
        cpu = cpu_arch(item).docker  # an unknown platform: its own one-line error
        if cpu in seen:
            how = "" if seen[cpu] == item else f" ({seen[cpu]} and {item})"
            raise ConfigError(f"{where} {text!r} names linux/{cpu} twice{how}; each platform once")
        seen[cpu] = item
    return tuple(items)


def is_multi(text: str) -> bool:
    """True when build.platform names several platforms (a multi-platform build, one index per tag)."""
    return "," in str(text)
