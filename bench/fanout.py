"""Bench: the nightly fanned out (one job per unit, two at a time) against the single job, and the
cache bytes each night adds.

The matrix is the example fork (examples/tiny-fork) in three units: cpu, cuda13.1 sm_120 and
cuda13.1 sm_89, all with CPU level none, CUDA from NVIDIA's wheels on the local Debian base
(`python -m tests.images debian`), so nothing is pulled. Each *runner* is a fresh Docker engine
of its own (tests/second_engine.py: own data root, BuildKit state, cache mounts and images; no
network for RUN steps), with its own buildkit cache folder (git mirror, base-image layouts; the
CUDA root from the wheels is laid out once beforehand and hard-linked in, standing for the
runner's pip download). The toolchain layers (apt) come from a registry layer cache that a
previous night (night 0, commit A, on the main engine, untimed) exported: the compile never does,
since every timed night builds a new commit (one source file changed), and the ccache is the
only thing that carries compiled objects between runners.

Two modes, each with a registry of its own (CNCF distribution on 127.0.0.1) and the same fork:

* fan-out: the workflow `buildkit ci github` writes (`--layer-cache none`: both modes read the
  same night-0 layer cache from buildkit.toml and export none), run with tests/ghactions.py: the
  plan job, the build jobs two at a time (two threads, a fresh engine each), then assemble;
  actions/cache stood in for by a folder (its entries are the GitHub cache bytes);
* single: one runner (one fresh engine) runs `ccache import --dir`, `buildkit nightly` (the three
  units in series, one bake) and `ccache export --dir`, as the one-job workflow did.

Nights (the same commits for both modes, the modes run one after the other, never at once):
1. commit B, registries empty, ccache cold (a first night);
2. commit C (one more file change), ccache restored from night 1 (fan-out: the cache folder's
   entries by key, as actions/cache restores them; single: night 1's exported folder);
3. nothing new: a quiet night (fan-out: plan only; checked: 0 bytes saved, no blob pushed, else exit 1).

Engine start and the base image's load into it are left out of the job times (a hosted runner
has its engine; both modes pay them per runner). Prints a table; asserts nothing.

    python bench/fanout.py [--units cpu,sm_120,sm_89] [--parallel 2] [--nights 3] [--file src/llama.cpp]

`--parallel 1 --nights 1` times each build job alone on the machine's cores (a runner of its own).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from forkrepo import make_fork_repo  # noqa: E402
from ghactions import (NIGHTLY_CONTEXT, ArtifactStore, CacheStore, JobResult, Runner,  # noqa: E402
                       nightly_stand_ins, runner_env)
from images import ensure_debian_image, remove_local_images  # noqa: E402
from registryserver import RegistryServer  # noqa: E402
from second_engine import SecondEngine  # noqa: E402

CUDA = "13.1"
SKIPPED_STEPS = {"Install buildkit": "the runner's pip install; `buildkit` on PATH runs this checkout",
                 "Free disk space": "frees GitHub's runner (nothing to free on a fresh engine here)"}
ENGINE_START = threading.Lock()  # SecondEngine picks its bridge's subnet from `ip route`: one at a time


def commit_change(repo: Path, file: str, marker: str) -> str:
    path = repo / file
    path.write_text(path.read_text() + f"\n/* night {marker} */\nint night_{marker}(void) {{ return 1; }}\n")
    env = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="b@x", GIT_COMMITTER_NAME="bench",
               GIT_COMMITTER_EMAIL="b@x", GIT_AUTHOR_DATE="2026-12-03T00:00:00Z",
               GIT_COMMITTER_DATE="2026-12-03T00:00:00Z")
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", f"night {marker}"], check=True, env=env)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) if path.exists() else 0


def registry_blobs(registry: RegistryServer) -> dict[str, int]:
    """digest -> size of every blob in the registry's storage."""
    root = registry.storage / "docker" / "registry" / "v2" / "blobs" / "sha256"
    return {data.parent.name: data.stat().st_size for data in root.glob("*/*/data")} if root.exists() else {}


def kb(n: int) -> str:
    return f"{n / 1e3:,.0f} kB"


class Bench:
    def __init__(self, tmp: Path, units: list[str], parallel: int, base: str) -> None:
        self.tmp, self.units, self.parallel, self.base = tmp, units, parallel, base
        self.bindir = tmp / "bin"
        self.bindir.mkdir()
        (self.bindir / "buildkit").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m buildkit.cli "$@"\n')
        (self.bindir / "buildkit").chmod(0o755)
        self.toolcache = tmp / "toolcache"
        self.engines = 0

    # ------------------------------------------------------------------ set-up
    def project(self, name: str, fork: Path, image: str, layers: str) -> Path:
        project = tmp_project = self.tmp / name
        (tmp_project / "patches").mkdir(parents=True)
        archs = json.dumps(self.units)
        (project / "buildkit.toml").write_text(f"""schema_version = 1
[source]
url = "{fork}"
branch = "master"
commit = ""
patch_dir = "patches"
[image]
name = "{image}"
default_variant = "cpu"
[build]
jobs = 2
cpu_level = "none"
cuda_version = "{CUDA}"
progress = "plain"
cache_from = ["type=registry,ref={layers}/bench/layers:{{variant}}"]
[base]
provider = "wheels"
os_image = "{self.base}"
cublas = false
[matrix]
archs = {archs}
cuda_versions = ["{CUDA}"]
""")
        return project

    def env(self, cache: Path, engine: SecondEngine | None = None) -> dict[str, str]:
        """A runner's environment: its own buildkit cache (the CUDA root hard-linked in) and engine."""
        if not cache.exists():
            cache.mkdir(parents=True)
            if (self.toolcache / "cuda-root").exists():
                subprocess.run(["cp", "-al", str(self.toolcache / "cuda-root"), str(cache / "cuda-root")], check=True)
        extra = {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                 "LLAMA_BUILDKIT_CACHE_DIR": str(cache)}
        if engine is not None:
            extra.update(engine.env)
        return runner_env(self.bindir, extra)

    def engine(self, name: str) -> SecondEngine:
        self.engines += 1
        engine = SecondEngine(self.tmp / "engines" / f"{self.engines:02d}-{name}")
        with ENGINE_START:
            engine.start()
        engine.load(self.base)
        return engine

    # ------------------------------------------------------------------ fan-out
    def fanout_night(self, night: str, project: Path, cache: CacheStore, registry: RegistryServer) -> dict:
        workflow = project / ".github" / "workflows" / "buildkit-nightly.yml"
        artifacts = ArtifactStore(self.tmp / f"artifacts-{night}")

        def checkout(inputs: dict, workspace: Path) -> dict:
            shutil.copytree(project, workspace, dirs_exist_ok=True, ignore=shutil.ignore_patterns("buildkit.lock"))
            return {}

        stand_ins = nightly_stand_ins(checkout, cache, artifacts)
        context = NIGHTLY_CONTEXT

        def runner(name: str, env: dict[str, str]) -> Runner:
            return Runner(workflow, env=env, stand_ins=stand_ins, skip=SKIPPED_STEPS, context=context,
                          work_root=self.tmp / "runs" / night / name)

        keys_before = set(cache.keys())
        cache_before = tree_bytes(cache.root)
        blobs_before = registry_blobs(registry)
        figures: dict = {"mode": "fan-out", "night": night, "jobs": {}}
        plan = runner("plan", self.env(self.tmp / "runners" / night / "plan")).run_job("plan", {})
        check(plan)
        figures["plan"] = plan.seconds
        matrix = runner("matrix", {}).matrix("build", {"plan": plan}) if plan.outputs["build"] == "true" else []

        # every runner's engine is started (and given the base) before the clock runs, as GitHub's are
        engines = {unit["id"]: self.engine(unit["id"]) for unit in matrix}

        schedule: dict[str, tuple[float, float]] = {}

        def build(unit: dict) -> JobResult:
            env = self.env(self.tmp / "runners" / night / unit["id"], engines[unit["id"]])
            begin = time.monotonic() - build_start
            job = runner(unit["id"], env).run_job("build", {"plan": plan}, matrix=unit, timeout=3600)
            schedule[unit["id"]] = (begin, time.monotonic() - build_start)
            return job  # its engine is stopped after the phase: a runner's teardown is not the next job's wait

        build_start = time.monotonic()
        try:
            with ThreadPoolExecutor(self.parallel) as pool:
                builds = list(pool.map(build, matrix))
        finally:
            for engine in engines.values():
                engine.close()
        figures["build_phase"] = max((end for _, end in schedule.values()), default=0.0)
        figures["schedule"] = {unit: [round(a, 1), round(b, 1)] for unit, (a, b) in schedule.items()}
        for job in builds:
            check(job)
            figures["jobs"][job.name + ":" + job.workspace.parent.parent.name] = job.seconds
        if builds:
            status = "success" if all(b.result == "success" for b in builds) else "failure"
            agg = JobResult("build", status)
            assemble = runner("assemble", self.env(self.tmp / "runners" / night / "assemble")).run_job(
                "assemble", {"plan": plan, "build": agg})
            check(assemble)
            figures["assemble"] = assemble.seconds
        else:
            skipped = runner("none", {}).run_job("build", {"plan": plan})
            figures["build_job"] = skipped.result
        figures["wall"] = plan.seconds + figures.get("build_phase", 0.0) + figures.get("assemble", 0.0)
        new_keys = [k for k in cache.keys() if k not in keys_before]
        figures["ccache_entries"] = {k: tree_bytes(cache.root / k) for k in new_keys}
        figures["ccache_bytes"] = sum(figures["ccache_entries"].values())
        figures["ccache_net"] = tree_bytes(cache.root) - cache_before  # after the jobs' `gh cache delete`
        figures["ccache_kept"] = len(cache.keys())
        blobs = registry_blobs(registry)
        figures["registry_new_blobs"] = len(set(blobs) - set(blobs_before))
        figures["registry_bytes"] = sum(size for d, size in blobs.items() if d not in blobs_before)
        figures["built"] = len(builds)
        return figures

    # ------------------------------------------------------------------ single job
    def single_night(self, night: str, project: Path, ccache_dir: Path, registry: RegistryServer) -> dict:
        blobs_before = registry_blobs(registry)
        figures: dict = {"mode": "single", "night": night}
        engine = self.engine("single")
        try:
            env = self.env(self.tmp / "runners" / night / "single", engine)
            start = time.monotonic()
            steps = []
            if any(ccache_dir.iterdir()):
                steps.append(("ccache import", ["ccache", "import", "--dir", str(ccache_dir)]))
            summary = self.tmp / f"single-{night}.json"
            steps.append(("nightly", ["nightly", "--summary", str(summary)]))
            for what, args in steps:
                took = run_buildkit(project, env, args)
                figures[what] = took
            data = json.loads(summary.read_text())
            built = [v for v in data["variants"] if v.get("build_seconds") is not None]
            figures["built"] = len(built)
            out = self.tmp / f"single-ccache-{night}"
            if built:  # the one-job workflow saved its ccache (it did even when nothing was built)
                figures["ccache export"] = run_buildkit(project, env, ["ccache", "export", "--dir", str(out)])
            figures["wall"] = time.monotonic() - start
            figures["ccache_bytes"] = tree_bytes(out)
            if built:
                shutil.rmtree(ccache_dir)
                shutil.copytree(out, ccache_dir, symlinks=True)
        finally:
            engine.close()
        blobs = registry_blobs(registry)
        figures["registry_new_blobs"] = len(set(blobs) - set(blobs_before))
        figures["registry_bytes"] = sum(size for d, size in blobs.items() if d not in blobs_before)
        return figures


def check(job: JobResult) -> None:
    if job.result not in ("success", "skipped"):
        text = "\n".join(f"--- {s.name} ({s.outcome})\n{s.output[-3000:]}" for s in job.steps if s.ran)
        sys.exit(f"job {job.name} failed:\n{text}")


def run_buildkit(project: Path, env: dict[str, str], args: list[str]) -> float:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "buildkit.cli", *args], cwd=project, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"buildkit {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return time.monotonic() - start


def short(unit: str) -> str:
    return unit.removeprefix("cuda13_1-").removesuffix("-cpu-none").removesuffix("-none")


def table(rows: list[dict], units: int, parallel: int) -> str:
    out = []
    by = {(r["mode"], r["night"]): r for r in rows}
    out.append(f"{'night':<22}{'mode':<9}{'wall s':>8}{'GH cache':>11}{'registry':>13}{'blobs':>6}  phases (s)")
    for r in rows:
        if r["mode"] == "fan-out":
            jobs = ", ".join(f"{short(k.split(':')[1])} {v:.0f}" for k, v in r["jobs"].items())
            phases = (f"plan {r['plan']:.1f}, builds {r.get('build_phase', 0):.0f} ({jobs}), "
                      f"assemble {r.get('assemble', 0):.1f}") if r["built"] else \
                f"plan {r['plan']:.1f}, build {r['build_job']}"
        else:
            phases = ", ".join(f"{k} {r[k]:.0f}" for k in ("ccache import", "nightly", "ccache export") if k in r)
        out.append(f"{r['night']:<22}{r['mode']:<9}{r['wall']:>8.1f}{kb(r['ccache_bytes']):>11}"
                   f"{kb(r['registry_bytes']):>13}{r['registry_new_blobs']:>6}  {phases}")
    out.append("")
    for night in sorted({r["night"] for r in rows}):
        fan, single = by.get(("fan-out", night)), by.get(("single", night))
        if not fan or not single or not fan["built"]:
            continue
        jobs = list(fan["jobs"].values())
        out.append(f"{night}: fan-out/single wall {fan['wall'] / single['wall']:.2f} (measured, {parallel} jobs at a "
                   f"time on this machine's shared cores); build jobs: sum {sum(jobs):.0f} s, max {max(jobs):.0f} s; "
                   f"a runner per job, each job as long as here: plan + max + assemble = "
                   f"{fan['plan'] + max(jobs) + fan.get('assemble', 0):.0f} s, "
                   f"{(fan['plan'] + max(jobs) + fan.get('assemble', 0)) / single['wall']:.2f} x the single job")
    for r in rows:
        if r["mode"] == "fan-out" and r["ccache_entries"]:
            out.append(f"{r['night']}: ccache entries saved: " + ", ".join(
                f"{short(k.removeprefix('buildkit-ccache-')[:-41])} {kb(v)}" for k, v in r["ccache_entries"].items())
                + f"; the cache after the jobs' deletes: {r['ccache_net']:+,} bytes, {r['ccache_kept']} entries")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", default="cpu,sm_120,sm_89", help="matrix.archs (CUDA 13.1, CPU level none)")
    parser.add_argument("--parallel", type=int, default=2, help="build jobs at a time in the fan-out")
    parser.add_argument("--file", default="src/llama.cpp", help="the source file each night changes")
    parser.add_argument("--nights", type=int, default=3, choices=(1, 2, 3), help="run the first N nights only")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    units = args.units.split(",")
    base = ensure_debian_image()
    tmp = Path(tempfile.mkdtemp(prefix="bench-fanout-", dir="/var/tmp"))
    rows: list[dict] = []
    try:
        with RegistryServer(tmp / "reg-layers") as layers, RegistryServer(tmp / "reg-fanout") as reg_fan, \
                RegistryServer(tmp / "reg-single") as reg_single:
            bench = Bench(tmp, units, args.parallel, base)
            fork = tmp / "fork"
            make_fork_repo(fork, ROOT / "examples" / "tiny-fork")
            fan = bench.project("project-fanout", fork, f"{reg_fan.host}/bench/fanout", layers.host)
            single = bench.project("project-single", fork, f"{reg_single.host}/bench/single", layers.host)
            if any(u.startswith("sm_") for u in units):
                print("laying out the CUDA root from the wheels (once, for every runner)", flush=True)
                subprocess.run([sys.executable, "-m", "buildkit.source.cudaroot", CUDA, str(bench.toolcache),
                                "--no-cublas"], check=True, env=bench.env(tmp / "unused"), capture_output=True)
            proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "ci", "github", "--buildkit-repo",
                                   "https://example.invalid/llama-buildkit", "--layer-cache", "none"], cwd=fan,
                                  env={k: v for k, v in bench.env(tmp / "unused").items()
                                       if not k.startswith("LLAMA_BUILDKIT_")}, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"ci github failed: {proc.stderr}")
            print("night 0 (commit A, main engine, untimed): the toolchain layers into the layer cache", flush=True)
            layer_cache = f"type=registry,ref={layers.host}/bench/layers:{{variant}},mode=max"
            t0 = run_buildkit(fan, bench.env(tmp / "runners" / "night0"),
                              ["bake", "--no-verify", "--cache-to", layer_cache, "--lock", str(tmp / "night0.lock")])
            print(f"  {t0:.0f} s; layer cache {kb(sum(registry_blobs(layers).values()))}", flush=True)
            remove_local_images(f"{reg_fan.host}/bench/fanout")
            cache = CacheStore(tmp / "gha-cache")
            cache.gh_script(bench.bindir, tmp / "gh.log")  # `gh cache delete` of the replaced entry
            single_ccache = tmp / "single-ccache"
            single_ccache.mkdir()
            nights = [("1 first (cold ccache)", "b"), ("2 one file (ccache)", "c"), ("3 quiet", None)]
            for night, marker in nights[:args.nights]:
                if marker:
                    commit_change(fork, args.file, marker)
                print(f"night {night}: fan-out", flush=True)
                rows.append(bench.fanout_night(night, fan, cache, reg_fan))
                print("  " + json.dumps(rows[-1]), flush=True)
                print(f"night {night}: single job", flush=True)
                rows.append(bench.single_night(night, single, single_ccache, reg_single))
                print("  " + json.dumps(rows[-1]), flush=True)
            for host, repo in ((reg_fan.host, "bench/fanout"), (reg_single.host, "bench/single")):
                remove_local_images(f"{host}/{repo}")
        print()
        print(f"matrix: {', '.join(units)} (example fork, CPU level none); {args.parallel} jobs at a time; "
              f"{os.cpu_count()} cores here")
        print(table(rows, len(units), args.parallel))
        quiet = [r for r in rows if r["night"].endswith("quiet") and r["mode"] == "fan-out"]
        for r in quiet:  # the one check: a quiet night builds nothing, so it saves and pushes nothing
            ok = r["built"] == 0 and r["ccache_bytes"] == 0 and r["ccache_net"] == 0 and r["registry_new_blobs"] == 0
            print(f"quiet night: {'0 bytes saved, 0 blobs pushed (checked)' if ok else 'SAVED OR PUSHED SOMETHING'}")
            if not ok:
                return 1
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            subprocess.run(["rm", "-rf", str(tmp)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
