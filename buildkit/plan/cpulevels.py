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
    armv8.2    arm64: one libggml-cpu.so built with GGML_CPU_ARM_ARCH (armv8.2-a+dotprod+fp16,
    armv8.6    armv8.6-a+dotprod+fp16+sve+i8mm: upstream's armv8.2_2 and armv8.6_1 variants)
    native     GGML_NATIVE=ON: -march=native of the build machine. Not reproducible across
               machines, and the image may not start (SIGILL) on an older CPU
    none       no instruction set beyond the platform's baseline (x86-64: SSE2; arm64: armv8-a,
               whose NEON is part of the base ISA); the baseline of benchmarks

The backends go to /app/lib and are found there through GGML_BACKEND_DIR (compiled in).
"""

from __future__ import annotations

from dataclasses import dataclass

from buildkit.core.errors import ConfigError

DEFAULT_LEVEL = "all"
BACKEND_DIR = "/app/lib"

# Every x86 instruction-set option of ggml (ggml/CMakeLists.txt), in ggml's order.
X86_FEATURES = ("SSE42", "AVX", "AVX2", "BMI2", "AVX_VNNI", "FMA", "F16C", "AVX512", "AVX512_VBMI",
                "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8", "AMX_BF16")
X86_V3 = ("SSE42", "AVX", "AVX2", "BMI2", "FMA", "F16C")

# GGML_CPU_ALL_VARIANTS: upstream's variants and their features (ggml/src/CMakeLists.txt).
X86_VARIANTS: dict[str, tuple[str, ...]] = {
    "x64": (),
    "sse42": ("SSE42",),
    "sandybridge": ("SSE42", "AVX"),
    "ivybridge": ("SSE42", "AVX", "F16C"),
    "piledriver": ("SSE42", "AVX", "F16C", "FMA"),
    "haswell": X86_V3,
    "skylakex": X86_V3 + ("AVX512",),
    "cannonlake": X86_V3 + ("AVX512", "AVX512_VBMI"),
    "cascadelake": X86_V3 + ("AVX512", "AVX512_VNNI"),
    "icelake": X86_V3 + ("AVX512", "AVX512_VBMI", "AVX512_VNNI"),
    "cooperlake": X86_V3 + ("AVX512", "AVX512_VNNI", "AVX512_BF16"),
    "zen4": X86_V3 + ("AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"),
    "alderlake": X86_V3 + ("AVX_VNNI",),
    "sapphirerapids": X86_V3 + ("AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8"),
}
ARM_VARIANTS: dict[str, tuple[str, ...]] = {
    "armv8.0_1": (),
    "armv8.2_1": ("DOTPROD",),
    "armv8.2_2": ("DOTPROD", "FP16_VECTOR_ARITHMETIC"),
    "armv8.2_3": ("DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE"),
    "armv8.6_1": ("DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE", "MATMUL_INT8"),
    "armv8.6_2": ("DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE", "MATMUL_INT8", "SVE2"),
    "armv9.2_1": ("DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE", "MATMUL_INT8", "SME"),
    "armv9.2_2": ("DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE", "MATMUL_INT8", "SVE2", "SME"),
}
# Variants every llama.cpp with GGML_CPU_ALL_VARIANTS has built since 2025; the others of the
# tables above are checked when present (a fork of another age may lack or add some).
REQUIRED_VARIANTS = {"amd64": ("x64", "sse42", "sandybridge", "haswell", "skylakex", "icelake", "alderlake"),
                     "arm64": ("armv8.0_1", "armv8.2_1", "armv8.2_2", "armv8.6_1")}

# ggml's run-time score (ggml-cpu/arch/*/cpu-feats.cpp): a variant whose features the CPU lacks
# scores 0; otherwise 1 + the sum of its features' bits. The highest score is loaded.
X86_SCORE_BITS = {"FMA": 0, "F16C": 1, "SSE42": 2, "BMI2": 3, "AVX": 4, "AVX2": 5, "AVX_VNNI": 6, "AVX512": 7,
                  "AVX512_VBMI": 8, "AVX512_BF16": 9, "AVX512_VNNI": 10, "AMX_INT8": 11}
ARM_SCORE_BITS = {"DOTPROD": 1, "FP16_VECTOR_ARITHMETIC": 2, "SVE": 3, "MATMUL_INT8": 4, "SVE2": 5, "SME": 6}
# /proc/cpuinfo flags that each feature needs (ggml's cpuid checks).
X86_CPUINFO = {"SSE42": ("sse4_2",), "AVX": ("avx",), "AVX2": ("avx2",), "BMI2": ("bmi2",), "FMA": ("fma",),
               "F16C": ("f16c",), "AVX_VNNI": ("avx_vnni",),
               "AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
               "AVX512_VBMI": ("avx512vbmi",), "AVX512_VNNI": ("avx512_vnni",), "AVX512_BF16": ("avx512_bf16",),
               "AMX_TILE": ("amx_tile",), "AMX_INT8": ("amx_int8",), "AMX_BF16": ("amx_bf16",)}
ARM_CPUINFO = {"DOTPROD": ("asimddp",), "FP16_VECTOR_ARITHMETIC": ("asimdhp",), "SVE": ("sve",),
               "MATMUL_INT8": ("i8mm",), "SVE2": ("sve2",), "SME": ("sme",)}


@dataclass(frozen=True)
class CpuLevel:
    name: str
    platform_arch: str | None  # amd64 / arm64, None for any
    summary: str
    features: tuple[str, ...] = ()  # x86: ggml's GGML_<feature> options turned on
    arm_arch: str = ""  # GGML_CPU_ARM_ARCH
    reproducible: bool = True  # False: the code depends on the machine that builds it

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
    CpuLevel("x86-64-v2", "amd64", "x86-64-v2: SSE4.2", ("SSE42",)),
    CpuLevel("x86-64-v3", "amd64", "x86-64-v3: AVX, AVX2, BMI2, FMA, F16C (Haswell, Zen 1 and later)", X86_V3),
    CpuLevel("x86-64-v4", "amd64", "x86-64-v4: v3 + AVX-512 F/CD/VL/DQ/BW (Skylake-X, Zen 4 and later)",
             X86_V3 + ("AVX512",)),
    CpuLevel("armv8.2", "arm64", "armv8.2-a+dotprod+fp16 (Graviton2, Ampere Altra)",
             arm_arch="armv8.2-a+dotprod+fp16"),
    CpuLevel("armv8.6", "arm64", "armv8.6-a+dotprod+fp16+sve+i8mm (Graviton3 class)",
             arm_arch="armv8.6-a+dotprod+fp16+sve+i8mm"),
    CpuLevel("native", None, "-march=native of the build machine: NOT reproducible across machines",
             reproducible=False),
    CpuLevel("none", None, "the platform baseline only (x86-64: SSE2; arm64: armv8-a), for benchmarks"),
)}


def platform_arch(platform: str) -> str:
    """linux/amd64 -> amd64; linux/arm64/v8 -> arm64."""
    parts = platform.split("/")
    return parts[1] if len(parts) > 1 else parts[0]


def get_level(name: str, platform: str) -> CpuLevel:
    level = LEVELS.get(str(name).strip().lower())
    if level is None:
        raise ConfigError(f"build.cpu_level {name!r} is not one of {', '.join(LEVELS)}")
    arch = platform_arch(platform)
    if arch not in ("amd64", "arm64") and level.name != "none":
        raise ConfigError(f"build.cpu_level {level.name}: CPU levels are defined for linux/amd64 and linux/arm64, "
                          f"not {platform}; use none")
    if level.platform_arch and level.platform_arch != arch:
        raise ConfigError(f"build.cpu_level {level.name} is for linux/{level.platform_arch}, "
                          f"but build.platform is {platform}")
    return level


def variant_suffix(level: CpuLevel, cuda: bool) -> str:
    """'' for the default level; else cpu-<level> for the cpu image, cuda13.1-sm120-cpu-<level> for CUDA."""
    if level.name == DEFAULT_LEVEL:
        return ""
    return f"-cpu-{level.name}" if cuda else f"-{level.name}"


def cmake_flags(level: CpuLevel, platform: str) -> tuple[str, ...]:
    """Every GGML_* flag that decides the CPU code, whatever ggml's defaults would have been."""
    arch = platform_arch(platform)
    on = lambda b: "ON" if b else "OFF"  # noqa: E731
    args = [f"-DGGML_NATIVE={on(level.native)}",
            f"-DGGML_BACKEND_DL={on(level.backend_dl)}",
            f"-DGGML_CPU_ALL_VARIANTS={on(level.all_variants)}"]
    if level.backend_dl:
        args.append(f"-DGGML_BACKEND_DIR={BACKEND_DIR}")
    if arch == "amd64":
        args += [f"-DGGML_{f}={on(f in level.features)}" for f in X86_FEATURES]
    elif arch == "arm64":
        arm = level.arm_arch or ("armv8-a" if level.name == "none" else "")
        args.append(f"-DGGML_CPU_ARM_ARCH={arm}")
    return tuple(args)


# GCC's first release that knows -march=armv9.2-a+sme (llama.cpp's armv9.2 variants of arm64 Linux)
SME_GCC = 14
# Variants of other operating systems in the same CMake file (not built for a Linux image)
_OTHER_OS_PREFIXES = ("android_", "apple_")


def gcc_needed(level: CpuLevel, platform: str, declared: tuple[tuple[str, tuple[str, ...]], ...]) -> int | None:
    """The GCC release the CPU backend needs beyond the base's own compiler, or None: level all for arm64
    compiles every Linux variant the tree declares (source/cpuvariants.py), and one with SME needs GCC 14
    (Debian 12 has 12, Ubuntu 24.04 13 by default)."""
    if not (level.all_variants and platform_arch(platform) == "arm64"):
        return None
    if any("SME" in feats and not name.startswith(_OTHER_OS_PREFIXES) for name, feats in declared):
        return SME_GCC
    return None


# --------------------------------------------------------------------------- what verify expects

def variants_for(platform: str) -> dict[str, tuple[str, ...]]:
    return X86_VARIANTS if platform_arch(platform) == "amd64" else ARM_VARIANTS if \
        platform_arch(platform) == "arm64" else {}


def level_features(level: CpuLevel) -> tuple[str, ...]:
    """The features of a single-level backend (arm: read from its -march string)."""
    if level.arm_arch:
        tags = level.arm_arch.split("+")[1:]
        names = {"dotprod": "DOTPROD", "fp16": "FP16_VECTOR_ARITHMETIC", "sve": "SVE", "i8mm": "MATMUL_INT8",
                 "sve2": "SVE2", "sme": "SME"}
        return tuple(names[t] for t in tags if t in names)
    return level.features


def host_features(cpuinfo_flags: set[str], platform: str) -> set[str]:
    """ggml feature names the CPU with these /proc/cpuinfo flags supports."""
    table = X86_CPUINFO if platform_arch(platform) == "amd64" else ARM_CPUINFO
    return {feat for feat, flags in table.items() if all(f in cpuinfo_flags for f in flags)}


def score(features: tuple[str, ...], supported: set[str], platform: str) -> int:
    """ggml's ggml_backend_score for a variant built with `features` on a CPU supporting `supported`."""
    bits = X86_SCORE_BITS if platform_arch(platform) == "amd64" else ARM_SCORE_BITS
    if any(f not in supported for f in features):
        return 0
    return 1 + sum(1 << bits[f] for f in features if f in bits)


def best_variant(names: list[str], supported: set[str], platform: str) -> str | None:
    """Of the variants present, the one ggml loads on this CPU (None: none runs here)."""
    table = variants_for(platform)
    scored = [(score(table[n], supported, platform), n) for n in names if n in table]
    scored = [s for s in scored if s[0] > 0]
    return max(scored)[1] if scored else None


# SIMD classes a backend's code is checked for (see verify.py): the widest vector code its
# features promise. x64/none: nothing required.
def simd_class(features: tuple[str, ...], platform: str) -> str:
    if platform_arch(platform) == "arm64":
        return "sme" if "SME" in features else "sve" if "SVE" in features else "neon"
    if "AVX512" in features:
        return "avx512"
    if "AVX2" in features:
        return "avx2"
    if "AVX" in features:
        return "avx"
    if "SSE42" in features:
        return "sse42"
    return "baseline"
