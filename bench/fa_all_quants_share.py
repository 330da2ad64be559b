#!/usr/bin/env python3
"""What GGML_CUDA_FA_ALL_QUANTS adds to a cold CUDA compile, from the .ninja_log of a build made with it.

Without the flag, the fork's ggml/src/ggml-cuda/CMakeLists.txt (1c4788192) compiles only the fattn-vec
instances whose K and V types are the same (f16, bf16, q4_0, q8_0) or that involve a TurboQuant type
(turbo2_0/3_0/4_0); with it, every fattn-vec instance. The objects only the flag adds are those the
default globs miss; their compile seconds against the whole build's are the flag's cost, measured in
the same build (ninja's per-object start and end times; CPU seconds of parallel jobs, so a share, not
a wall time).

    python3 bench/fa_all_quants_share.py docs/gpu-runs/2026-12-05-h200/native-fa-all-quants.ninja_log
"""

from __future__ import annotations

import re
import sys

DEFAULT_VEC = re.compile(r"fattn-vec[^/]*(q4_0-q4_0|q8_0-q8_0|f16-f16|bf16-bf16|turbo2_0|turbo3_0|turbo4_0)")


def main(path: str) -> int:
    total = cuda = extra = 0.0
    n_cuda = n_extra = 0
    for line in open(path):
        if line.startswith("#"):
            continue
        start, end, _, out, *_ = line.rstrip("\n").split("\t")
        seconds = (int(end) - int(start)) / 1000
        total += seconds
        if out.endswith(".cu.o"):
            cuda += seconds
            n_cuda += 1
            if "fattn-vec" in out and not DEFAULT_VEC.search(out):
                extra += seconds
                n_extra += 1
    print(f"objects compiled: CUDA {n_cuda} ({cuda:.0f} s), everything {total:.0f} s")
    print(f"only with GGML_CUDA_FA_ALL_QUANTS: {n_extra} objects, {extra:.0f} s = "
          f"{100 * extra / total:.1f}% of this build's compile seconds, or {100 * extra / (total - extra):.1f}% "
          f"added to those of the same build without the flag")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]) if len(sys.argv) == 2 else "usage: fa_all_quants_share.py NINJA_LOG")
