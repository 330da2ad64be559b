"""Bench: gpu-check's reading of a test-backend-ops log (verify/backendops.py parse, through core/logfile.py) on
hostile logs, against the parser as it was before issue 48 (the module read from git, --old-commit), side by side.

Prints seconds per parse (best of three) and the peak memory Python allocated (one more, traced run); asserts
nothing.
Inputs, each followed by a short passing run:

* `  a(` repeated on one line with no `): ` (the old case expression tried every start, then every end);
* `failed to allocate tensors [` repeated on one line with no `]`;
* the H200's full run (docs/gpu-runs/2026-12-05-h200/fix.backend-ops.log.xz, 2.3 MB, 17,261 lines);
* 64 MiB of short lines (the most gpu-check reads; new only).

Run: python bench/hostile_log.py [--old-kib 4,8,16]
"""

from __future__ import annotations

import argparse
import lzma
import subprocess
import sys
import tempfile
import time
import tracemalloc
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from buildkit.core.logfile import log_lines  # noqa: E402
from buildkit.verify import backendops  # noqa: E402

OLD_COMMIT = "6f2a395"  # main before issue 48's parser
H200_RUN = ROOT / "docs" / "gpu-runs" / "2026-12-05-h200" / "fix.backend-ops.log.xz"
PASSING = ("Backend 1/1: CUDA0\n  ADD(type=f32): OK\n  1/1 tests passed\n  Backend CUDA0: OK\n"
           "1/1 backends passed\nOK\n")
PIECES = {"  a( without ): ": "  a(", "alloc [ without ]": "failed to allocate tensors ["}


def old_module(commit: str) -> types.ModuleType:
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:buildkit/verify/backendops.py"],
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("backendops_old")
    sys.modules[module.__name__] = module  # (its dataclasses look their module up)
    exec(compile(source, f"{commit}:buildkit/verify/backendops.py", "exec"), module.__dict__)
    return module


def timed(parse_once, repeat: int = 1, peak: bool = True) -> tuple[float, int]:
    """(best seconds of `repeat`, peak bytes Python allocated in one more run, traced: tracemalloc slows it)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        parse_once()
        best = min(best, time.perf_counter() - start)
    if not peak:
        return best, 0
    tracemalloc.start()
    parse_once()
    most = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return best, most


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-kib", default="4,8,16", help="line sizes (KiB) both parsers are timed at")
    parser.add_argument("--old-commit", default=OLD_COMMIT, help="the commit whose backendops.py is the old parser")
    args = parser.parse_args()
    old = old_module(args.old_commit)
    print(f"{'input':<22} {'size':>10} {'new (s)':>9} {'old (s)':>9} {'old/new':>8} {'new peak':>10}")
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "run.log"
        for name, piece in PIECES.items():
            for kib in [int(k) for k in args.old_kib.split(",")] + [1024]:
                text = piece * (kib * 1024 // len(piece)) + "\n" + PASSING
                log.write_text(text)
                new_s, peak = timed(lambda: backendops.parse(log_lines(log)), 3)
                old_s = timed(lambda t=text: old.parse(t), peak=False)[0] if kib < 1024 else None
                ratio = f"{old_s / new_s:>8.0f}" if old_s else f"{'-':>8}"
                print(f"{name:<22} {kib:>6} KiB {new_s:>9.4f} {old_s or float('nan'):>9.3f} {ratio} "
                      f"{peak / 2**20:>7.1f} MiB")
        text = lzma.decompress(H200_RUN.read_bytes()).decode()
        new_s, peak = timed(lambda: backendops.parse(log_lines(H200_RUN)), 3)
        old_s = timed(lambda: old.parse(text), 3, peak=False)[0]
        print(f"{'the H200 run (.xz)':<22} {len(text) / 2**20:>6.1f} MiB {new_s:>9.4f} {old_s:>9.3f} "
              f"{old_s / new_s:>8.1f} {peak / 2**20:>7.1f} MiB")
        log.write_text(("  sentinel mismatch: sent_2\n" * ((64 << 20) // 27))[: (64 << 20) - 1])
        new_s, peak = timed(lambda: backendops.parse(log_lines(log)))
        print(f"{'64 MiB of short lines':<22} {'64.0 MiB':>10} {new_s:>9.4f} {'-':>9} {'-':>8} "
              f"{peak / 2**20:>7.1f} MiB")


if __name__ == "__main__":
    main()
