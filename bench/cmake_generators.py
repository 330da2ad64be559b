"""Bench: CMake's Ninja generator against its Makefiles, on a warm-ccache build of the same tree, side by side.

A warm rebuild (issue 25 item 4) compiles one object; the rest of its compile step is CMake's own work:
configure, then a build whose every object is a ccache hit and whose every target is linked again (the
build folder is new each time, as in the templates). This runs exactly that on this machine, outside any
container, with the CMake flags buildkit renders for the tree (CPU level --cpu-level): one priming build
fills a ccache of its own (a cold build; --work keeps it, and the paths its entries name, for the next
run), then --repeat rounds of (Ninja, Makefiles), each into the same fresh build folder. Prints each
round's configure and build seconds and the medians' ratio; asserts nothing. Needs cmake, ninja, ccache
and libssl-dev on this machine, a running engine and the local Debian base image (buildkit resolves the base to render).

    python bench/cmake_generators.py --tree ~/.cache/llama-buildkit-tests/llama.cpp-0.3.36 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from buildkit.engine.api import get_engine  # noqa: E402
from buildkit.flows.unit.pipeline import prepare  # noqa: E402
from buildkit.cli.unitspecs import unit_spec  # noqa: E402
from buildkit.plan.config import load_config  # noqa: E402
from forkrepo import make_fork_repo  # noqa: E402
from images import ensure_debian_image  # noqa: E402

GENERATORS = ("Ninja", "Unix Makefiles")


def timed(argv: list[str], env: dict[str, str], log: Path) -> float:
    start = time.monotonic()
    with open(log, "a") as out:
        proc = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        sys.exit(f"{argv[0]} failed (exit {proc.returncode}); its output is in {log}")
    return time.monotonic() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, required=True, help="a llama.cpp source tree")
    ap.add_argument("--cpu-level", default="", help="build.cpu_level (default: the config's, all)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-cmake-generators"),
                    help="the source, build folder and ccache; kept, so that only the first run's priming is cold")
    args = ap.parse_args()
    missing = [tool for tool in ("cmake", "ninja", "ccache") if shutil.which(tool) is None]
    if missing:
        sys.exit(f"bench/cmake_generators.py needs {', '.join(missing)} on this machine "
                 "(Debian: apt-get install cmake ninja-build ccache libssl-dev)")

    ccache_dir, ctx = args.work / "ccache", args.work / "ctx"
    shutil.rmtree(ctx, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="bench-generators-") as tmp:
        tmp_path = Path(tmp)
        _, commit = make_fork_repo(tmp_path / "fork", args.tree)
        overrides = {"source.url": (str(tmp_path / "fork"), "bench"), "source.commit": (commit, "bench"),
                     "build.arch": ("cpu", "bench"),
                     "base.os_image": (ensure_debian_image(), "bench"),
                     "cache.dir": (str(tmp_path / "cache"), "bench")}
        if args.cpu_level:
            overrides["build.cpu_level"] = (args.cpu_level, "bench")
        plan = prepare(unit_spec(load_config(None, env={}, overrides=overrides), get_engine()), get_engine(), ctx).plan
        src, build, log = ctx / "src", args.work / "build", args.work / "cmake.log"
        log.unlink(missing_ok=True)
        env = dict(os.environ, CCACHE_DIR=str(ccache_dir), CCACHE_NOHASHDIR="1")
        targets = [arg for t in plan.build_targets for arg in ("--target", t)]

        def one(generator: str) -> tuple[float, float]:
            shutil.rmtree(build, ignore_errors=True)
            configure = timed(["cmake", "-G", generator, "-S", str(src), "-B", str(build),
                               "-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache",
                               *plan.cmake_args], env, log)
            return configure, timed(["cmake", "--build", str(build), "-j", str(args.jobs), *targets], env, log)

        print(f"priming the ccache in {ccache_dir} (a cold build unless a run before filled it) ...", flush=True)
        primed = one(GENERATORS[0])
        print(f"  priming: configure {primed[0]:.1f} s, build {primed[1]:.1f} s", flush=True)
        rounds: dict[str, list[tuple[float, float]]] = {g: [] for g in GENERATORS}
        for _ in range(args.repeat):
            for generator in GENERATORS:
                rounds[generator].append(one(generator))

    print(f"tree: {args.tree} (cpu level {args.cpu_level or 'default'}, {args.jobs} jobs, targets "
          f"{' '.join(plan.build_targets) or 'all'}); every object a ccache hit, every target linked again")
    print(f"  {'generator':16} {'configure (s)':>24} {'build (s)':>24} {'median sum':>11}")
    medians = {}
    for generator, times in rounds.items():
        medians[generator] = statistics.median(c + b for c, b in times)
        print(f"  {generator:16} {' '.join(f'{c:5.1f}' for c, _ in times):>24} "
              f"{' '.join(f'{b:5.1f}' for _, b in times):>24} {medians[generator]:11.1f}")
    print(f"  Ninja / Makefiles (median configure + build): {medians['Ninja'] / medians['Unix Makefiles']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
