"""Bench: the real tree built for today's CUDA, one `buildkit build` per ARCH:CUDA pair, as a user runs it.

Each pair gets its own project folder (buildkit.toml written from the arguments as `buildkit init` writes one) and runs
`buildkit build` there, end to end: fetch, patch, render, build, verify, lock. It prints, per pair, the
wall time, buildkit's own summary line (compile time, image size, ccache hits), the verify line that
reads the architectures inside libggml-cuda.so with cuobjdump, and the CUDA wheels the lock pinned. The
pairs run one after another on the same engine, so the second reuses the ccache for the host (C/C++)
objects; its CUDA objects, for another arch and another nvcc, are all compiled. Asserts nothing; the
exit code is the first failing build's.

    python bench/cuda_current.py --tree /path/to/fork --commit SHA --os-image local/debian-multiarch:bookworm \\
        --pair sm_120:13.5 --pair sm_121:13.4 --work /tmp/cuda-current \\
        [--patch bench/patches/0001-cuda-include-the-cccl-headers-argsort-and-top-k-use.patch]

An arch the catalogue builds only for arm64 (sm_121, DGX Spark) is cross-compiled on an amd64 machine, as
buildkit does by itself; its base must then hold linux/arm64 too (`buildkit base debian --platform
linux/amd64,linux/arm64 --tag local/debian-multiarch:bookworm`), and its CPU backend gets --arm64-cpu-level.
Needs a running engine and that local Debian base image.
Issue 41 item 3: sm_120 and sm_121 with CUDA 13.4 or 13.5, the real tree (docs/bench-runs/).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import tomllib

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def project_toml(tree: str, commit: str, arch: str, cuda: str, cpu_level: str, os_image: str, name: str,
                 patch_dir: str) -> str:
    """buildkit.toml for one pair, written as `buildkit init` writes one (plan/starter.py)."""
    from buildkit.plan.starter import starter_toml

    return starter_toml({"source.url": tree, "source.commit": commit, "source.patch_dir": patch_dir,
                         "image.name": name, "image.version": "0.1.0", "build.arch": arch,
                         "build.cuda_version": cuda, "build.target": "server", "build.cpu_level": cpu_level,
                         "base.provider": "wheels", "base.os_image": os_image})


def cpu_level_for(arch: str, args: argparse.Namespace) -> str:
    """The CPU level of the arch's platform: arm64's where the catalogue builds the arch for arm64 only."""
    from buildkit.plan.archs import get_arch

    return args.cpu_level if "linux/amd64" in get_arch(arch).platforms else args.arm64_cpu_level


def run_pair(work: Path, args: argparse.Namespace, arch: str, cuda: str) -> int:
    folder = work / f"{arch}-cuda{cuda}"
    folder.mkdir(parents=True, exist_ok=True)
    patches = folder / "patches"
    patches.mkdir(exist_ok=True)
    for old in patches.glob("*.patch"):
        old.unlink()
    for patch in args.patch:
        (patches / patch.name).write_bytes(patch.read_bytes())
    text = project_toml(args.tree, args.commit, arch, cuda, cpu_level_for(arch, args), args.os_image, args.name,
                        "patches")
    tomllib.loads(text)  # what we wrote parses
    (folder / "buildkit.toml").write_text(text)
    log_path = folder / "build.log"
    start = time.monotonic()
    with log_path.open("w") as log:
        rc = subprocess.run(["buildkit", "build"], cwd=folder, stdout=log, stderr=subprocess.STDOUT).returncode
    seconds = time.monotonic() - start
    log_text = log_path.read_text(errors="replace")
    print(f"== {arch} with CUDA {cuda}: exit {rc}, {seconds:.0f} s wall ({seconds / 60:.1f} min); log {log_path}")
    for pattern in (r"^summary: .*$", r"^.*cuda-archs.*$", r"^buildkit: compile 100%.*$"):
        for line in re.findall(pattern, log_text, re.M)[-1:]:
            print(f"   {line.strip()}")
    lock = folder / "buildkit.lock"
    if rc == 0 and lock.is_file():
        builds = json.loads(lock.read_text())["builds"]
        for entry in (builds.values() if isinstance(builds, dict) else builds):
            wheels = (entry.get("cuda_root") or {}).get("wheels", [])
            print(f"   {entry['variant']} {entry['platform']}: image {entry['image_digest'] or entry['image_id']}")
            print("   wheels: " + ", ".join(f"{w['package']} {w['version']}" for w in wheels))
    return rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", required=True, help="the fork's git repository (path or URL)")
    ap.add_argument("--commit", required=True, help="the commit to build")
    ap.add_argument("--pair", action="append", required=True, metavar="ARCH:CUDA",
                    help="e.g. sm_120:13.5; repeat for more (they run in order)")
    ap.add_argument("--cpu-level", default="x86-64-v3",
                    help="the CPU backends built beside CUDA (default x86-64-v3: the CUDA compile is the subject)")
    ap.add_argument("--arm64-cpu-level", default="armv8.2",
                    help="the same for an arch built for arm64 only (default armv8.2: no GCC 14 needed)")
    ap.add_argument("--os-image", required=True, help="the local Debian base image")
    ap.add_argument("--name", default="127.0.0.1:1/bench/cuda-current", help="the image's name (never pushed)")
    ap.add_argument("--patch", type=Path, action="append", default=[],
                    help="a patch for the project's patch queue (repeat; applied in the order given)")
    ap.add_argument("--work", type=Path, required=True, help="folder for the projects and their logs")
    args = ap.parse_args()
    first_failure = 0
    for pair in args.pair:
        arch, sep, cuda = pair.partition(":")
        if not sep or not arch or not cuda:
            ap.error(f"--pair {pair!r}: expected ARCH:CUDA, e.g. sm_120:13.5")
        rc = run_pair(args.work, args, arch, cuda)
        first_failure = first_failure or rc
    return first_failure


if __name__ == "__main__":
    sys.exit(main())
