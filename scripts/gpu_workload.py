#!/usr/bin/env python3
"""The fork's own features checked on llama-server where there is no Docker (issue 46): lossless speculative
decoding, draft acceptance and speed, KV-cache types against f16 (buildkit/bench/workload.py).

The server is a bundle's (scripts/gpu_run.py extract; its libraries resolved as `gpu_run.py run` does: the driver
from the host, the rest from the image) or any llama-server binary (--exe: a native build). Arguments after --
are the profile's llama-server arguments with the drafter (buildkit.toml's [profiles.dflash] args); the target
alone gets them without the draft-only ones. Writes OUT/workload.json (the report `buildkit workload-check
--result` judges and records) and OUT/servers/*.log (each server's output); prints one line per check.

  python3 scripts/gpu_workload.py --bundle .gpu/image.tar.xz --model T.gguf --model-draft D.gguf \\
      --label "medium f16" --checks lossless,acceptance --out $OUT/medium -- --spec-type dflash ...

Stdlib only (with buildkit's bench and gpu packages, which are).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from buildkit.bench.protocol import Protocol  # noqa: E402
from buildkit.bench.workload import Setup, draft_only, run_checks  # noqa: E402
from buildkit.core.errors import BuildkitError  # noqa: E402
from buildkit.gpu.localserver import LocalServers  # noqa: E402

CHECKS = ("lossless", "acceptance", "kv")


def say(msg: str) -> None:
    print(msg, flush=True)


def bundle_server(bundle: Path, work: Path, cuda_from: str) -> tuple[Path, dict[str, str], Path, dict]:
    """(llama-server, its environment, its working folder, the image's facts) of a bundle, libraries resolved."""
    from buildkit.gpu import libplan
    from buildkit.gpu.gpubundle import open_bundle

    folder, manifest = open_bundle(bundle, work)
    folder = folder.resolve()
    host = libplan.HostDirs()
    choices = libplan.plan(folder, host, cuda_from=cuda_from)
    farm = libplan.link_farm(choices, work / "libs")
    checked = libplan.check(folder, farm, host)
    missing = [c.soname for c in checked if c.path is None]
    if missing:
        raise BuildkitError(f"libraries not found for the bundle's llama-server: {', '.join(missing)}")
    cwd = folder / "app" / "lib" if (folder / "app" / "lib").is_dir() else folder / "app"  # GGML_BACKEND_DL
    return libplan.roots_of(folder)[0], {"LD_LIBRARY_PATH": str(farm)}, cwd, manifest["image"]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    server_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, server_args = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(prog="gpu_workload.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--bundle", help="bundle of the image (tar.xz, or its unpacked folder)")
    where.add_argument("--exe", help="a llama-server binary (a native build)")
    p.add_argument("--lib-dir", action="append", default=[], help="with --exe: LD_LIBRARY_PATH folders")
    p.add_argument("--model", required=True)
    p.add_argument("--model-draft")
    p.add_argument("--label", required=True, help="names this configuration in the report (e.g. 'medium f16')")
    p.add_argument("--checks", default="lossless,acceptance", help=f"comma-separated, of {', '.join(CHECKS)}")
    p.add_argument("--kv", default="", help="with kv: KV-cache types compared with f16 (e.g. turbo4,turbo3,q8_0)")
    p.add_argument("--n-predict", type=int, default=128, help="tokens per lossless prompt (default: %(default)s)")
    p.add_argument("--runs", type=int, default=3, help="bench runs for acceptance (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=800, help="bench tokens per run (default: %(default)s)")
    p.add_argument("--ngl", default="99", help="-ngl given to every server (default: %(default)s)")
    p.add_argument("--cuda-from", choices=("auto", "image", "host"), default="auto")
    p.add_argument("--work", default="/tmp/gpu-workload", help="where the bundle is unpacked")
    p.add_argument("--out", required=True, help="folder for workload.json and servers/")
    p.add_argument("--startup-timeout", type=float, default=300.0)
    args = p.parse_args(argv)
    checks = [c for c in args.checks.split(",") if c]
    if unknown := [c for c in checks if c not in CHECKS]:
        p.error(f"unknown check(s): {', '.join(unknown)}")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    image: dict = {}
    try:
        if args.bundle:
            exe, env, cwd, image = bundle_server(Path(args.bundle), Path(args.work).resolve(), args.cuda_from)
        else:
            exe, cwd = Path(args.exe).resolve(), None
            env = {"LD_LIBRARY_PATH": os.pathsep.join(args.lib_dir)} if args.lib_dir else {}
        servers = LocalServers(exe=exe, model=Path(args.model).resolve(),
                               draft=Path(args.model_draft).resolve() if args.model_draft else None,
                               logs=out / "servers", env=env, cwd=cwd, extra=("-ngl", args.ngl),
                               startup_timeout=args.startup_timeout)
        setup = Setup(args.label, tuple(server_args), draft_only(server_args))
        started = time.monotonic()
        report = run_checks(servers, [setup], checks=checks, kv_types=[k for k in args.kv.split(",") if k],
                            protocol=Protocol(runs=args.runs, max_tokens=args.max_tokens).check(),
                            n_predict=args.n_predict, log=say)
    except BuildkitError as exc:
        say(f"error: {exc}")
        (out / "workload.json").write_text(json.dumps({"label": args.label, "error": str(exc)}, indent=2) + "\n")
        return 2
    doc = {"label": args.label, "server": str(exe), "image": image, "spec_args": list(setup.spec_args),
           "base_args": list(setup.base_args), "seconds": round(time.monotonic() - started, 1),
           "servers_started": servers.started, "ready_s": [round(s, 2) for s in servers.ready_s], **report.to_dict()}
    (out / "workload.json").write_text(json.dumps(doc, indent=2) + "\n")
    say("summary:\n" + "\n".join(report.lines()))
    failed = report.errors or any(not v.passed for v in report.lossless)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
