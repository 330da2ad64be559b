"""Bench: the GPU memory estimate of `buildkit run` (plan/vram.py) against a peak measured on a GPU.

Prints the estimate of a profile for two GGUF files, one line a component, and, given the peak that
`nvidia-smi --query-gpu=memory.used` showed while the same llama-server served the same files (after a
request, so the compute buffers were used), the ratio of the two. Asserts nothing. Where a run was
measured, its row goes into docs/bench-runs/measurements.md ("GPU memory: estimate and measured peak").

    python bench/vram_estimate.py --target T.gguf [--draft D.gguf] [--profile dflash] [--measured-mib N] [-- ARGS]

--profile reads [profiles.NAME] of ./buildkit.toml (the seed's dflash profile by default); ARGS after --
are added to its llama-server arguments, as `buildkit run` adds them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from buildkit.core.ggufheader import read_header  # noqa: E402
from buildkit.plan.config import read_document  # noqa: E402
from buildkit.plan.llamaargs import parse_server_args  # noqa: E402
from buildkit.plan.profiles import get_profile  # noqa: E402
from buildkit.plan.vram import MiB, estimate  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, type=Path)
    ap.add_argument("--draft", type=Path)
    ap.add_argument("--profile", default="dflash")
    ap.add_argument("--config", type=Path, default=ROOT / "buildkit.toml")
    ap.add_argument("--measured-mib", type=float, help="the peak nvidia-smi showed, MiB")
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args(argv)
    profile = get_profile(read_document(args.config), args.profile)
    settings = parse_server_args([*profile.args, *args.extra])
    found = estimate(read_header(args.target), settings, read_header(args.draft) if args.draft else None)
    print(f"estimate of [profiles.{args.profile}] for {args.target.name}"
          + (f" + {args.draft.name}" if args.draft else ""))
    print("\n".join(found.lines()))
    if args.measured_mib:
        measured = args.measured_mib * MiB
        print(f"measured peak {args.measured_mib:,.0f} MiB; estimate / measured = {found.total / measured:.3f} "
              f"({(found.total - measured) / MiB:+,.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
