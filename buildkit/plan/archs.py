"""The architecture catalogue: which CUDA architectures buildkit builds and what each needs.

Pure data and pure functions; `buildkit archs` prints the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from buildkit.core.errors import ArchError
from buildkit.core.platforms import cuda_platforms, platform_names


@dataclass(frozen=True)
class Arch:
    name: str  # what users type: sm_120, cpu
    cmake_archs: str | None  # CMAKE_CUDA_ARCHITECTURES; None for cpu
    elf_arch: str | None  # what cuobjdump --list-elf shows for it (sm_120a); None for cpu
    min_cuda: tuple[int, int] | None  # oldest CUDA toolkit that can build it; None for cpu
    cuda13: bool  # still supported by CUDA 13
    gpus: str  # example GPUs
    # where such GPUs exist, the first the default: every platform with a CUDA toolkit unless the GPU says less
    platforms: tuple[str, ...] = field(default_factory=cuda_platforms)

    @property
    def is_cuda(self) -> bool:
        return self.cmake_archs is not None

    @property
    def number(self) -> str:
        """120 for sm_120; 'cpu' for cpu (used in tags: cuda13.1-sm120)."""
        return self.name.removeprefix("sm_")


# min_cuda, reviewed on 2026-12-04 against NVIDIA's release notes (13.0 to 13.5): sm_100 and sm_120 came with
# CUDA 12.8, sm_103 and sm_121 with 12.9 (its family-specific features), sm_110 is 13.0's name of Thor's sm_101;
# CUDA 13 dropped Maxwell, Pascal and Volta but keeps Turing (sm_75), and no 13.x up to 13.5 drops another.
# The default release (plan/options.py) stays 13.1: every arch here builds with it, its images run on any 13.x
# driver (R580 and later, minor-version compatibility), and moving it renames every default user's tags
# (cuda13.1-sm120); 13.4 and 13.5 are one --cuda away (engine tests build sm_120 and sm_121 with 13.5).
# sm_120/sm_121 map to 12Xa: llama.cpp rewrites 12X to 12Xa itself; plain 12X would lose the
# Blackwell FP4 (MXFP4/NVFP4) kernels that need the arch-specific feature set.
ARCHS: dict[str, Arch] = {
    a.name: a
    for a in (
        # Platforms: NVIDIA's Linux drivers run these GPUs on x86-64 hosts and on arm64 servers (SBSA:
        # T4G on Graviton, A100/A10/L4/L40S on Ampere Altra and Grace servers, the RTX A6000 and RTX
        # 6000 Ada on IGX, H100/H200 next to GH200, B200 next to GB200, B300 next to GB300, RTX PRO
        # Blackwell), while the GB10 of the DGX Spark (sm_121) and Jetson Thor (sm_110) exist only as
        # arm64 systems-on-chip.
        Arch("sm_75", "75-real", "sm_75", (10, 0), True, "Turing: RTX 20xx, T4, GTX 16xx"),
        Arch("sm_80", "80-real", "sm_80", (11, 0), True, "Ampere datacenter: A100, A30"),
        Arch("sm_86", "86-real", "sm_86", (11, 1), True, "Ampere: RTX 30xx, A10, A40, RTX A6000"),
        Arch("sm_89", "89-real", "sm_89", (11, 8), True, "Ada: RTX 40xx, L4, L40S"),
        Arch("sm_90", "90-real", "sm_90", (11, 8), True, "Hopper: H100, H200, GH200"),
        Arch("sm_100", "100-real", "sm_100", (12, 8), True, "Blackwell datacenter: B200, GB200"),
        Arch("sm_103", "103-real", "sm_103", (12, 9), True, "Blackwell Ultra datacenter: B300, GB300"),
        # Jetson Thor runs CUDA 13's SBSA toolkit (the same aarch64 wheels); CUDA 13.0 renamed its sm_101 sm_110
        Arch("sm_110", "110-real", "sm_110", (13, 0), True, "Blackwell Jetson: Jetson AGX Thor (T5000), arm64 only",
             ("linux/arm64",)),
        Arch("sm_120", "120a-real", "sm_120a", (12, 8), True,
             "Blackwell: RTX 50xx (desktop and laptop), RTX PRO 6000"),
        Arch("sm_121", "121a-real", "sm_121a", (12, 9), True, "Blackwell: DGX Spark (GB10), arm64 only",
             ("linux/arm64",)),
        Arch("cpu", None, None, None, True, "no GPU: CPU-only image", platform_names()),
    )
}


# The CUDA toolkit releases (MAJOR.MINOR) NVIDIA had published when this list was written (12.7 never
# was). A version inside its range that is not in it, or two majors ahead (99.9), is refused before any
# work (a typo); a newer one of this major or the next is
# the provider's to judge: provider wheels asks the package index which cuda-toolkit releases exist
# (flows/unit/cudacontexts.py), provider nvidia finds the base image's tag or not, so a release NVIDIA ships
# after this list builds the day it ships. With no index to ask, this list is the fallback.
CUDA_RELEASES: tuple[tuple[int, int], ...] = (
    *((10, m) for m in range(3)), *((11, m) for m in range(9)), *((12, m) for m in range(10) if m != 7),
    *((13, m) for m in range(6)),
)


def check_cuda_release(text: str, setting: str = "--cuda or build.cuda_version") -> tuple[int, int]:
    """parse_cuda_version; a version up to the newest of the catalogue must be one of its releases
    (ArchError naming them); a newer one is left to the provider (see CUDA_RELEASES)."""
    version = parse_cuda_version(text)
    if version not in CUDA_RELEASES and (version <= CUDA_RELEASES[-1] or version[0] > CUDA_RELEASES[-1][0] + 1):
        newest = ".".join(map(str, CUDA_RELEASES[-1]))
        oldest = ".".join(map(str, CUDA_RELEASES[0]))
        raise ArchError(f"CUDA {text} is not a CUDA release buildkit knows ({oldest} to {newest}, no 12.7; a newer "
                        f"{CUDA_RELEASES[-1][0]}.x is checked with its provider); choose one of them in {setting}")
    return version


def parse_cuda_version(text: str) -> tuple[int, int]:
    """'13.1' -> (13, 1). Raises ArchError for anything that is not MAJOR.MINOR."""
    parts = str(text).strip().split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ArchError(f"CUDA version {text!r} is not of the form MAJOR.MINOR (for example 13.1)")
    return int(parts[0]), int(parts[1])


def get_arch(name: str) -> Arch:
    """The catalogue entry for `name`; accepts sm_120, sm120, 120 and CPU, in any case."""
    key = str(name).strip().lower()
    if key.isdigit():
        key = "sm_" + key
    elif key.startswith("sm") and not key.startswith("sm_"):
        key = "sm_" + key[2:]
    try:
        return ARCHS[key]
    except KeyError:
        raise ArchError(f"unknown arch {name!r}; choose one of: {', '.join(ARCHS)}") from None


def check_cuda_support(arch: Arch, cuda_version: str) -> None:
    """Refuse an arch that the CUDA version cannot build, naming the minimum (or the maximum)."""
    if not arch.is_cuda:
        return
    version = parse_cuda_version(cuda_version)
    assert arch.min_cuda is not None
    if version < arch.min_cuda:
        need = ".".join(map(str, arch.min_cuda))
        raise ArchError(f"{arch.name} needs CUDA {need} or newer; CUDA {cuda_version} cannot build it "
                        f"(use --cuda {need} or later)")
    if version >= (13, 0) and not arch.cuda13:
        raise ArchError(f"{arch.name} is not supported by CUDA 13; use --cuda 12.9 or older")


def default_platform(arch: Arch) -> str:
    """The platform a build of this arch is for when build.platform is not set: where the GPU exists
    (amd64 first where both do)."""
    return arch.platforms[0]


def check_platform(arch: Arch, platform: str) -> None:
    """Refuse an arch on a platform where no such GPU exists (sm_121 on amd64), before any work."""
    if platform not in arch.platforms:
        raise ArchError(f"{arch.name} ({arch.gpus}) exists on {' and '.join(arch.platforms)} only; an image for "
                        f"{platform} could never run on one: use --platform {default_platform(arch)}, or leave "
                        "build.platform unset (it follows the arch)")


def arch_table() -> list[dict[str, str]]:
    """Rows for `buildkit archs`."""
    rows = []
    for a in ARCHS.values():
        rows.append({
            "arch": a.name,
            "cmake": a.cmake_archs or "-",
            "min CUDA": ".".join(map(str, a.min_cuda)) if a.min_cuda else "-",
            "CUDA 13": "yes" if a.cuda13 else "no",
            "platforms": ",".join(p.removeprefix("linux/") for p in a.platforms),
            "GPUs": a.gpus,
        })
    return rows
