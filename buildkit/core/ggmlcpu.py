"""ggml's CPU backend as each instruction-set family has it (pure data): the GGML_* options a build passes,
the GGML_CPU_ALL_VARIANTS variants and their run-time scores, the /proc/cpuinfo flags of each feature,
the SIMD class a backend's code must show, and the single levels (`build.cpu_level`). A platform of the
catalogue (core/platforms.py) names its family; plan/cpulevels.py and verify/ read them from there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, eq=False)
class SingleLevel:
    """One `build.cpu_level` of a family: one libggml-cpu.so for these features (or this -march)."""
    name: str
    summary: str
    features: tuple[str, ...] = ()  # ggml's GGML_<feature> options turned on
    # the -march value: the family's march_option takes it (GGML_CPU_ARM_ARCH); a family without one (x86)
    # gets it in CMAKE_C_FLAGS and CMAKE_CXX_FLAGS (a level named for a CPU: -march=sapphirerapids)
    march: str = ""
    gcc: int = 0  # the first GCC release whose -march knows it, when the bases' own may not (0: every one does)


@dataclass(frozen=True, eq=False)
class GgmlCpu:
    """ggml's CPU facts of one instruction-set family (ggml/CMakeLists.txt, ggml/src/CMakeLists.txt,
    ggml-cpu/arch/*/cpu-feats.cpp)."""
    feature_options: tuple[str, ...]  # GGML_<feature> options every build passes ON or OFF, in ggml's order
    march_option: str  # the option that takes an -march string ("" when the family has none)
    baseline_march: str  # its value for level none
    march_features: dict[str, str]  # -march extension -> ggml feature (what a level's -march turns on)
    variants: dict[str, tuple[str, ...]]  # GGML_CPU_ALL_VARIANTS: variant -> its features
    required_variants: tuple[str, ...]  # variants every llama.cpp with GGML_CPU_ALL_VARIANTS has built since 2025
    score_bits: dict[str, int]  # ggml_backend_score: 1 + the sum of 1 << bit of a variant's features
    cpuinfo: dict[str, tuple[str, ...]]  # /proc/cpuinfo flags each feature needs
    simd_classes: tuple[tuple[str, str], ...]  # (feature, SIMD class), widest first: the class a backend shows
    simd_baseline: str  # the class of a backend with none of those features
    levels: tuple[SingleLevel, ...]  # the single levels of build.cpu_level for this family
    gcc_for: dict[str, int]  # feature -> the first GCC release whose -march knows it (beyond the bases' own)


# Every x86 instruction-set option of ggml (ggml/CMakeLists.txt), in ggml's order.
X86_FEATURES = ("SSE42", "AVX", "AVX2", "BMI2", "AVX_VNNI", "FMA", "F16C", "AVX512", "AVX512_VBMI",
                "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8", "AMX_BF16")
X86_V3 = ("SSE42", "AVX", "AVX2", "BMI2", "FMA", "F16C")
X86_V4 = X86_V3 + ("AVX512",)
# the ggml features that GCC's -march of a named CPU turns on (gcc -march=NAME -Q --help=target): the level
# passes them ON too, so ggml's own feature check (its score) refuses the backend on a CPU that lacks them
X86_ZEN4 = X86_V4 + ("AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16")
X86_SAPPHIRERAPIDS = X86_ZEN4 + ("AVX_VNNI", "AMX_TILE", "AMX_INT8", "AMX_BF16")

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

# ggml's run-time score (ggml-cpu/arch/*/cpu-feats.cpp): a variant whose features the CPU lacks
# scores 0; otherwise 1 + the sum of its features' bits. The highest score is loaded.
X86_SCORE_BITS = {"FMA": 0, "F16C": 1, "SSE42": 2, "BMI2": 3, "AVX": 4, "AVX2": 5, "AVX_VNNI": 6, "AVX512": 7,
                  "AVX512_VBMI": 8, "AVX512_BF16": 9, "AVX512_VNNI": 10, "AMX_INT8": 11}
ARM_SCORE_BITS = {"DOTPROD": 1, "FP16_VECTOR_ARITHMETIC": 2, "SVE": 3, "MATMUL_INT8": 4, "SVE2": 5, "SME": 6}
# /proc/cpuinfo flags that each feature needs (ggml's cpuid checks).
X86_CPUINFO: dict[str, tuple[str, ...]] = {
    "SSE42": ("sse4_2",), "AVX": ("avx",), "AVX2": ("avx2",), "BMI2": ("bmi2",), "FMA": ("fma",),
    "F16C": ("f16c",), "AVX_VNNI": ("avx_vnni",),
    "AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "AVX512_VBMI": ("avx512vbmi",), "AVX512_VNNI": ("avx512_vnni",), "AVX512_BF16": ("avx512_bf16",),
    "AMX_TILE": ("amx_tile",), "AMX_INT8": ("amx_int8",), "AMX_BF16": ("amx_bf16",)}
ARM_CPUINFO: dict[str, tuple[str, ...]] = {
    "DOTPROD": ("asimddp",), "FP16_VECTOR_ARITHMETIC": ("asimdhp",), "SVE": ("sve",),
    "MATMUL_INT8": ("i8mm",), "SVE2": ("sve2",), "SME": ("sme",)}

X86 = GgmlCpu(
    feature_options=X86_FEATURES, march_option="", baseline_march="", march_features={},
    variants=X86_VARIANTS,
    required_variants=("x64", "sse42", "sandybridge", "haswell", "skylakex", "icelake", "alderlake"),
    score_bits=X86_SCORE_BITS, cpuinfo=X86_CPUINFO,
    simd_classes=(("AVX512", "avx512"), ("AVX2", "avx2"), ("AVX", "avx"), ("SSE42", "sse42")),
    simd_baseline="baseline",
    levels=(
        SingleLevel("x86-64-v2", "x86-64-v2: SSE4.2", ("SSE42",)),
        SingleLevel("x86-64-v3", "x86-64-v3: AVX, AVX2, BMI2, FMA, F16C (Haswell, Zen 1 and later)", X86_V3),
        SingleLevel("x86-64-v4", "x86-64-v4: v3 + AVX-512 F/CD/VL/DQ/BW (Skylake-X, Zen 4 and later); "
                    "no VNNI or AMX: prompts at about 1/3 of `all` on Sapphire Rapids (docs/bench.md)",
                    X86_V4),
        # named CPUs: -march=<name> for every C and C++ compile (x86 has no ggml option for -march), with its
        # tuning; reproducible on any build machine, unlike native. The whole image then needs that CPU.
        SingleLevel("sapphirerapids", "-march=sapphirerapids: v4 + AVX-512 VNNI/BF16/VBMI/FP16, AVX-VNNI, AMX "
                    "(Intel Xeon 4th gen and later); prompts at native speed on Sapphire Rapids (docs/bench.md)",
                    X86_SAPPHIRERAPIDS, march="sapphirerapids"),
        # GCC 13 (and 12.3) added znver4, which Debian 12's 12.2 lacks: the build installs GCC 14, the release
        # both default-able bases carry (Ubuntu 24.04 in universe, Debian 13 as its own), as for arm64's SME
        SingleLevel("znver4", "-march=znver4: v4 + AVX-512 VNNI/BF16/VBMI/IFMA (AMD Zen 4: EPYC Genoa, Ryzen "
                    "7000, and later); compiled with GCC 14, which the build stage installs", X86_ZEN4,
                    march="znver4", gcc=14),
    ),
    gcc_for={})

ARM = GgmlCpu(
    # armv8-a: NEON is part of the base ISA
    feature_options=(), march_option="GGML_CPU_ARM_ARCH", baseline_march="armv8-a",
    march_features={"dotprod": "DOTPROD", "fp16": "FP16_VECTOR_ARITHMETIC", "sve": "SVE", "i8mm": "MATMUL_INT8",
                    "sve2": "SVE2", "sme": "SME"},
    variants=ARM_VARIANTS, required_variants=("armv8.0_1", "armv8.2_1", "armv8.2_2", "armv8.6_1"),
    score_bits=ARM_SCORE_BITS, cpuinfo=ARM_CPUINFO,
    simd_classes=(("SME", "sme"), ("SVE", "sve")), simd_baseline="neon",
    levels=(
        SingleLevel("armv8.2", "armv8.2-a+dotprod+fp16 (Graviton2, Ampere Altra)", march="armv8.2-a+dotprod+fp16"),
        SingleLevel("armv8.6", "armv8.6-a+dotprod+fp16+sve+i8mm (Graviton3 class)",
                    march="armv8.6-a+dotprod+fp16+sve+i8mm"),
        # Neoverse V2 is Armv9.0-A with SVE2, i8mm, bf16: GCC knows no -march=neoverse-v2 (only -mcpu, from
        # GCC 13 and 12.3), so its -march is spelled out; GCC 12 knows armv9-a. Every extension is named,
        # those armv9-a implies too, so that verify reads the level's features from the string.
        SingleLevel("neoverse-v2", "armv9-a+dotprod+fp16+sve+i8mm+sve2+bf16 (Neoverse V2: NVIDIA Grace, "
                    "Graviton4; runs on GB10)", march="armv9-a+dotprod+fp16+sve+i8mm+sve2+bf16"),
    ),
    # -march=armv9.2-a+sme (the armv9.2 variants): GCC 14; Debian 12 has 12, Ubuntu 24.04 13 by default
    gcc_for={"SME": 14})
