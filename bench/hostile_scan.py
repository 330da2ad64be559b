"""Bench: the CUDA source scan (source/cudasource.py) on hostile .cu files, against the scan as it was before
issue 48 (the module read from git, --old-commit), side by side.

Prints seconds per scan (the new one's best of three; both checks, long double and the CCCL iterators, on
a tree holding the one file); asserts nothing. Three inputs:

* `/*x` repeated on one line, with no closing `*/` (a comment that never ends),
* `"\\` repeated on one line (a string literal whose every quote is escaped: it never closes),
* `cuda::discard_iterator(); long double x;` on each line after `#include <cuda/iterator>` (every use
  checked, every long double reported with its line).

The old scan ran its expressions from every start (`/\\*.*?\\*/` with DOTALL) and counted each use's line
from the file's start: it grows with the square of the size (4x per doubling), so it is timed at small
sizes only; the new one at those and at --mib. Run: python bench/hostile_scan.py [--mib 1] [--old-kib 16,32,64]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from buildkit.source import cudasource  # noqa: E402

OLD_COMMIT = "6f2a395"  # main before issue 48's scan
PIECES = {"unclosed /*x": "/*x", 'unescaped "\\': '"\\', "many uses": "cuda::discard_iterator(); long double x;\n"}
HEAD = {"many uses": "#include <cuda/iterator>\n"}  # every use is then checked, none reported
Scan = Callable[[Path], object]


def text_of(name: str, size: int) -> str:
    piece = PIECES[name]
    return HEAD.get(name, "") + piece * (size // len(piece))


def old_module(commit: str) -> types.ModuleType:
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:buildkit/source/cudasource.py"],
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("cudasource_old")
    exec(compile(source, f"{commit}:buildkit/source/cudasource.py", "exec"), module.__dict__)
    return module


def seconds(module: types.ModuleType, text: str, repeat: int = 1) -> float:
    """The best of `repeat` scans of a tree holding text as its one .cu (a busy machine only adds time)."""
    best = float("inf")
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "hostile.cu").write_text(text)
        for _ in range(repeat):
            start = time.perf_counter()
            module.long_double_uses(Path(folder))
            module.cub_dropped_iterator_uses(Path(folder))
            best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=float, default=1.0, help="size of the hostile file the new scan reads (MiB)")
    parser.add_argument("--old-kib", default="16,32,64", help="sizes (KiB) both scans are timed at")
    parser.add_argument("--old-commit", default=OLD_COMMIT, help="the commit whose cudasource.py is the old scan")
    args = parser.parse_args()
    old = old_module(args.old_commit)
    sizes = [int(k) * 1024 for k in args.old_kib.split(",")]
    print(f"{'input':<18} {'size':>10} {'new (s)':>9} {'old (s)':>9} {'old/new':>8}")
    for name in PIECES:
        for size in sizes:
            text = text_of(name, size)
            new_s, old_s = seconds(cudasource, text, 3), seconds(old, text)
            print(f"{name:<18} {size // 1024:>6} KiB {new_s:>9.4f} {old_s:>9.3f} {old_s / new_s:>8.0f}")
        size = int(args.mib * (1 << 20))
        print(f"{name:<18} {size / (1 << 20):>6.2f} MiB {seconds(cudasource, text_of(name, size), 3):>9.4f} "
              f"{'-':>9} {'-':>8}")


if __name__ == "__main__":
    main()
