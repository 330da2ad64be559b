"""Bench: an arm64 image's build stage cross-compiled on this amd64 machine against the same build under
QEMU emulation, back to back. Prints wall times and ratios; asserts nothing.

    python bench/cross_vs_emulated.py                    # the example fork, then the real llama.cpp tree
    python bench/cross_vs_emulated.py --trees example --jobs 2

For each tree, buildkit renders the build twice for linux/arm64 with the same inputs:

* cross: the default on this machine (build.build_platform = linux/amd64): the build stage runs natively
  (FROM --platform=$BUILDPLATFORM) with Debian's aarch64 cross compilers;
* emulated: build.build_platform = linux/arm64, the native template, so BuildKit runs the whole build
  stage (apt-get, cmake, gcc) as arm64 programs under qemu-aarch64, registered with binfmt_misc for this
  run only (tests/qemu.py) and removed afterwards.

Each is built with `docker buildx build --target build --no-cache` and no ccache (build.ccache off), so
both start cold. Timed: the whole build stage (what a user waits for), and the compile step alone
(buildx's own DONE time of the cmake step). The example fork builds everything it has; for the real tree a
fixed subset, the CMake target ggml-base (ggml.c, ggml-quants.c, gguf.cpp, ggml-backend, ...), both ways,
because the whole tree under emulation takes hours here (--real-target llama-server times all of it).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

STEP_DONE = re.compile(r"^#(\d+) DONE (\d+(?:\.\d+)?)s")
STEP_NAME = re.compile(r"^#(\d+) \[build +\d+/\d+\] RUN (.*)")
IMAGE = "buildkit-bench/cross"


def render(repo: Path, commit: str, work: Path, *, build_platform: str, jobs: int, base: str, real_target: str):
    from buildkit.engine.current import get_engine
    from buildkit.flows.unit.pipeline import prepare
    from buildkit.cli.unitspecs import unit_spec
    from buildkit.plan.config import load_config

    overrides = {"source.url": str(repo), "source.commit": commit, "image.name": IMAGE, "build.arch": "cpu",
                 "build.platform": "linux/arm64", "build.build_platform": build_platform, "build.jobs": jobs,
                 "build.ccache": False, "base.os_image": base, "cache.dir": str(work / "cache")}
    cfg = load_config(None, env={}, overrides={k: (v, "bench") for k, v in overrides.items()})
    out = work / f"context-{build_platform.split('/')[1]}"
    prepared = prepare(unit_spec(cfg, get_engine()), get_engine(), out)
    dockerfile = prepared.rendered.dockerfile
    if real_target:
        text = dockerfile.read_text()
        dockerfile.write_text(text.replace("--target llama-server", f"--target {real_target}"))
    return prepared


def build_stage(prepared, log: Path) -> dict:
    """Build the build stage cold; {'wall': s, 'compile': s of the cmake step}."""
    argv = ["docker", "buildx", "build", "--platform", prepared.plan.request.platform, "--target", "build",
            "--no-cache", "--progress", "plain", "--output", "type=cacheonly",
            "--build-arg", f"SOURCE_DATE_EPOCH={prepared.plan.source_date_epoch}"]
    for name, path in prepared.rendered.named_contexts:
        argv += ["--build-context", f"{name}={path}"]
    argv += ["--file", str(prepared.rendered.dockerfile), str(prepared.rendered.context_dir)]
    start = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"build failed (exit {proc.returncode}); see {log}")
    steps, compile_step = {}, None
    for line in log.read_text().splitlines():
        m = STEP_NAME.match(line)
        if m and "cmake -S /src" in m.group(2):
            compile_step = m.group(1)
        d = STEP_DONE.match(line)
        if d:
            steps[d.group(1)] = float(d.group(2))
    return {"wall": wall, "compile": steps.get(compile_step or "", 0.0)}


def one_tree(name: str, repo: Path, commit: str, work: Path, args, base: str) -> dict:
    import qemu

    subset = args.real_target if name == "real" else ""
    what = f"CMake target {subset}" if subset else "the whole build"
    print(f"\n{name}: {what}, linux/arm64, jobs {args.jobs}, cold (buildx --no-cache, no ccache)", flush=True)
    cross = render(repo, commit, work / name, build_platform="linux/amd64", jobs=args.jobs, base=base,
                   real_target=subset)
    emulated = render(repo, commit, work / name, build_platform="linux/arm64", jobs=args.jobs, base=base,
                      real_target=subset)
    assert cross.plan.request.cross and not emulated.plan.request.cross
    print("  cross-compiling ...", flush=True)
    c = build_stage(cross, work / name / "cross.log")
    print(f"  cross:    build stage {c['wall']:7.1f}s, compile step {c['compile']:7.1f}s", flush=True)
    print("  under QEMU (binfmt_misc handler registered for this run only) ...", flush=True)
    with qemu.registered("aarch64"):
        e = build_stage(emulated, work / name / "emulated.log")
    print(f"  emulated: build stage {e['wall']:7.1f}s, compile step {e['compile']:7.1f}s", flush=True)
    print(f"  ratio (emulated / cross): build stage {e['wall'] / c['wall']:.1f}x, "
          f"compile step {e['compile'] / c['compile']:.1f}x" if c["compile"] else "", flush=True)
    return {"tree": name, "what": what, "cross": c, "emulated": e}


def main(argv: list[str] | None = None) -> int:
    from forkrepo import make_fork_repo
    from images import ensure_multiarch_image
    from realserver import test_cache_dir
    from realsource import ensure_llama_cpp_tree

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trees", default="example,real", help="example, real or both (default)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--real-target", default="ggml-base", help="the CMake target timed for the real tree")
    ap.add_argument("--work-dir", default=None)
    args = ap.parse_args(argv)
    base = ensure_multiarch_image()
    work = Path(tempfile.mkdtemp(prefix="bench-cross-", dir=args.work_dir))
    results = []
    for name in [t.strip() for t in args.trees.split(",") if t.strip()]:
        tree = ROOT / "examples" / "tiny-fork" if name == "example" else ensure_llama_cpp_tree(test_cache_dir())
        (work / name).mkdir(parents=True)
        _, commit = make_fork_repo(work / name / "fork", tree, fork_message="fork: DFlash speculative decoding")
        results.append(one_tree(name, work / name / "fork", commit, work, args, base))
    print("\ntree     subset                     cross build  emulated build  ratio   cross compile  emulated compile  ratio")
    for r in results:
        c, e = r["cross"], r["emulated"]
        ratio = f"{e['compile'] / c['compile']:.1f}x" if c["compile"] else "-"
        print(f"{r['tree']:<8} {r['what']:<26} {c['wall']:10.1f}s {e['wall']:13.1f}s  {e['wall'] / c['wall']:5.1f}x "
              f"{c['compile']:12.1f}s {e['compile']:15.1f}s  {ratio}")
    print(f"(logs under {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
