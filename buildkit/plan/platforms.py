"""Build machine and target platform (pure): when a build cross-compiles, and with what.

A build runs its compile on the build platform (the machine buildx builds on) and makes an image
for the target platform (build.platform). When they differ, the build stage still runs natively
(``FROM --platform=$BUILDPLATFORM``) and cross-compiles: Debian's cross gcc/g++ for the target
triplet, a CMake toolchain file, nvcc with the cross g++ as its host compiler, and the target's
libraries from multiarch packages (and, for CUDA, the target's toolkit libraries). No binary of
the target architecture runs at any step, so no QEMU or binfmt handler is needed.
"""

from __future__ import annotations

from buildkit.core.errors import ConfigError
# the catalogue itself lives in core (source/ reads it too); plan's modules and the templates take it from here
# (each `X as X`: an explicit re-export)
from buildkit.core.platforms import (ARCHES as ARCHES, DEFAULT_PLATFORM as DEFAULT_PLATFORM, Platform as Platform,
                                     cpu_arch as cpu_arch, engine_platform as engine_platform,
                                     machine_platform as machine_platform)


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
