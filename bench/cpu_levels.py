"""Bench: what the CPU instruction-set level (build.cpu_level) is worth and what it costs.

Prints figures and ratios; asserts nothing.

    python bench/cpu_levels.py                      # images (needs the engine and the Debian base image)
    python bench/cpu_levels.py --levels all,x86-64-v3,none --no-cache
    python bench/cpu_levels.py cost --tree DIR      # plain CMake builds, no Docker (see below)

images (default): the real llama.cpp tree (llama-cpp-python 0.3.36's vendor/llama.cpp, tests/realsource.py)
committed as upstream + one fork commit, built with `buildkit build --arch cpu` for each level (default:
the default `all` and the `none` baseline, same commit), then `buildkit bench --image A --compare-image B`
(the first level against each other one, each pair in one run) on a generated Q8_0 llama model of about 100M parameters (tests/tinymodel.py, the `gguf`
package). Prints the tokens/s ratio (end to end, server generation, server prompt), each image's size,
its CPU backend files and its build time. --no-cache builds with buildx --no-cache (the ccache mount
still counts: give --no-ccache for a cold compile).

cost: configure and build the tree with CMake directly for `all` and one level (the exact -D flags
buildkit passes, from buildkit/plan/cpulevels.py), cold (no ccache) and with a warm ccache (a second build
in a fresh folder), and print wall time, CPU time and the size of the CPU backend files. Needs only
cmake, a compiler and ccache; run it where cores are free.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from buildkit.plan import cpulevels  # noqa: E402

FORK_MESSAGE = "fork: DFlash speculative decoding"  # as the e2e fixtures: same SHAs, shared layer cache
IMAGE = "buildkit-bench/cpu-levels"


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


# --------------------------------------------------------------------------- images

def build_level(repo: Path, commit: str, level: str, work: Path, *, jobs: int, base: str, no_cache: bool,
                ccache: bool) -> dict:
    from buildkit.plan.config import load_config
    from buildkit.engine.current import get_engine
    from buildkit.flows.unit.buildunit import build
    from buildkit.cli.unitspecs import unit_spec

    overrides = {"source.url": str(repo), "source.commit": commit, "image.name": IMAGE, "build.arch": "cpu",
                 "build.cpu_level": level, "build.jobs": jobs, "build.progress": "plain", "build.ccache": ccache,
                 "base.os_image": base, "cache.dir": str(work / "cache"), "lock.path": str(work / "buildkit.lock")}
    cfg = load_config(None, env={}, overrides={k: (v, "bench") for k, v in overrides.items()})
    log = work / f"build-{level}.log"
    print(f"building cpu level {level} (log {log}) ...", flush=True)
    start = time.monotonic()
    with log.open("w") as out:
        built = build(unit_spec(cfg, get_engine()), get_engine(), stream=out, no_cache=no_cache)
    seconds = time.monotonic() - start
    ref = built.result.tags[0]
    size = int(subprocess.run(["docker", "image", "inspect", "--format", "{{.Size}}", ref], check=True,
                              capture_output=True, text=True).stdout.strip())
    checks = {c.name: f"{c.status}: {c.detail}" for c in built.report.checks}
    return {"level": level, "ref": ref, "seconds": seconds, "size": size, "checks": checks}


def bench_images(a: str, b: str, model: Path, runs: int, tokens: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_BUILDKIT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "buildkit.cli", "bench", "--image", a, "--compare-image", b, "--model", str(model),
            "--runs", str(runs), "--max-tokens", str(tokens), "--json", "--", "--ctx-size", "2048"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=7200)
    if proc.returncode != 0:
        raise SystemExit(f"buildkit bench failed (exit {proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def images(args: argparse.Namespace) -> int:
    from forkrepo import make_fork_repo
    from images import ensure_debian_image
    from realserver import test_cache_dir
    from realsource import ensure_llama_cpp_tree
    from tinymodel import Shape, write_llama_model

    levels = [lv.strip() for lv in args.levels.split(",") if lv.strip()]
    if len(levels) < 2:
        raise SystemExit("--levels needs at least two levels (the first is compared with each other one)")
    tree = args.tree or ensure_llama_cpp_tree(test_cache_dir())
    base = ensure_debian_image()
    work = Path(tempfile.mkdtemp(prefix="bench-cpu-levels-", dir=args.work_dir))
    repo = work / "fork"
    _, commit = make_fork_repo(repo, tree, fork_message=FORK_MESSAGE)
    model = write_llama_model(work / "llama-100m-q8_0.gguf", Shape(n_layer=14, n_embd=768, n_head=12, n_ff=2048),
                              file_type="q8_0")
    print(f"model {model.name}: {mib(model.stat().st_size)}; fork commit {commit[:12]}; work {work}", flush=True)
    builds = [build_level(repo, commit, lv, work, jobs=args.jobs, base=base, no_cache=args.no_cache,
                          ccache=args.ccache) for lv in levels]
    print("\nlevel          build    image       checks")
    for b in builds:
        print(f"{b['level']:<14} {b['seconds']:6.0f}s  {mib(b['size']):>10}  "
              f"{b['checks'].get('cpu-load', '')} | {b['checks'].get('cpu-backends', '')}")
    best = builds[0]
    for other in builds[1:]:
        doc = bench_images(best["ref"], other["ref"], model, args.runs, args.max_tokens)
        (work / f"bench-{other['level']}.json").write_text(json.dumps(doc, indent=2))
        new, old = doc["summary"], doc["compare"]["base"]["summary"]
        print(f"\nbench ({args.runs} runs x {args.max_tokens} tokens, {model.name}): {best['level']} vs {other['level']}")
        for key, what in (("client_tps", "end-to-end tok/s"), ("predicted_tps", "server generation tok/s"),
                          ("prompt_tps", "server prompt tok/s")):
            a, b = (new.get(key) or {}).get("mean"), (old.get(key) or {}).get("mean")
            ratio = f"{a / b:.2f}x" if a and b else "-"
            print(f"  {what:<26} {best['level']}: {a or 0:8.2f}   {other['level']}: {b or 0:8.2f}   ratio {ratio}")
        print(f"  image size                 {best['level']}: {mib(best['size'])}   {other['level']}: "
              f"{mib(other['size'])}   ratio {best['size'] / other['size']:.2f}x")
        print(f"  build time                 {best['level']}: {best['seconds']:.0f}s   {other['level']}: "
              f"{other['seconds']:.0f}s")
    print(f"(reports: {work}/bench-*.json; images kept as {', '.join(b['ref'] for b in builds)})")
    if not args.keep:
        shutil.rmtree(work / "cache", ignore_errors=True)
    return 0


# --------------------------------------------------------------------------- cost (plain CMake)

COMMON = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
          "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_WEBUI=OFF", "-DLLAMA_CURL=OFF",
          "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_COMMIT=bench", "-DLLAMA_BUILD_NUMBER=1"]


def cmake_build(tree: Path, out: Path, level: str, jobs: int, ccache_dir: Path | None) -> dict:
    flags = list(cpulevels.cmake_flags(cpulevels.get_level(level, "linux/amd64"), "linux/amd64"))
    env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")
    if ccache_dir is None:
        launch = ["-DGGML_CCACHE=OFF"]
    else:
        env.update(CCACHE_DIR=str(ccache_dir), CCACHE_BASEDIR=str(tree), CCACHE_NOHASHDIR="1")
        launch = ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    for argv in (["cmake", "-S", str(tree), "-B", str(out), *COMMON, *flags, *launch],
                 ["cmake", "--build", str(out), "-j", str(jobs), "--target", "llama-server"]):
        proc = subprocess.run(argv, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:3])} failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    libs = sorted((out / "bin").glob("libggml-cpu*.so*"))
    return {"wall": wall, "cpu": cpu, "backends": len(libs), "backend_bytes": sum(p.stat().st_size for p in libs),
            "all_bytes": sum(p.stat().st_size for p in (out / "bin").iterdir() if p.is_file())}


def cost(args: argparse.Namespace) -> int:
    if args.tree is None:
        raise SystemExit("cost needs --tree (a llama.cpp source folder)")
    work = Path(tempfile.mkdtemp(prefix="bench-cpu-cost-", dir=args.work_dir))
    rows = []
    try:
        for level in ("all", args.level):
            cold = cmake_build(args.tree, work / f"{level}-cold", level, args.jobs, None)
            ccache = work / f"ccache-{level}"
            cmake_build(args.tree, work / f"{level}-fill", level, args.jobs, ccache)
            warm = cmake_build(args.tree, work / f"{level}-warm", level, args.jobs, ccache)
            rows.append((level, cold, warm))
            print(f"{level}: cold {cold['wall']:.0f}s wall / {cold['cpu']:.0f}s CPU; warm ccache "
                  f"{warm['wall']:.0f}s / {warm['cpu']:.0f}s; {cold['backends']} CPU backend file(s), "
                  f"{mib(cold['backend_bytes'])} (all of bin/: {mib(cold['all_bytes'])})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (a, ac, aw), (b, bc, bw) = rows
    print(f"\nall vs {b} ({args.jobs} jobs, {os.cpu_count()} cores): cold CPU time {ac['cpu'] / bc['cpu']:.2f}x, "
          f"cold wall {ac['wall'] / bc['wall']:.2f}x, warm-ccache wall {aw['wall'] / bw['wall']:.2f}x, "
          f"CPU backend bytes {ac['backend_bytes'] / bc['backend_bytes']:.1f}x")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="images", choices=("images", "cost"))
    ap.add_argument("--tree", type=Path, help="llama.cpp source tree (default for images: the sdist's, cached)")
    ap.add_argument("--levels", default="all,none", help="images: levels to build; the first is compared with each other one")
    ap.add_argument("--level", default="x86-64-v3", help="cost: the single level compared with all")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--no-cache", action="store_true", help="images: buildx --no-cache")
    ap.add_argument("--no-ccache", dest="ccache", action="store_false", help="images: build without the ccache mount")
    ap.add_argument("--keep", action="store_true", help="keep the work folder's caches")
    ap.add_argument("--work-dir", default=None, help="where the temporary work folder goes")
    args = ap.parse_args()
    return cost(args) if args.mode == "cost" else images(args)


if __name__ == "__main__":
    sys.exit(main())
