"""Bench: how fast buildkit's first answers are, side by side with `docker buildx version` (issue 50 item 8).

Times, alternating, the median of --runs runs each:

* `buildkit --help` (python -m buildkit.cli, this checkout first on PYTHONPATH),
* a warm `buildkit build --arch sm_120 --print` of a CUDA variant (provider wheels on the local Debian base,
  the fork at --source; one unmeasured run first fills the mirror, the CUDA wheels' index answers and
  the kept build folder),
* `docker buildx version`, and `python -c pass` (the interpreter's own start, the floor),

and prints each figure and its ratio to `docker buildx version`. With --baseline REF the same buildkit
commands run from REF's tree too (git archive into a temporary folder), in the same rounds. Asserts
nothing; a timing belongs here, not in a test. Needs the engine, `buildkit-test/debian:bookworm` and a
fork (--source; default the bundled example fork, copied into a git repository here).

    python bench/cli_latency.py [--runs 7] [--source PATH] [--commit SHA] [--baseline REF]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
BASE = "buildkit-test/debian:bookworm"


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"cli_latency: {' '.join(argv[:6])} ... failed: {done.stderr.strip().splitlines()[-1:]}")
    return took


def tree_of(ref: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", ref], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--source", type=Path, help="the fork to print a build of (default: the example fork)")
    ap.add_argument("--commit", help="its commit (default: its HEAD)")
    ap.add_argument("--baseline", help="a git ref of this repository to time beside this checkout")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cli-latency-") as tmp:
        work = Path(tmp)
        source = args.source
        if source is None:
            from forkrepo import make_fork_repo

            source = work / "fork"
            make_fork_repo(source, ROOT / "examples" / "tiny-fork")
        commit = args.commit or subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], check=True,
                                               capture_output=True, text=True).stdout.strip()
        trees = {"this checkout": ROOT}
        if args.baseline:
            trees[f"baseline {args.baseline}"] = tree_of(args.baseline, Path(tempfile.mkdtemp(dir=tmp)))
        project = work / "project"
        project.mkdir()
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_BUILDKIT_")}
        base_env["LLAMA_BUILDKIT_CACHE_DIR"] = str(work / "cache")
        envs = {name: {**base_env, "PYTHONPATH": str(tree)} for name, tree in trees.items()}
        cli = [sys.executable, "-m", "buildkit.cli"]
        printing = [*cli, "build", "--arch", "sm_120", "--print", "--provider", "wheels", "--os-image", BASE,
                    "--source", str(source), "--commit", commit]
        for env in envs.values():
            timed(printing, env, project)  # warm: the mirror, the index answers, the kept folder
        commands = {"docker buildx version": (["docker", "buildx", "version"], base_env),
                    "python -c pass": ([sys.executable, "-c", "pass"], base_env)}
        for name, env in envs.items():
            commands[f"buildkit --help ({name})"] = ([*cli, "--help"], env)
            commands[f"build --arch sm_120 --print, warm ({name})"] = (printing, env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, (command, env) in commands.items():
                times[name].append(timed(command, env, project))
    medians = {name: statistics.median(values) for name, values in times.items()}
    floor = medians["docker buildx version"]
    load = os.getloadavg()[0]
    print(f"median of {args.runs} runs, alternating; load average {load:.1f} on {os.cpu_count()} cores")
    width = max(len(n) for n in medians)
    for name, value in medians.items():
        print(f"  {name:<{width}}  {value:6.3f} s  {value / floor:6.1f}x docker buildx version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
