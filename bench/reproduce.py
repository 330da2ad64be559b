"""Bench: two clean builds (buildx --no-cache, no ccache) of one commit; same manifest digest or not.

Prints each build's time and digest, then "reproduced" or the `buildkit diff` report (layers and
files that differ). Needs a running engine with the containerd image store and the local Debian
base image (`python -m tests.images debian`).

    python bench/reproduce.py                                # the bundled example fork, cpu
    python bench/reproduce.py --arch sm_120 --no-cublas      # CUDA via the PyPI-wheel provider
    python bench/reproduce.py --tree /path/to/llama.cpp      # real source (about 6 min a build on 2 cores)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from buildkit.plan.config import load_config  # noqa: E402
from buildkit.oci.imagediff import diff_images  # noqa: E402
from buildkit.oci.imagesource import open_image  # noqa: E402
from buildkit.engine.api import get_engine  # noqa: E402
from buildkit.flows.unit.buildunit import build  # noqa: E402
from buildkit.cli.unitspecs import unit_spec  # noqa: E402
from buildkit.flows.reproduce.record import from_lock  # noqa: E402
from buildkit.flows.reproduce.rebuild import reproduce  # noqa: E402
from buildkit.cli.reproducespecs import reproduce_spec  # noqa: E402
from forkrepo import make_fork_repo  # noqa: E402
from images import ensure_debian_image  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="cpu")
    ap.add_argument("--cuda", default="13.1")
    ap.add_argument("--no-cublas", action="store_true", help="provider wheels without cuBLAS")
    ap.add_argument("--tree", type=Path, default=ROOT / "examples" / "tiny-fork")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cache-dir", type=Path, help="buildkit cache (CUDA roots, mirrors); default: a temporary one")
    args = ap.parse_args()

    base = ensure_debian_image()
    with tempfile.TemporaryDirectory(prefix="bench-reproduce-") as tmp:
        tmp_path = Path(tmp)
        _, commit = make_fork_repo(tmp_path / "fork", args.tree)
        (tmp_path / "patches").mkdir()
        cache = args.cache_dir or tmp_path / "cache"
        overrides = {"source.url": str(tmp_path / "fork"), "source.commit": commit, "source.patch_dir": "patches",
                     "build.arch": args.arch, "build.cuda_version": args.cuda, "build.jobs": args.jobs,
                     "build.ccache": False, "base.provider": "wheels", "base.os_image": base,
                     "base.cublas": not args.no_cublas, "image.name": "bench/reproduce", "cache.dir": str(cache),
                     "lock.path": str(tmp_path / "buildkit.lock"), "build.progress": "quiet"}
        cfg = load_config(None, env={}, overrides={k: (v, "bench") for k, v in overrides.items()}, cwd=tmp_path)
        engine = get_engine()
        start = time.monotonic()
        first = build(unit_spec(cfg, engine), engine, no_cache=True, verify=False)
        print(f"build 1: {time.monotonic() - start:.0f}s  {first.result.digest}")
        start = time.monotonic()
        rec = from_lock(tmp_path / "buildkit.lock")
        spec = reproduce_spec(rec, engine, config_path=None, env={"LLAMA_BUILDKIT_CACHE_DIR": str(cache)},
                              patches=str(tmp_path / "patches"))
        result = reproduce(rec, spec, keep=tmp_path / "keep", compare=False, engine=engine)
        print(f"build 2: {time.monotonic() - start:.0f}s  {result.digest}")
        if result.reproduced:
            print("reproduced: same manifest digest")
            return 0
        with ExitStack() as stack:
            a = open_image(f"docker:{first.result.digest}", stack)
            b = open_image(str(tmp_path / "keep" / "reproduced.oci.tar"), stack)
            print(diff_images(a, b).report())
        return 1


if __name__ == "__main__":
    sys.exit(main())
