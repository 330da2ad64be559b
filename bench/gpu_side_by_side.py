#!/usr/bin/env python3
"""Issue 37 item 4: the image's llama-server against a native build of the same commit, side by side, on
the GPU host in ONE device call (docs/gpu-runs/2026-12-05-cpu-workload/PROCEDURE.md says how to call it).

1. build   the fork's tree (--source: a folder or a tar[.xz|.gz] of `git archive COMMIT`) natively with
           the fork's own recommended flags (its CLAUDE.md: -DGGML_CUDA=ON -DGGML_NATIVE=ON
           -DGGML_CUDA_FA=ON -DGGML_CUDA_FA_ALL_QUANTS=ON, CMAKE_CUDA_ARCHITECTURES for this GPU), only
           the llama-server target. A build folder that already has llama-server is reused (the device
           keeps ignored build outputs while it stays warm: a first call may --build-only).
2. image   the bundle written by `scripts/gpu_run.py extract` (the image's /app), its libraries resolved by
           buildkit.gpu.libplan exactly as `gpu_run.py run` does.
3. rounds  --rounds N: each round starts both servers one after the other with the same model and
           arguments (the order alternates: image first in even rounds, native first in odd ones), runs
           buildkit's bench protocol (buildkit.bench.client.run_bench) against each, and stops it; in two
           modes when --model-draft is given: the target alone (plain) and with the drafter (dflash).
4. ratio   image / native of the median generation (predicted_tps) and prompt (prompt_tps) tokens/s over
           every run of every round, per mode; the goal is >= --goal (0.98). Exit 0 when all meet it, 4 when
           not.

Writes side_by_side.json and both servers' logs to --out. Stdlib plus the carried repository (buildkit
imported from it, no pip install).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from buildkit.bench.client import run_bench  # noqa: E402
from buildkit.bench.protocol import Protocol  # noqa: E402
from buildkit.bench.workload import draft_only  # noqa: E402
from buildkit.gpu.localserver import LocalServers  # noqa: E402

# the fork's CLAUDE.md at 1c4788192 (its "## Build" block), CUDA architectures left to --cuda-arch
FORK_FLAGS = ("-DGGML_CUDA=ON", "-DGGML_NATIVE=ON", "-DGGML_CUDA_FA=ON", "-DGGML_CUDA_FA_ALL_QUANTS=ON")
COMMON_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF")


def say(msg: str) -> None:
    print(msg, flush=True)


def source_tree(source: Path, work: Path) -> Path:
    if source.is_dir():
        return source
    tree = work / "src"
    if not (tree / "CMakeLists.txt").is_file():
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        with tarfile.open(source) as tar:
            tar.extractall(tree, filter="data")
    return tree


def build_native(args, work: Path) -> Path:
    tree = source_tree(Path(args.source).resolve(), work)
    build = work / "build-native"
    exe = build / "bin" / "llama-server"
    if exe.is_file():
        say(f"native: reusing {exe}")
        return exe
    flags = [*FORK_FLAGS, f"-DCMAKE_CUDA_ARCHITECTURES={args.cuda_arch}", *COMMON_FLAGS, *args.cmake_flag]
    configure = ["cmake", "-S", str(tree), "-B", str(build), *(["-G", "Ninja"] if shutil.which("ninja") else []),
                 *flags]
    compile_ = ["cmake", "--build", str(build), "--target", "llama-server", "-j", str(args.jobs or os.cpu_count())]
    started = time.monotonic()
    for argv in (configure, compile_):
        say("$ " + " ".join(argv))
        with open(work / "native-build.log", "ab") as log:
            if subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
                tail = (work / "native-build.log").read_text(errors="replace").splitlines()[-30:]
                raise SystemExit("native build failed:\n" + "\n".join(tail))
    say(f"native: built in {time.monotonic() - started:.0f} s with {' '.join(flags)}")
    return exe


def image_server(args, work: Path) -> tuple[Path, dict[str, str], Path]:
    """(the bundle's llama-server, its environment, the folder it runs in), as gpu_run.py run resolves them."""
    from buildkit.gpu import libplan
    from buildkit.gpu.gpubundle import open_bundle

    folder, manifest = open_bundle(Path(args.bundle), work / "bundle")
    folder = folder.resolve()
    say(f"image: {manifest['image'].get('manifest_digest')} "
        f"flags {manifest['image'].get('labels', {}).get('org.llama-buildkit.flags', '?')}")
    host = libplan.HostDirs()
    host.cuda = list(getattr(args, "cuda_dir", None) or []) + host.cuda
    choices = libplan.plan(folder, host, cuda_from=args.cuda_from)
    missing = [c.soname for c in choices if c.path is None]
    if missing:
        raise SystemExit(f"image: libraries not found: {', '.join(missing)}")
    farm = libplan.link_farm(choices, work / "libs")
    cwd = folder / "app" / "lib" if (folder / "app" / "lib").is_dir() else folder / "app"
    return libplan.roots_of(folder)[0], {"LD_LIBRARY_PATH": str(farm)}, cwd


def median_of(docs: list[dict], key: str) -> float | None:
    values = [r[key] for d in docs for r in d.get("runs", []) if r.get(key)]
    return statistics.median(values) if values else None


def rounds(sides: dict[str, LocalServers], modes: dict[str, tuple[list[str], bool]], n_rounds: int,
           protocol: Protocol, goal: float) -> dict:
    """Alternating rounds (the order flips every round) of every mode on every side, the bench protocol against
    each server; the ratio image/native of the median generation and prompt tokens/s, per mode."""
    names = list(sides)
    reports: dict[str, dict[str, list[dict]]] = {m: {n: [] for n in names} for m in modes}
    for r in range(n_rounds):
        for mode, (server_args, draft) in modes.items():
            for name in (names if r % 2 == 0 else list(reversed(names))):
                with sides[name].serve(f"{name} {mode} round{r}", server_args, draft=draft) as url:
                    report = run_bench(url, protocol).to_dict()
                if report.get("error"):
                    raise SystemExit(f"{name} {mode}: bench failed: {report['error']}")
                reports[mode][name].append(report)
                runs = report.get("runs", [])
                say(f"[round {r}] {mode} {name}: " + ", ".join(f"{x.get('predicted_tps') or 0:.1f}" for x in runs)
                    + " gen tok/s")
    result: dict = {"rounds": n_rounds, "runs": protocol.runs, "max_tokens": protocol.max_tokens, "goal": goal,
                    "modes": {}, "reports": reports}
    ok = True
    for mode in modes:
        entry: dict = {"args": modes[mode][0], "draft": modes[mode][1]}
        for key, what in (("predicted_tps", "generation"), ("prompt_tps", "prompt")):
            img, nat = median_of(reports[mode]["image"], key), median_of(reports[mode]["native"], key)
            ratio = img / nat if img and nat else None
            entry[key] = {"image": img, "native": nat, "ratio": ratio}
            ok = ok and ratio is not None and ratio >= goal
            say(f"{mode} {what} tok/s median: image {img} native {nat} ratio "
                f"{ratio if ratio is None else round(ratio, 4)}")
        result["modes"][mode] = entry
    result["meets_goal"] = ok
    return result


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    server_args = argv[argv.index("--") + 1:] if "--" in argv else []
    ours = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", required=True, help="the fork's tree at the image's commit: folder or tar")
    p.add_argument("--bundle", help="bundle of the image (scripts/gpu_run.py extract); not needed with --build-only")
    p.add_argument("--model", help="GGUF model both servers load")
    p.add_argument("--model-draft", help="draft model: also compare the DFlash mode (the arguments after --, "
                                         "with the drafter) besides the target alone")
    p.add_argument("--work", default="/tmp/side-by-side", help="build and unpack folder (default: %(default)s)")
    p.add_argument("--out", default=os.environ.get("OUT", "side-by-side-out"))
    p.add_argument("--cuda-arch", default="90", help="CMAKE_CUDA_ARCHITECTURES (H200: 90)")
    p.add_argument("--cmake-flag", action="append", default=[], help="one more -DNAME=VALUE for the native build")
    p.add_argument("--jobs", type=int, default=0)
    p.add_argument("--cuda-from", choices=("auto", "image", "host"), default="auto")
    p.add_argument("--build-only", action="store_true", help="build the native server and stop")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runs", type=int, default=3, help="bench runs per server per round")
    p.add_argument("--max-tokens", type=int, default=400)
    p.add_argument("--startup-timeout", type=float, default=180.0)
    p.add_argument("--goal", type=float, default=0.98)
    args = p.parse_args(ours)
    args.server_args = server_args
    work, out = Path(args.work).resolve(), Path(args.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    native = build_native(args, work)
    if args.build_only:
        return 0
    if not (args.bundle and args.model):
        p.error("--bundle and --model are needed unless --build-only")
    image_exe, image_env, image_cwd = image_server(args, work)
    model = Path(args.model).resolve()
    draft = Path(args.model_draft).resolve() if args.model_draft else None
    common = {"model": model, "draft": draft, "extra": ("-ngl", "99"), "startup_timeout": args.startup_timeout}
    sides = {"image": LocalServers(exe=image_exe, env=image_env, cwd=image_cwd, logs=out / "logs", **common),
             "native": LocalServers(exe=native, cwd=native.parent, logs=out / "logs", **common)}
    modes = {"plain": (draft_only(server_args), False)}
    if draft is not None:
        modes["dflash"] = (server_args, True)
    result = rounds(sides, modes, args.rounds, Protocol(runs=args.runs, max_tokens=args.max_tokens).check(), args.goal)
    result["model"], result["model_draft"] = str(model), str(draft) if draft else None
    tmp = out / ".side_by_side.json.tmp"
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, out / "side_by_side.json")
    say(f"goal >= {args.goal}: {'met' if result['meets_goal'] else 'NOT met'} ({out / 'side_by_side.json'})")
    return 0 if result["meets_goal"] else 4


if __name__ == "__main__":
    sys.exit(main())
