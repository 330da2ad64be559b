"""Bench: rebuild after a one-file change, with and without the ccache mount; context size vs tree.

Three builds, each of a new commit (so BuildKit's layer cache cannot serve the compile): a priming
build with the ccache (it fills the ccache mount), the cold one (a one-file change, ccache off: every
object compiled) and the warm one (another one-file change, ccache on: one object compiled;
--repeat N makes N of them, and the ratio is the median one's). Each is timed end to end (fetch,
patch, render, build, verify with --verify, lock) and split into the compile step and the export
step as buildx's log times them (the rest: context, the other steps, `docker load`, verify). Prints figures and ratios; asserts nothing. Needs a running engine and the local
Debian base image (`python -m tests.images debian`).

    python bench/rebuild.py                       # the bundled example fork, cpu
    python bench/rebuild.py --arch sm_120         # CUDA via the PyPI-wheel provider
    python bench/rebuild.py --tree /path/to/llama.cpp --file src/llama.cpp --cpu-level x86-64-v3 --verify
                                                  # real source, one CPU level (issue 25 item 4; slow)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from buildkit.engine.api import get_engine  # noqa: E402
from buildkit.plan.config import load_config  # noqa: E402
from buildkit.flows.unit.buildunit import build  # noqa: E402
from buildkit.flows.unit.pipeline import prepare  # noqa: E402
from buildkit.cli.unitspecs import unit_spec  # noqa: E402
from forkrepo import make_fork_repo  # noqa: E402
from images import ensure_debian_image  # noqa: E402


def commit_change(repo: Path, file: str, marker: str) -> str:
    path = repo / file
    path.write_text(path.read_text() + f"\n/* bench change {marker} */\nint bench_{marker}(void) {{ return 1; }}\n")
    env = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="b@x", GIT_COMMITTER_NAME="bench",
               GIT_COMMITTER_EMAIL="b@x")
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", f"bench {marker}"], check=True, env=env)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def step_seconds(log: str) -> dict[str, float]:
    """The compile step's and the export step's seconds in buildx's plain log (0 when absent, e.g. the
    compile came from the layer cache)."""
    named: dict[str, str] = {}
    for m in re.finditer(r"^#(\d+) (\[[^\]]*\] RUN .*cmake --build.*|exporting to .*)$", log, re.M):
        named.setdefault(m.group(1), "compile" if "cmake --build" in m.group(2) else "export")
    out = {"compile": 0.0, "export": 0.0}
    for m in re.finditer(r"^#(\d+) DONE ([\d.]+)s$", log, re.M):
        if m.group(1) in named:
            out[named[m.group(1)]] = float(m.group(2))
    return out


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="cpu")
    ap.add_argument("--cuda", default="13.1")
    ap.add_argument("--tree", type=Path, default=ROOT / "examples" / "tiny-fork")
    ap.add_argument("--file", default="ggml/src/ggml.c", help="source file the one-line change goes into")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cpu-level", default="", help="build.cpu_level (default: the config's, all)")
    ap.add_argument("--verify", action="store_true", help="verify each build too, as `buildkit build` does")
    ap.add_argument("--logs", type=Path, default=Path("/tmp/bench-rebuild"), help="buildx's log of each build")
    ap.add_argument("--repeat", type=int, default=1, help="warm builds, each of another one-file change (default 1)")
    args = ap.parse_args()
    args.logs.mkdir(parents=True, exist_ok=True)

    base = ensure_debian_image()
    with tempfile.TemporaryDirectory(prefix="bench-rebuild-") as tmp:
        tmp_path = Path(tmp)
        repo = tmp_path / "fork"
        _, first = make_fork_repo(repo, args.tree)
        run_id = str(int(time.time()))

        def cfg_for(commit: str, ccache: bool):
            overrides = {
                "source.url": (str(repo), "bench"), "source.commit": (commit, "bench"),
                "build.arch": (args.arch, "bench"), "build.cuda_version": (args.cuda, "bench"),
                "build.jobs": (args.jobs, "bench"), "build.ccache": (ccache, "bench"),
                "build.progress": ("plain", "bench"), "base.provider": ("wheels", "bench"),
                "base.os_image": (base, "bench"), "base.cublas": (False, "bench"),
                "image.name": ("bench/rebuild", "bench"), "lock.path": (str(tmp_path / "bench.lock"), "bench"),
                "cache.dir": (os.environ.get("LLAMA_BUILDKIT_CACHE_DIR", str(tmp_path / "cache")), "bench"),
            }
            if args.cpu_level:
                overrides["build.cpu_level"] = (args.cpu_level, "bench")
            return load_config(None, env={}, overrides=overrides)

        def timed(name: str, commit: str, ccache: bool) -> dict[str, float]:
            log = args.logs / f"{name}.log"
            start = time.monotonic()
            with open(log, "w") as stream:
                unit = build(unit_spec(cfg_for(commit, ccache), get_engine()), get_engine(), verify=args.verify,
                             stream=stream)
            wall = time.monotonic() - start
            steps = step_seconds(log.read_text())
            return {"wall": wall, **steps, "verify": unit.seconds.get("verify", 0.0),
                    "other": wall - steps["compile"] - steps["export"] - unit.seconds.get("verify", 0.0)}

        # context size versus the tree it comes from
        prepared = prepare(unit_spec(cfg_for(first, True), get_engine()), get_engine(), tmp_path / "ctx")
        context_bytes = du(prepared.rendered.context_dir)
        repo_bytes = du(repo)

        print(f"priming build of {first[:12]} ({args.arch}) ...", flush=True)
        primed = timed("priming", first, True)
        print("cold build (a one-file change, ccache off) ...", flush=True)
        cold = timed("cold", commit_change(repo, args.file, f"cold{run_id}"), False)
        warms = []
        for i in range(max(args.repeat, 1)):
            print(f"warm build {i + 1} (another one-file change, ccache on) ...", flush=True)
            warms.append(timed(f"warm{i + 1}", commit_change(repo, args.file, f"warm{i}{run_id}"), True))
        warm = sorted(warms, key=lambda row: row["wall"])[len(warms) // 2]  # the median one

    print(f"tree: {args.tree} ({args.arch}, cpu level {args.cpu_level or 'default'}, {args.jobs} jobs, "
          f"verify {'on' if args.verify else 'off'}; logs in {args.logs})")
    print(f"  {'seconds':34} {'end to end':>10} {'compile':>8} {'export':>7} {'verify':>7} {'other':>7}")
    rows = [("priming build (ccache on)", primed), ("one-file change, ccache off (cold)", cold)]
    rows += [(f"one-file change, ccache on (warm {i + 1})", row) for i, row in enumerate(warms)]
    for name, row in rows:
        print(f"  {name:34} {row['wall']:10.1f} {row['compile']:8.1f} {row['export']:7.1f} {row['verify']:7.1f} "
              f"{row['other']:7.1f}")
    print(f"  warm / cold, end to end (median warm)         {100 * warm['wall'] / cold['wall']:8.1f} %")
    print(f"  warm: outside the compile step (same build)   {warm['wall'] - warm['compile']:8.1f} s")
    print(f"  build context {context_bytes / 1e6:8.2f} MB  vs  repository with .git {repo_bytes / 1e6:8.2f} MB"
          f"  ({context_bytes / repo_bytes:.2f} x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
