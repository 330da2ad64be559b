#!/usr/bin/env python3
"""Run a buildkit image's own llama-server on a GPU host that has no Docker (docs/gpu.md).

Three steps, each a subcommand:

  extract  (on the Docker host) read an OCI archive (`docker save IMAGE -o x.tar`, or buildx's
           `type=oci` output), pick linux/amd64, apply its layers into a scratch root (whiteouts,
           opaque folders, links; path traversal refused) and write a bundle (tar.xz) of the
           image's /app, optionally its CUDA runtime (--with-cuda cudart|all), with a manifest of every file
           (sha256, size, layer digest) and the image's manifest digest. It is small enough to carry.
  model    (on the GPU host) write a deterministic llama GGUF with random weights, big enough to
           keep a GPU busy (default: about 574 MiB of Q8_0). Needs numpy and `gguf`: installed, or
           a gguf wheel in a folder of the repository (.whl/, .gpu/, ...; or --gguf-wheel),
           imported from its zip.
  workload (on the GPU host) the fork's own features on the bundle's server (scripts/gpu_workload.py): lossless
           speculative decoding, draft acceptance and speed, KV types against f16; `buildkit workload-check
           --result` judges its workload.json on the Docker host
  run      (on the GPU host) unpack the bundle and check it against its manifest, decide where each
           library comes from (the image; the driver always from the host; CUDA from the image or the
           host's pip wheels / /usr/local/cuda), print the table "library -> path -> origin", start
           the bundle's llama-server (-ngl 99, 127.0.0.1) with the model, wait for /health, print the
           log lines about the device, VMM and offload, the libraries really mapped, and with --bench
           run buildkit's bench protocol against it. Writes server.log and summary.json to --out.

Stdlib only (plus numpy/gguf for `model`); no docker-py, gitpython or pyelftools needed.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from buildkit.core.errors import BuildkitError  # noqa: E402

KEY_LINE = re.compile(
    r"ggml_cuda_init|Device \d+:|VMM|offload|CUDA\d* (model|KV|compute|RS) buffer|CUDA_Host|no kernel image|"
    r"CUDA\d+\s*:|NO_VMM|CUDA error|cuda.*error|ARCHS|system_info|^build:|load_backend|llama_model_load|model type|file type|"
    r"error|failed|abort", re.IGNORECASE)
DEFAULT_OUT = "gpu-run-out"


def say(msg: str) -> None:
    print(msg, flush=True)


# ----------------------------------------------------------------------------------------- extract

def cmd_extract(args) -> int:
    from buildkit.gpu.gpubundle import make_bundle

    manifest = make_bundle(Path(args.archive), Path(args.output), platform=args.platform, with_cuda=args.with_cuda,
                           extra=args.include, cuda_dir=args.cuda_dir, xz_preset=args.xz_preset,
                           scratch=Path(args.scratch) if args.scratch else None, log=say)
    files = manifest["files"]
    total = sum(f.get("size", 0) for f in files)
    size = Path(args.output).stat().st_size
    say(f"bundle {args.output}: {len(files)} entries, {total / 2**20:.1f} MiB of files, "
        f"{size / 2**20:.1f} MiB compressed")
    say(f"image manifest digest {manifest['image']['manifest_digest']}")
    for f in files:
        what = f"-> {f['target']}" if f["type"] == "symlink" else f"{f['size']:>12} {f['sha256'][:16]}"
        say(f"  {f['path']:<48} {what}  {(f.get('layer') or '-')[:19]}")
    if size > 60 * 2**20:
        say(f"warning: {size / 2**20:.1f} MiB is close to or over the 64 MiB that can be carried")
    return 0


# ----------------------------------------------------------------------------------------- model

def import_gguf(wheel: str | None):
    """gguf, installed or from a wheel (a zip on sys.path works for this pure-Python package)."""
    candidates = [wheel] if wheel else []
    for pattern in (".whl/gguf-*.whl", ".*/gguf-*.whl", "*/gguf-*.whl"):  # carried folders are often hidden
        candidates += sorted(glob.glob(str(REPO / pattern)))
    try:
        import gguf  # noqa: F401
        return gguf
    except ImportError:
        pass
    for path in candidates:
        if path and Path(path).is_file():
            sys.path.insert(0, str(Path(path).resolve()))
            import gguf
            return gguf
    raise BuildkitError("the gguf package is not installed and no gguf wheel was found (.whl/gguf-*.whl or "
                        "--gguf-wheel); download one as docs/gpu.md says")


def model_shape(args):
    sys.path.insert(0, str(REPO / "tests"))
    from tinymodel import Shape, layers_for_size, model_size

    shape = Shape(n_layer=args.layers or 1, n_embd=args.embd, n_head=args.heads, n_ff=args.ff, n_ctx=args.ctx)
    if not args.layers:
        n_layer = layers_for_size(int(args.size_mb * 2**20), shape, args.type)
        shape = Shape(n_layer, shape.n_embd, shape.n_head, shape.n_ff, shape.n_ctx)
    return shape, model_size(shape, args.type)


def cmd_model(args) -> int:
    shape, (params, nbytes) = model_shape(args)
    say(f"model: llama, {shape.n_layer} layers, n_embd {shape.n_embd}, {shape.n_head} heads, n_ff {shape.n_ff}, "
        f"{args.type}: {params / 1e6:.1f} M parameters, {nbytes / 2**20:.1f} MiB of tensors")
    if args.dry_run:
        return 0
    import_gguf(args.gguf_wheel)
    from tinymodel import write_llama_model

    started = time.monotonic()
    out = write_llama_model(Path(args.output), shape, seed=args.seed, file_type=args.type,
                            name=f"buildkit-gpu-llama-{params // 10**6}M-{args.type}")
    say(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB) in {time.monotonic() - started:.1f}s")
    return 0


# ----------------------------------------------------------------------------------------- run

def host_facts() -> dict:
    facts = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "hostname": platform.node(),
             "kernel": platform.release(), "python": platform.python_version()}
    try:
        facts["driver"] = Path("/proc/driver/nvidia/version").read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            proc = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total,compute_cap",
                                   "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
            facts["nvidia_smi"] = proc.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    return facts


def health(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return None


def key_lines(log: Path, limit: int = 80) -> list[str]:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    return [ln for ln in text.splitlines() if KEY_LINE.search(ln)][:limit]


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def bench(url: str, args, out: Path) -> dict | None:
    """buildkit's bench protocol: the CLI when click imports, else buildkit.benchmark directly."""
    try:
        import click  # noqa: F401
        use_cli = True
    except ImportError:
        use_cli = False
    opts = ["--runs", str(args.runs), "--max-tokens", str(args.max_tokens)]
    if use_cli:
        report_file = out / ".bench.json"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        argv = [sys.executable, "-m", "buildkit.cli", "bench", "--url", url, "--json", "--output", str(report_file)]
        say("$ " + " ".join(argv + opts))
        proc = subprocess.run(argv + opts, cwd=REPO, env=env, stdout=subprocess.DEVNULL, timeout=args.bench_timeout)
        if not report_file.is_file():
            say(f"bench: the CLI exited {proc.returncode} without a report")
            return None
        doc = json.loads(report_file.read_text())
        report_file.unlink()
    else:
        from buildkit.bench.benchmark import Protocol, run_bench

        say("bench: click is not installed here; running buildkit.bench.benchmark.run_bench directly")
        report = run_bench(url, Protocol(runs=args.runs, max_tokens=args.max_tokens).check(),
                           on_run=lambda r: say(f"run {r.run}: {r.tokens} tokens, {r.client_tps:.2f} tok/s"))
        doc = report.to_dict()
    from buildkit.bench.benchmark import BenchReport, format_report

    say(format_report(BenchReport.from_dict(doc)))
    return doc


def cmd_run(args) -> int:
    from buildkit.gpu import libplan
    from buildkit.gpu.gpubundle import open_bundle

    work = Path(args.work).resolve()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    summary: dict = {"host": host_facts(), "bundle": str(args.bundle), "outcome": None}

    def save() -> None:
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    folder, manifest = open_bundle(Path(args.bundle), work)
    folder = folder.resolve()
    image = manifest["image"]
    summary["image"] = image
    say(f"bundle {args.bundle}: verified {len(manifest['files'])} entries against manifest.json")
    say(f"image manifest digest {image['manifest_digest']}")
    for key in ("org.opencontainers.image.revision", "org.llama-buildkit.arch", "org.llama-buildkit.cuda-version",
                "org.llama-buildkit.flags"):
        if key in (image.get("labels") or {}):
            say(f"  {key}: {image['labels'][key]}")

    host = libplan.HostDirs()
    if args.driver_dir:
        host.driver = args.driver_dir + host.driver
    if args.cuda_dir:
        host.cuda = args.cuda_dir + host.cuda
    if args.system_dir:
        host.system = args.system_dir + host.system
    summary["host_dirs"] = {"driver": host.driver, "cuda": host.cuda, "system": host.system}
    choices = libplan.plan(folder, host, cuda_from=args.cuda_from)
    farm = libplan.link_farm(choices, work / "libs")
    checked = libplan.check(folder, farm, host)
    say("\nlibraries (ld.so's search with LD_LIBRARY_PATH=" + str(farm) + "):")
    say(libplan.table(checked, folder))
    summary["libraries_planned"] = libplan.as_dicts(choices)
    summary["libraries_resolved"] = libplan.as_dicts(checked)
    planned = {c.soname: (os.path.realpath(c.path) if c.path else None) for c in choices}
    differ = [c.soname for c in checked if planned.get(c.soname) != c.path]
    missing = [c.soname for c in checked if c.path is None]
    if differ:
        say(f"warning: ld.so resolves {', '.join(differ)} elsewhere than planned (an RPATH?)")
    if missing:
        summary["outcome"] = f"libraries not found: {', '.join(missing)}"
        save()
        say(f"error: {summary['outcome']}")
        return 2
    if args.dry_run:
        summary["outcome"] = "dry run: libraries resolved, server not started"
        save()
        return 0
    exe = libplan.roots_of(folder)[0]
    if args.once:
        # a one-shot run of the bundle's program (e.g. the example fork's --char-probe): its output and code
        argv = [str(exe), *args.server_args]
        say(f"\n$ LD_LIBRARY_PATH={farm} {' '.join(argv)}")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=args.startup_timeout,
                              env=dict(os.environ, LD_LIBRARY_PATH=str(farm)))
        say(done.stdout.rstrip() + ("\n" + done.stderr.rstrip() if done.stderr.strip() else ""))
        summary["once"] = {"argv": argv, "returncode": done.returncode, "stdout": done.stdout}
        summary["outcome"] = f"one-shot run exited with {done.returncode}"
        save()
        say(summary["outcome"])
        return done.returncode
    if not args.model:
        raise BuildkitError("run needs --model MODEL.gguf (or --dry-run)")

    url = f"http://127.0.0.1:{args.port}"
    argv = [str(exe), "-m", str(Path(args.model).resolve()), "-ngl", str(args.ngl), "--host", "127.0.0.1",
            "--port", str(args.port), *args.server_args]
    env = dict(os.environ, LD_LIBRARY_PATH=str(farm))
    env.pop("LLAMA_ARG_HOST", None)
    log = out / "server.log"
    # Images built with GGML_BACKEND_DL (every CPU level but `native`) dlopen their backends
    # (libggml-cpu-*.so, libggml-cuda.so) from GGML_BACKEND_DIR=/app/lib, then the executable's folder,
    # then the working directory. /app/lib does not exist here, so the server runs in the bundle's app/lib.
    backend_dir = folder / "app" / "lib" if (folder / "app" / "lib").is_dir() else folder / "app"
    summary["server_cwd"] = str(backend_dir)
    say(f"\n$ LD_LIBRARY_PATH={farm} {' '.join(argv)}")
    summary["server_argv"] = argv
    started = time.monotonic()
    with open(log, "wb") as log_fh:
        proc = subprocess.Popen(argv, stdout=log_fh, stderr=subprocess.STDOUT, cwd=backend_dir, env=env)
    try:
        ready = None
        while time.monotonic() - started < args.startup_timeout:
            if proc.poll() is not None:
                break
            if health(url) == 200:
                ready = time.monotonic() - started
                break
            time.sleep(0.5)
        if ready is None:
            code = proc.poll()
            if code is None:
                summary["outcome"] = f"no /health 200 within {args.startup_timeout:g}s"
            else:
                try:
                    sig = f" ({signal.Signals(-code).name})" if code < 0 else ""
                except ValueError:
                    sig = ""
                summary["outcome"] = f"llama-server exited with {code}{sig} before /health answered 200"
        else:
            summary["outcome"] = "healthy"
            summary["ready_s"] = round(ready, 2)
            say(f"/health 200 after {ready:.1f}s")
            mapped = libplan.loaded(proc.pid, folder, host)
            summary["libraries_mapped"] = libplan.as_dicts(mapped)
            say("\nshared objects mapped into llama-server (/proc/PID/maps):")
            say(libplan.table(mapped, folder))
            if args.bench:
                summary["bench"] = bench(url, args, out)
                if summary["bench"] is None or summary["bench"].get("error"):
                    summary["outcome"] = "healthy; bench failed"
    finally:
        stop(proc)
        summary["exit_code"] = proc.returncode
        summary["log_lines"] = key_lines(log)
        save()
    say("\nserver log, lines about the device, VMM and offload:")
    for line in summary["log_lines"]:
        say("  " + line)
    if summary["outcome"] != "healthy":
        tail = log.read_text(errors="replace").splitlines()[-15:] if log.is_file() else []
        say("\nlast lines of the log:\n" + "\n".join("  " + ln for ln in tail))
    say(f"\noutcome: {summary['outcome']} (log {log}, summary {out / 'summary.json'})")
    return 0 if summary["outcome"] == "healthy" else 3


def cmd_backend_ops(args) -> int:
    from buildkit.gpu import libplan
    from buildkit.gpu.backendrun import run_backend_ops
    from buildkit.gpu.gpubundle import open_bundle
    from buildkit.verify.backendverdict import known_failures

    settings = None
    if args.config:
        from buildkit.plan.config import load_config

        settings = load_config(Path(args.config), os.environ).options.gpu_check
    known = known_failures([*(settings.known_failures if settings else ()), *args.known])
    ops = tuple(args.op) or (settings.ops if settings else ())
    folder, manifest = open_bundle(Path(args.bundle), Path(args.work).resolve())
    say(f"bundle {args.bundle}: verified; image manifest digest {manifest['image']['manifest_digest']}")
    host = libplan.HostDirs()
    host.driver = args.driver_dir + host.driver
    host.cuda = args.cuda_dir + host.cuda
    check = run_backend_ops(folder.resolve(), host, Path(args.work).resolve(), Path(args.out).resolve(),
                            backend=args.backend, ops=ops, known=known, cuda_from=args.cuda_from,
                            timeout=args.timeout, log=say)
    say(check.line())
    return 0 if check.ok else 1


# ----------------------------------------------------------------------------------------- CLI

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu_run.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("extract", help="OCI archive -> bundle of /app (+ CUDA runtime) with a manifest (Docker host)",
                       description="Apply an OCI archive's layers (linux/amd64) into a scratch root and write a "
                                   "tar.xz bundle of /app, optionally the CUDA runtime, and manifest.json.")
    e.add_argument("archive", help="OCI archive (docker save IMAGE -o x.tar) or OCI layout folder")
    e.add_argument("-o", "--output", required=True, help="bundle to write (tar.xz); a .manifest.json goes beside it")
    e.add_argument("--platform", default="linux/amd64", help="image of the index to take (default: %(default)s)")
    e.add_argument("--with-cuda", choices=("none", "cudart", "all"), default="none",
                   help="also carry the image's CUDA runtime: cudart alone (<1 MB; cuBLAS then comes from the "
                        "host), or all (libcudart, libcublas, libcublasLt: hundreds of MB) (default: %(default)s)")
    e.add_argument("--cuda-dir", default="usr/local/cuda/lib64", help="where the image has them (default: %(default)s)")
    e.add_argument("--include", action="append", default=[], metavar="PATH",
                   help="also carry this image file, used only if the host lacks it (repeatable)")
    e.add_argument("--xz-preset", type=int, default=6, help="xz level 0-9 (default: %(default)s)")
    e.add_argument("--scratch", help="folder for the scratch root (default: the system's temporary folder)")
    e.set_defaults(func=cmd_extract)

    m = sub.add_parser("model", help="write a deterministic llama GGUF of a few hundred MB (GPU host)",
                       description="A llama model with random weights (fixed seed) and the tests' byte-level "
                                   "vocabulary; greedy decoding streams printable ASCII, so bench runs compare.")
    m.add_argument("output", help="GGUF file to write")
    m.add_argument("--type", choices=("q8_0", "f16", "f32"), default="q8_0", help="weights (default: %(default)s)")
    m.add_argument("--size-mb", type=float, default=600, help="target MiB of tensors; picks the layer count "
                                                               "(default: %(default)s)")
    m.add_argument("--layers", type=int, help="layer count (instead of --size-mb)")
    m.add_argument("--embd", type=int, default=2048, help="n_embd (default: %(default)s)")
    m.add_argument("--heads", type=int, default=16, help="attention heads (default: %(default)s)")
    m.add_argument("--ff", type=int, default=5632, help="n_ff (default: %(default)s)")
    m.add_argument("--ctx", type=int, default=8192, help="context length (default: %(default)s)")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--gguf-wheel", help="gguf wheel to import when gguf is not installed (default: .whl/gguf-*.whl)")
    m.add_argument("--dry-run", action="store_true", help="print the shape and size only")
    m.set_defaults(func=cmd_model)

    r = sub.add_parser("run", help="verify the bundle, resolve libraries, start llama-server on the GPU (GPU host)",
                       description="Run the bundle's llama-server on this host's driver; the CUDA runtime comes "
                                   "from the bundle if it carries one, else from the host. Arguments after -- "
                                   "go to llama-server.")
    r.add_argument("bundle", help="bundle (tar.xz) written by extract, or its unpacked folder")
    r.add_argument("--model", help="GGUF model (see the model subcommand)")
    r.add_argument("--port", type=int, default=8080)
    r.add_argument("--ngl", default="99", help="-ngl for llama-server (default: %(default)s)")
    r.add_argument("--cuda-from", choices=("auto", "image", "host"), default="auto",
                   help="auto: the image's if the bundle carries it, else the host's (default: %(default)s)")
    r.add_argument("--driver-dir", action="append", default=[], help="extra folder with libcuda.so.1 (searched first)")
    r.add_argument("--cuda-dir", action="append", default=[],
                   help="extra folder with the CUDA runtime (searched first)")
    r.add_argument("--system-dir", action="append", default=[],
                   help="extra folder searched before the system's (e.g. carried libgomp/libssl)")
    r.add_argument("--work", default="/tmp/gpu-run", help="where the bundle is unpacked (default: %(default)s)")
    r.add_argument("--out", default=DEFAULT_OUT, help="folder for server.log and summary.json (default: %(default)s)")
    r.add_argument("--startup-timeout", type=float, default=300.0)
    r.add_argument("--dry-run", action="store_true", help="verify and resolve only; do not start the server")
    r.add_argument("--once", action="store_true",
                   help="run the bundle's program once with the arguments after -- (no model, no server), "
                        "e.g. `-- --char-probe`, and exit with its code")
    r.add_argument("--bench", action="store_true", help="run buildkit's bench protocol against the server")
    r.add_argument("--runs", type=int, default=3, help="bench runs (default: %(default)s)")
    r.add_argument("--max-tokens", type=int, default=800, help="bench tokens per run (default: %(default)s)")
    r.add_argument("--bench-timeout", type=float, default=900.0, help="seconds for the whole bench")
    r.add_argument("server_args", nargs="*", help="llama-server arguments, after -- (e.g. -- -lv 4 for the "
                                                  "device, offload and buffer lines)")
    r.set_defaults(func=cmd_run)

    b = sub.add_parser("backend-ops", help="run the bundle's test-backend-ops (gpu-check) and judge it (GPU host)",
                       description="The fork's own test-backend-ops from a bundle of the image's tests target: "
                                   "`test -b BACKEND [-o OPS]`, output in OUT/backend-ops.log, the verdict in "
                                   "OUT/gpu-check.json and on the last line; exit 0 when it passes.")
    b.add_argument("bundle", help="bundle (tar.xz) of the tests target, or its unpacked folder")
    b.add_argument("-b", "--backend", default="CUDA0", help="backend under test (default: %(default)s)")
    b.add_argument("-o", "--op", action="append", default=[], help="only this op (repeatable)")
    b.add_argument("--known", action="append", default=[], metavar="'CASE: reason'",
                   help="a known failure (repeatable), besides the config's gpu_check.known_failures")
    b.add_argument("--config", help="buildkit.toml whose [gpu_check] to use (known_failures, ops)")
    b.add_argument("--cuda-from", choices=("auto", "image", "host"), default="auto")
    b.add_argument("--driver-dir", action="append", default=[], help="extra folder with libcuda.so.1")
    b.add_argument("--cuda-dir", action="append", default=[], help="extra folder with the CUDA runtime")
    b.add_argument("--work", default="/tmp/gpu-run", help="where the bundle is unpacked (default: %(default)s)")
    b.add_argument("--out", default=DEFAULT_OUT, help="folder for backend-ops.log and gpu-check.json")
    b.add_argument("--timeout", type=float, default=3600.0, help="seconds test-backend-ops may run")
    b.set_defaults(func=cmd_backend_ops)

    w = sub.add_parser("workload", add_help=False,
                       help="the fork's own features on the bundle's server: lossless, acceptance, kv (GPU host; "
                            "scripts/gpu_workload.py --help)")
    w.set_defaults(func=None)
    return p


def split_server_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(our arguments, llama-server's): everything after the first "--" goes to llama-server
    (argparse's own handling of "--" after a positional drops options such as -lv)."""
    if "--" not in argv:
        return argv, []
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["workload"]:  # its own parser: scripts/gpu_workload.py, the same checks as workload-check
        sys.path.insert(0, str(REPO / "scripts"))
        from gpu_workload import main as workload_main

        return workload_main(argv[1:])
    ours, server_args = split_server_args(argv)
    args = parser().parse_args(ours)
    if server_args:
        args.server_args = list(getattr(args, "server_args", [])) + server_args
    try:
        return args.func(args)
    except (BuildkitError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
