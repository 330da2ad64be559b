"""CPU instruction-set levels (pure): which CPU backend(s) an image carries, as explicit CMake flags.

ggml's CMake turns GGML_NATIVE_DEFAULT off whenever SOURCE_DATE_EPOCH is set (our builds always
set it), and with it the default of every x86 instruction-set option: left to its defaults, a
reproducible build has no AVX at all. So every level passes every relevant GGML_* flag itself.

    all        GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS: one libggml-cpu-<variant>.so per level,
               the best one the machine supports is loaded when the server starts (the default,
               as upstream's own images)
    x86-64-v2  one libggml-cpu.so (GGML_BACKEND_DL) for that x86-64 psABI level (v2: SSE4.2,
    x86-64-v3  v3: AVX, AVX2, BMI2, FMA, F16C; v4: v3 + AVX-512 F/CD/VL/DQ/BW)
    x86-64-v4
    sapphirerapids  a named CPU of x86-64: one libggml-cpu.so, every C/C++ compile with -march=<name>
    znver4          (CMAKE_C_FLAGS, CMAKE_CXX_FLAGS: ggml has no x86 -march option) and the GGML_<feature>
                    options that -march turns on (so ggml's feature check refuses a CPU without them);
                    znver4 needs GCC 13: the build stage installs GCC 14 (gcc_needed)
    armv8.2    arm64: one libggml-cpu.so built with GGML_CPU_ARM_ARCH (armv8.2-a+dotprod+fp16,
    armv8.6    armv8.6-a+dotprod+fp16+sve+i8mm: upstream's armv8.2_2 and armv8.6_1 variants;
    neoverse-v2  armv9-a+dotprod+fp16+sve+i8mm+sve2+bf16: Grace, GB10)
    native     GGML_NATIVE=ON: -march=native of the build machine. Not reproducible across
               machines, and the image may not start (SIGILL) on an older CPU
    none       no instruction set beyond the platform's baseline (x86-64: SSE2; arm64: armv8-a,
               whose NEON is part of the base ISA); the baseline of benchmarks

The backends go to /app/lib and are found there through GGML_BACKEND_DIR (compiled in).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from buildkit.core.errors import ConfigError
from buildkit.core.ggmlcpu import (ARM_VARIANTS, X86_FEATURES, X86_SCORE_BITS, X86_VARIANTS,  # noqa: F401
                                   GgmlCpu)
from buildkit.core.platforms import ARCHES

DEFAULT_LEVEL = "all"
BACKEND_DIR = "/app/lib"

@dataclass(frozen=True)
class CpuLevel:
    name: str
    platform_arch: str | None  # amd64 / arm64, None for any
    summary: str
    features: tuple[str, ...] = ()  # x86: ggml's GGML_<feature> options turned on
    arm_arch: str = ""  # GGML_CPU_ARM_ARCH
    reproducible: bool = True  # False: the code depends on the machine that builds it
    march: str = ""  # a named CPU of a family without an -march option (x86): -march=<march> in the C/C++ flags
    gcc: int | None = None  # the GCC release that knows the -march, when the bases' own may not

    @property
    def description(self) -> str:
        """Its one line for `--help` and errors: the platform it is for, and its summary."""
        where = f"(linux/{self.platform_arch}) " if self.platform_arch else ""
        return where + self.summary.removeprefix(f"{self.name}: ")

    @property
    def all_variants(self) -> bool:
        return self.name == "all"

    @property
    def native(self) -> bool:
        return self.name == "native"

    @property
    def backend_dl(self) -> bool:
        """ggml refuses GGML_NATIVE with GGML_BACKEND_DL (its feature check needs known flags)."""
        return not self.native


LEVELS: dict[str, CpuLevel] = {lv.name: lv for lv in (
    CpuLevel("all", None, "every variant of the platform (GGML_CPU_ALL_VARIANTS), the best loaded at start-up"),
    # the single levels of each platform's instruction-set family (core/ggmlcpu.py), in the catalogue's order
    *(CpuLevel(single.name, p.docker, single.summary, single.features,
               arm_arch=single.march if p.cpu.march_option else "",
               march="" if p.cpu.march_option else single.march, gcc=single.gcc or None)
      for p in ARCHES.values() if p.cpu for single in p.cpu.levels),
    CpuLevel("native", None, "-march=native of the build machine: NOT reproducible across machines",
             reproducible=False),
    CpuLevel("none", None, "the platform baseline only (x86-64: SSE2; arm64: armv8-a), for benchmarks"),
)}


def platform_arch(platform: str) -> str:
    """linux/amd64 -> amd64; linux/arm64/v8 -> arm64."""
    parts = platform.split("/")
    return parts[1] if len(parts) > 1 else parts[0]


def family(platform: str) -> GgmlCpu | None:
    """ggml's CPU facts of the platform's instruction sets; None for a platform without CPU levels."""
    known = ARCHES.get(platform_arch(platform))
    return known.cpu if known else None


def get_level(name: str, platform: str) -> CpuLevel:
    level = LEVELS.get(str(name).strip().lower())
    if level is None:
        raise ConfigError(f"build.cpu_level {name!r} is not one of: {described()}")
    arch = platform_arch(platform)
    if family(platform) is None and level.name != "none":
        with_levels = " and ".join(p.name for p in ARCHES.values() if p.cpu)
        raise ConfigError(f"build.cpu_level {level.name}: CPU levels are defined for {with_levels}, "
                          f"not {platform}; use none")
    if level.platform_arch and level.platform_arch != arch:
        raise ConfigError(f"build.cpu_level {level.name} is for linux/{level.platform_arch}, "
                          f"but build.platform is {platform}")
    return level


def described() -> str:
    """Every level with its one-line description, on one line (an error's, `--cpu-level`'s help)."""
    return "; ".join(f"{lv.name}: {lv.description}" for lv in LEVELS.values())


def gcc_line(level: CpuLevel, platform: str) -> str | None:
    """What the build stage does for a level whose -march needs a newer GCC than the base may have (one line,
    shown before the build), or None."""
    if not level.gcc:
        return None
    return (f"cpu level {level.name}: Debian 12's GCC 12.2 does not know -march={level.march or level.arm_arch}; "
            f"the build stage installs GCC {level.gcc} (gcc-{level.gcc}, g++-{level.gcc}) from the base's archive and "
            f"compiles with it (Ubuntu 24.04, the default, and Debian 13 have it; on Debian 12 use --cpu-level "
            f"{fallback(level)})")


def fallback(level: CpuLevel) -> str:
    """The widest level of the same platform that every base's own GCC compiles and the level's CPU runs."""
    within = [lv for lv in LEVELS.values() if lv.platform_arch == level.platform_arch and not lv.gcc
              and not lv.march and set(lv.features) <= set(level.features)]
    return max(within, key=lambda lv: len(lv.features)).name if within else "none"


def variant_suffix(level: CpuLevel, cuda: bool) -> str:
    """'' for the default level; else cpu-<level> for the cpu image, cuda13.1-sm120-cpu-<level> for CUDA."""
    if level.name == DEFAULT_LEVEL:
        return ""
    return f"-cpu-{level.name}" if cuda else f"-{level.name}"


def cmake_flags(level: CpuLevel, platform: str) -> tuple[str, ...]:
    """Every GGML_* flag that decides the CPU code, whatever ggml's defaults would have been."""
    cpu = family(platform)
    on: Callable[[bool], str] = lambda b: "ON" if b else "OFF"  # noqa: E731
    args = [f"-DGGML_NATIVE={on(level.native)}",
            f"-DGGML_BACKEND_DL={on(level.backend_dl)}",
            f"-DGGML_CPU_ALL_VARIANTS={on(level.all_variants)}"]
    if level.backend_dl:
        args.append(f"-DGGML_BACKEND_DIR={BACKEND_DIR}")
    if cpu is not None:
        args += [f"-DGGML_{f}={on(f in level.features)}" for f in cpu.feature_options]
        if cpu.march_option:
            march = level.arm_arch or (cpu.baseline_march if level.name == "none" else "")
            args.append(f"-D{cpu.march_option}={march}")
    args += [f"-D{var}={flag}" for var, flag in compiler_flags(level)]
    return tuple(args)


def compiler_flags(level: CpuLevel) -> tuple[tuple[str, str], ...]:
    """(CMake variable, flag) of a named CPU's -march: every C and C++ compile gets it (no other -mtune than
    what -march implies); () for every other level, whose flags are ggml's options only."""
    if not level.march:
        return ()
    return (("CMAKE_C_FLAGS", f"-march={level.march}"), ("CMAKE_CXX_FLAGS", f"-march={level.march}"))


# Variants of other operating systems in the same CMake file (not built for a Linux image)
_OTHER_OS_PREFIXES = ("android_", "apple_")


def gcc_needed(level: CpuLevel, platform: str, declared: tuple[tuple[str, tuple[str, ...]], ...]) -> int | None:
    """The GCC release the CPU backend needs beyond the base's own compiler, or None: level all compiles every
    Linux variant the tree declares (source/cpuvariants.py), and a feature whose -march the bases' GCC lacks
    needs the family's release for it (arm64's SME: GCC 14, core/ggmlcpu.py `gcc_for`)."""
    cpu = family(platform)
    if level.gcc:
        return level.gcc  # a named CPU whose -march the base's GCC may not know (core/ggmlcpu.py SingleLevel.gcc)
    if not (level.all_variants and cpu is not None):
        return None
    needs = [cpu.gcc_for[f] for name, feats in declared if not name.startswith(_OTHER_OS_PREFIXES)
             for f in feats if f in cpu.gcc_for]
    return max(needs) if needs else None


# --------------------------------------------------------------------------- what verify expects

def variants_for(platform: str) -> dict[str, tuple[str, ...]]:
    cpu = family(platform)
    return cpu.variants if cpu else {}


def required_variants(platform: str) -> tuple[str, ...]:
    cpu = family(platform)
    return cpu.required_variants if cpu else ()


def level_features(level: CpuLevel) -> tuple[str, ...]:
    """The features of a single-level backend (arm: read from its -march string)."""
    cpu = family(f"linux/{level.platform_arch}") if level.platform_arch else None
    if level.arm_arch and cpu is not None:
        names = cpu.march_features
        return tuple(names[t] for t in level.arm_arch.split("+")[1:] if t in names)
    return level.features


def host_features(cpuinfo_flags: set[str], platform: str) -> set[str]:
    """ggml feature names the CPU with these /proc/cpuinfo flags supports."""
    cpu = family(platform)
    table = cpu.cpuinfo if cpu else {}
    return {feat for feat, flags in table.items() if all(f in cpuinfo_flags for f in flags)}


def score(features: tuple[str, ...], supported: set[str], platform: str) -> int:
    """ggml's ggml_backend_score for a variant built with `features` on a CPU supporting `supported`."""
    cpu = family(platform)
    bits = cpu.score_bits if cpu else {}
    if any(f not in supported for f in features):
        return 0
    return 1 + sum(1 << bits[f] for f in features if f in bits)


def best_variant(names: list[str], supported: set[str], platform: str) -> str | None:
    """Of the variants present, the one ggml loads on this CPU (None: none runs here)."""
    table = variants_for(platform)
    scored = [(score(table[n], supported, platform), n) for n in names if n in table]
    scored = [s for s in scored if s[0] > 0]
    return max(scored)[1] if scored else None


# SIMD classes a backend's code is checked for (verify/cpucode.py): the widest vector code its
# features promise. x64/none: nothing required.
def simd_class(features: tuple[str, ...], platform: str) -> str:
    cpu = family(platform)
    if cpu is None:
        return "baseline"
    return next((cls for feature, cls in cpu.simd_classes if feature in features), cpu.simd_baseline)
