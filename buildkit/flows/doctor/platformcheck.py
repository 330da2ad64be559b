"""doctor's checks of the host against the platform built: the NVIDIA driver (with `nvidia-smi`) against
the CUDA version's minimum and the GPU against the arch, and, for a compile that runs on a platform
other than the host's (build.build_platform set to it; a cross build needs nothing), a binfmt_misc
handler (QEMU) or a builder node of that platform."""

from __future__ import annotations

import platform as host_platform
import shutil
from collections.abc import Sequence
from pathlib import Path

from buildkit.core.platforms import ARCHES, NVIDIA_CROSS, machine_arch
from buildkit.plan.platforms import cpu_arch, cuda_char_flags
from buildkit.verify import binfmt
from buildkit.core.check import Check, Status
from buildkit.flows.doctor.check import Variant, last_line, run_tool, version_tuple

# Minimum host driver per CUDA major, NVIDIA's "CUDA Toolkit 11.x, 12.x, and 13.x Minimum Required
# Driver Versions" table (docs.nvidia.com/deploy/cuda-compatibility, minor version compatibility):
# CUDA 13.x needs >= 580, CUDA 12.x >= 525, CUDA 11.x >= 450. A newer driver always works.
MIN_DRIVER = {13: 580, 12: 525, 11: 450}

BINFMT_DIR = binfmt.BINFMT_DIR


def min_driver(cuda: tuple[int, int]) -> int | None:
    return MIN_DRIVER.get(cuda[0])


def parse_nvidia_smi(text: str) -> list[tuple[str, str, str]]:
    """`nvidia-smi --query-gpu=driver_version,name,compute_cap --format=csv,noheader` rows."""
    rows = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and version_tuple(parts[0]):
            rows.append((parts[0], parts[1], parts[2]))
    return rows


def judge_driver(rows: Sequence[tuple[str, str, str]], variants: Sequence[Variant]) -> Check:
    """Pure: the host's GPUs and driver against the CUDA variants to be run here."""
    cuda_variants = [v for v in variants if v.cuda is not None]
    if not rows:
        return Check("driver", Status.WARNED, "nvidia-smi found no GPU", "check the driver: `nvidia-smi`")
    driver = rows[0][0]
    gpus = ", ".join(f"{name} (sm_{cap.replace('.', '')})" for _, name, cap in rows)
    detail = f"driver {driver}; {gpus}"
    if not cuda_variants:
        return Check("driver", Status.PASSED, detail + "; cpu variant: no driver needed")
    too_old = []
    for v in cuda_variants:
        need = min_driver(v.cuda)  # type: ignore[arg-type]
        if need is not None and version_tuple(driver)[:1] < (need,):
            too_old.append((f"{v.cuda[0]}.{v.cuda[1]}", need))  # type: ignore[index]
    if too_old:
        need = max(n for _, n in too_old)
        versions = ", ".join(sorted({c for c, _ in too_old}))
        return Check("driver", Status.FAILED, f"{detail}; CUDA {versions} needs driver >= {need}",
                     f"install NVIDIA driver {need} or newer on this host, or build with an older --cuda "
                     "(CUDA 12.x runs on >= 525)")
    caps = {"sm_" + cap.replace(".", "") for _, _, cap in rows}
    archs = {v.arch for v in cuda_variants}
    if caps and not caps & archs:
        return Check("driver", Status.WARNED,
                     f"{detail}; the image is built for {', '.join(sorted(archs))}: on this GPU it "
                     "stops with \"no kernel image is available\"",
                     f"build with --arch {sorted(caps)[0]} to run it here")
    return Check("driver", Status.PASSED, detail)


def check_driver(variants: Sequence[Variant]) -> Check:
    if not any(v.cuda for v in variants):
        return Check("driver", Status.PASSED, "cpu variant: no GPU driver needed")
    if shutil.which("nvidia-smi") is None:
        need = sorted({d for v in variants if v.cuda and (d := min_driver(v.cuda))})
        return Check("driver", Status.PASSED, "no nvidia-smi here: fine for building; the host that runs the "
                     f"image needs driver >= {need[-1] if need else '?'}")
    proc = run_tool(["nvidia-smi", "--query-gpu=driver_version,name,compute_cap", "--format=csv,noheader"])
    if proc is None or proc.returncode != 0:
        why = "timed out" if proc is None else last_line(proc.stderr or proc.stdout)
        return Check("driver", Status.WARNED, f"nvidia-smi failed: {why}", "check the NVIDIA driver installation")
    return judge_driver(parse_nvidia_smi(proc.stdout), variants)


def gpu_memory_bytes() -> int | None:
    """The smallest GPU's memory here (`nvidia-smi --query-gpu=memory.total`); None without nvidia-smi or a GPU."""
    if shutil.which("nvidia-smi") is None:
        return None
    proc = run_tool(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"])
    if proc is None or proc.returncode != 0:
        return None
    sizes = [int(line.strip()) for line in proc.stdout.splitlines() if line.strip().isdigit()]
    return min(sizes) << 20 if sizes else None


def binfmt_handlers(root: Path = BINFMT_DIR) -> list[str] | None:
    """The enabled binfmt_misc handlers (verify/binfmt.py parses them); None when binfmt_misc is not mounted."""
    if not (root / "register").exists():
        return None
    return sorted(h.name for h in binfmt.registered(root) if h.enabled)


def judge_emulation(platforms: Sequence[str], host_arch: str, handlers: list[str] | None,
                    builder_platforms: Sequence[str], cross: Sequence[str] = ()) -> Check:
    """Pure: can every wanted platform be built here (natively, by the builder, or through QEMU)?"""
    shown = "binfmt_misc not mounted" if handlers is None else \
        f"binfmt handlers: {', '.join(handlers) if handlers else 'none'}"
    missing = []
    for plat in platforms:
        arch = plat.split("/")[1] if "/" in plat else plat
        if arch == host_arch:
            continue
        if any(bp.startswith(plat) for bp in builder_platforms):
            continue
        known = ARCHES.get(arch)
        if handlers and known and known.qemu_handler in handlers:
            continue
        missing.append(plat)
    foreign = [p for p in platforms if (p.split("/")[1] if "/" in p else p) != host_arch]
    detail = f"host {host_arch}; compiles on {', '.join(platforms)}"
    if cross and not foreign:
        detail += f" (cross-compiling for {', '.join(cross)} on this machine, no emulation needed)"
    elif cross:  # build.build_platform names another CPU: the compile itself runs under emulation or on a node
        detail += f" (cross-compiling for {', '.join(cross)} on {', '.join(foreign)}, which needs emulation or a " \
                  "builder node of it)"
    detail += f"; {shown}"
    if missing:
        arches = ",".join(p.split("/")[-1] for p in missing)
        return Check("emulation", Status.FAILED, detail + f"; nothing here can run {', '.join(missing)}",
                     f"compile on this machine: unset build.build_platform (a cross build runs nothing of {arches} "
                     "here); or QEMU from Debian's packages, no image pulled: `apt-get install qemu-user-static` "
                     "(systemd-binfmt registers it; a CUDA build under emulation takes many hours), with a base "
                     f"that has {', '.join(missing)} made offline by `buildkit base debian --platform "
                     f"linux/{host_arch},{','.join(missing)} --tag NAME`; or a builder with a native node: "
                     "`docker buildx create --append --name B ssh://arm64-host`")
    return Check("emulation", Status.PASSED, detail)


def check_emulation(variants: Sequence[Variant], builder_platforms: Sequence[str]) -> Check:
    host = machine_arch(host_platform.machine())
    # what has to run is the compile: a cross build runs it on this machine whatever the image's platform
    platforms = sorted({v.runs_on or v.platform for v in variants})
    cross = sorted({v.platform for v in variants if v.runs_on and v.runs_on != v.platform})
    return judge_emulation(platforms, host, binfmt_handlers(), builder_platforms, cross)


# How the seed direction (an amd64 CUDA image compiled on arm64) was verified; README "Cross builds".
CROSS_CUDA_VERIFIED = ("verified: the example fork's char probe (host, CUDA host half and kernel agree), its "
                       "SASS byte loads, and its kernel run on an NVIDIA GPU (README, cross builds)")


def judge_cross_cuda(variants: Sequence[Variant]) -> Check | None:
    """Pure: for CUDA variants compiled on another CPU than their image's, what buildkit does about nvcc's
    front ends, which take plain char (and long double) from the machine they run on. None: no such variant."""
    lines = []
    for v in variants:
        if v.cuda is None or not v.runs_on or cpu_arch(v.runs_on).docker == cpu_arch(v.platform).docker:
            continue
        target, build = cpu_arch(v.platform), cpu_arch(v.runs_on)
        flags = " ".join(cuda_char_flags(v.runs_on, v.platform))
        host, device = (ARCHES[a].processor for a in NVIDIA_CROSS)
        direction = (f"the direction NVIDIA documents ({host} host, {device} target)"
                     if (build.docker, target.docker) == NVIDIA_CROSS
                     else f"not the direction NVIDIA documents (theirs is {host} to {device}): nvcc from the "
                          f"{build.processor} toolkit with the {target.triplet}-g++ host compiler")
        lines.append(f"{v.name} for {v.platform} compiled on {v.runs_on}, {direction}; char is "
                     f"{'signed' if target.char_signed else 'unsigned'} there, and nvcc's front ends are told so "
                     f"({flags}); long double in CUDA sources stops the build (no flag fixes it)")
    if not lines:
        return None
    return Check("cross-cuda", Status.PASSED, "; ".join(lines) + "; " + CROSS_CUDA_VERIFIED)
