"""Bench: rebuild after a one-file change, with and without the ccache mount; context size vs tree.

Prints figures and ratios; asserts nothing. Needs a running engine and the local Debian base
image (`python -m tests.images debian`).

    python bench/rebuild.py                       # the bundled example fork, cpu
    python bench/rebuild.py --arch sm_120         # CUDA via the PyPI-wheel provider
    python bench/rebuild.py --tree /path/to/llama.cpp --file ggml/src/ggml.c   # real source (slow)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from buildkit.plan.config import load_config  # noqa: E402
from buildkit.flows.pipeline import build, prepare  # noqa: E402
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


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="cpu")
    ap.add_argument("--cuda", default="13.1")
    ap.add_argument("--tree", type=Path, default=ROOT / "examples" / "tiny-fork")
    ap.add_argument("--file", default="ggml/src/ggml.c", help="source file the one-line change goes into")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()

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
                "build.progress": ("quiet", "bench"), "base.provider": ("wheels", "bench"),
                "base.os_image": (base, "bench"), "base.cublas": (False, "bench"),
                "image.name": ("bench/rebuild", "bench"), "lock.path": (str(tmp_path / "bench.lock"), "bench"),
                "cache.dir": (os.environ.get("LLAMA_BUILDKIT_CACHE_DIR", str(tmp_path / "cache")), "bench"),
            }
            return load_config(None, env={}, overrides=overrides)

        # context size versus the tree it comes from
        prepared = prepare(cfg_for(first, True), tmp_path / "ctx")
        context_bytes = du(prepared.rendered.context_dir)
        repo_bytes = du(repo)

        print(f"priming build of {first[:12]} ({args.arch}) ...", flush=True)
        primed = build(cfg_for(first, True), verify=False, stream=open(os.devnull, "w"))
        cold_commit = commit_change(repo, args.file, f"cold{run_id}")
        cold = build(cfg_for(cold_commit, False), verify=False, stream=open(os.devnull, "w"))
        warm_commit = commit_change(repo, args.file, f"warm{run_id}")
        warm = build(cfg_for(warm_commit, True), verify=False, stream=open(os.devnull, "w"))

    print(f"tree: {args.tree} ({args.arch}, {args.jobs} jobs)")
    print(f"  priming build (ccache on)                     {primed.result.seconds:8.1f} s")
    print(f"  one-file change, ccache off (cold compile)    {cold.result.seconds:8.1f} s")
    print(f"  one-file change, ccache mount on (warm)       {warm.result.seconds:8.1f} s")
    print(f"  cold / warm                                   {cold.result.seconds / warm.result.seconds:8.2f} x")
    print(f"  build context {context_bytes / 1e6:8.2f} MB  vs  repository with .git {repo_bytes / 1e6:8.2f} MB"
          f"  ({context_bytes / repo_bytes:.2f} x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
