"""Bench: a nightly on a fresh runner with the ccache restored from a registry, against a cold one.

A CI runner is new every night: its builder has an empty cache mount even when the layer cache
is restored, so every nightly compiles from nothing. `buildkit ccache export/import` carry the
cache mount's contents to the next runner. This bench plays three nights on fresh builders,
each a second Docker engine of its own (tests/second_engine.py: own data root, socket and bridge,
nothing cached, no network for RUN steps), with a CNCF registry on 127.0.0.1 holding the layer
cache (`type=registry,mode=max`) and the ccache images:

0. the main engine bakes commit A and exports every layer to the registry (a previous night);
1. night 1, fresh engine: commit B, `nightly` (cold ccache), then `ccache export --registry`;
2. night 2, fresh engine: commit C, `ccache import --registry`, then `nightly` (warm ccache);
3. control, fresh engine: commit C again, `nightly --force` without the import (cold ccache).

B and C each change one source file, as nights do. Nights 2 and 3 build the same commit on the
same kind of builder; they differ only in the restored ccache. Prints each night's nightly time
its build time (from the nightly's JSON), the compile step's time and ccache hits (from buildx's
log), and the ratios of night 3 to night 2; asserts nothing. On a busy machine the whole
nightly's time also carries the layer-cache import and the export, which ccache does not touch. Needs root (dockerd, a bridge), the engine and the local Debian base image
(`python -m tests.images debian`).

    python bench/ccache_nightly.py [--file src/llama.cpp]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from forkrepo import make_fork_repo  # noqa: E402
from images import ensure_debian_image  # noqa: E402
from registryserver import RegistryServer  # noqa: E402
from second_engine import SecondEngine  # noqa: E402


def commit_change(repo: Path, file: str, marker: str) -> str:
    path = repo / file
    path.write_text(path.read_text() + f"\n/* night {marker} */\nint night_{marker}(void) {{ return 1; }}\n")
    env = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="b@x", GIT_COMMITTER_NAME="bench",
               GIT_COMMITTER_EMAIL="b@x")
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", f"night {marker}"], check=True, env=env)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def buildkit(project: Path, env: dict[str, str], *args: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "buildkit.cli", *args], cwd=project, env=env, capture_output=True,
                          text=True)
    took = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"buildkit {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return took, proc


def compile_step(log: str) -> tuple[float | None, str]:
    """(seconds, ccache hits) of the compile step in buildx's plain output: the vertex whose RUN
    mounts the ccache, its `#N DONE 12.3s` line, and ccache's `Hits: h / n` line."""
    match = re.search(r"^#(\d+) \[[^\]]*\] RUN --mount=type=cache,id=llama-buildkit-ccache", log, re.M)
    if not match:
        return None, "compile step not run"
    vertex = match.group(1)
    done = re.search(rf"^#{vertex} DONE ([\d.]+)s", log, re.M)
    hits = re.search(rf"^#{vertex} [\d.]+\s+Hits:\s+(\d+)\s*/\s*(\d+)", log, re.M)
    return (float(done.group(1)) if done else None), (f"{hits.group(1)}/{hits.group(2)}" if hits else "?")


def night(name: str, tmp: Path, project: Path, env: dict[str, str], base: str, registry: str, *,
          import_ccache: bool, export_ccache: bool, force: bool = False) -> dict:
    with SecondEngine(tmp / f"engine-{name}") as engine:
        engine.load(base)
        runner = dict(env, **engine.env)
        figures: dict = {"night": name}
        if import_ccache:
            figures["import_seconds"], _ = buildkit(project, runner, "ccache", "import", "--registry",
                                                    f"{registry}/bench/ccache")
        summary = tmp / f"nightly-{name}.json"
        args = ["nightly", "--summary", str(summary), "--date", "20261201"] + (["--force"] if force else [])
        figures["nightly_seconds"], proc = buildkit(project, runner, *args)
        figures["compile_seconds"], figures["ccache_hits"] = compile_step(proc.stderr)
        data = json.loads(summary.read_text())
        built = [v for v in data["variants"] if v.get("build_seconds") is not None]
        figures["build_seconds"] = sum(v["build_seconds"] for v in built)
        figures["variants"] = [f"{v['variant']}:{v['status']}" for v in data["variants"]]
        if export_ccache:
            figures["export_seconds"], _ = buildkit(project, runner, "ccache", "export", "--registry",
                                                    f"{registry}/bench/ccache")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default="src/llama.cpp", help="source file each night changes")
    args = parser.parse_args()
    base = ensure_debian_image()
    with tempfile.TemporaryDirectory(prefix="bench-ccache-") as tmp_text, \
            RegistryServer(Path(tmp_text) / "registry") as reg:
        tmp = Path(tmp_text)
        fork = tmp / "fork"
        make_fork_repo(fork, ROOT / "examples" / "tiny-fork")
        project = tmp / "project"
        (project / "patches").mkdir(parents=True)
        layers = f"type=registry,ref={reg.host}/bench/layers:{{variant}}"
        (project / "buildkit.toml").write_text(f"""schema_version = 1
[source]
url = "{fork}"
branch = "master"
commit = ""
[image]
name = "{reg.host}/bench/tiny"
default_variant = "cpu"
[build]
arch = "cpu"
jobs = 2
progress = "plain"
cache_from = ["{layers}"]
[base]
os_image = "{base}"
[matrix]
archs = ["cpu"]
""")
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_BUILDKIT_")}
        env["LLAMA_BUILDKIT_CACHE_DIR"] = str(tmp / "cache")
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        print("0. main engine: bake commit A, export every layer to the registry", flush=True)
        buildkit(project, env, "bake", "--cache-to", f"{layers},mode=max", "--lock", str(tmp / "main.lock"))
        rows = []
        commit_change(fork, args.file, "b")
        print("1. night 1 (fresh engine, commit B, cold ccache, then export)", flush=True)
        rows.append(night("1-cold", tmp, project, env, base, reg.host, import_ccache=False, export_ccache=True))
        commit_change(fork, args.file, "c")
        print("2. night 2 (fresh engine, commit C, ccache imported from the registry)", flush=True)
        rows.append(night("2-warm", tmp, project, env, base, reg.host, import_ccache=True, export_ccache=False))
        print("3. control (fresh engine, commit C, cold ccache)", flush=True)
        rows.append(night("3-cold", tmp, project, env, base, reg.host, import_ccache=False, export_ccache=False,
                          force=True))
        for row in rows:
            print(json.dumps(row))
        warm, cold = rows[1], rows[2]
        warm_total = warm["nightly_seconds"] + warm.get("import_seconds", 0.0)
        print(f"compile step: cold {cold['compile_seconds']}s (ccache hits {cold['ccache_hits']}), warm "
              f"{warm['compile_seconds']}s (ccache hits {warm['ccache_hits']}), ratio cold/warm "
              f"{cold['compile_seconds'] / warm['compile_seconds']:.2f}")
        print(f"build (bake) step: cold {cold['build_seconds']:.1f}s, warm {warm['build_seconds']:.1f}s, "
              f"ratio cold/warm {cold['build_seconds'] / warm['build_seconds']:.2f}")
        print(f"nightly incl. ccache import: cold {cold['nightly_seconds']:.1f}s, warm {warm_total:.1f}s "
              f"(import {warm.get('import_seconds', 0.0):.1f}s), ratio cold/warm {cold['nightly_seconds'] / warm_total:.2f}")


if __name__ == "__main__":
    main()
