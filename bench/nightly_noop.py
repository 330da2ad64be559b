"""Bench: how long a nightly takes when nothing moved, against its floor (one ls-remote + registry requests).

Sets up the example fork behind `git daemon` on 127.0.0.1, the CNCF registry on 127.0.0.1 and a
project whose matrix is the cpu image in three targets (server, full, light: three variants, cheap
to build); runs one real nightly so every nightly-<variant> tag exists; then times

* the no-op nightly in process (`run_nightly`: ls-remote, lock, one HEAD per variant),
* the same through the CLI (`python -m buildkit.cli nightly`, so Python start-up included),
* the floor: `git ls-remote` of the branch plus the registry's /v2/ probe and one HEAD per variant,
* and, for scale, the no-op without a lock (a fresh CI runner: labels read from the registry).

Prints figures (medians) and ratios; asserts nothing. Needs the engine and the local Debian base
image (`python -m tests.images debian`).

    python bench/nightly_noop.py [--runs 7]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from buildkit.plan.config import load_config  # noqa: E402
from buildkit.flows.nightly.run import ls_remote_head, nightly_tag, run_nightly  # noqa: E402
from buildkit.oci.registry import RegistryClient  # noqa: E402
from forkrepo import make_fork_repo  # noqa: E402
from gitserver import serve  # noqa: E402
from images import ensure_debian_image, remove_local_images  # noqa: E402
from registryserver import RegistryServer  # noqa: E402

TARGETS = ["server", "full", "light"]


def median_time(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    base = ensure_debian_image()
    with tempfile.TemporaryDirectory(prefix="bench-nightly-") as tmp:
        tmp_path = Path(tmp)
        fork = tmp_path / "serve" / "tiny-fork"
        make_fork_repo(fork, ROOT / "examples" / "tiny-fork")
        with serve(tmp_path / "serve") as daemon, RegistryServer(tmp_path / "registry") as registry:
            project = tmp_path / "project"
            (project / "patches").mkdir(parents=True)  # a patch_dir that is set must exist
            url = daemon.url_for(fork)
            (project / "buildkit.toml").write_text(f"""schema_version = 1
[source]
url = "{url}"
branch = "master"
commit = ""
patch_dir = "patches"
[image]
name = "{registry.host}/bench/nightly"
[build]
jobs = 2
progress = "plain"
[base]
os_image = "{base}"
[matrix]
archs = ["cpu"]
targets = {TARGETS!r}
""".replace("'", '"'))
            env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_BUILDKIT_", "GITHUB_"))}
            env["LLAMA_BUILDKIT_CACHE_DIR"] = str(tmp_path / "cache")
            os.environ.update(LLAMA_BUILDKIT_CACHE_DIR=env["LLAMA_BUILDKIT_CACHE_DIR"])
            cfg = load_config(project / "buildkit.toml", env=env)
            start = time.perf_counter()
            first = run_nightly(cfg, stream=io.StringIO())
            build_time = time.perf_counter() - start
            if not first.ok:
                print(f"the first nightly failed: {first.error or [v.error for v in first.variants]}")
                return 1
            keys = [v.variant for v in first.variants]
            print(f"first nightly (built and pushed {len(keys)} variants: {', '.join(keys)}): {build_time:.1f} s")

            def noop():
                summary = run_nightly(cfg, stream=io.StringIO())
                assert summary.up_to_date, summary.headline()

            nolock_cfg = load_config(project / "buildkit.toml", env=env,
                                     overrides={"lock.path": (str(tmp_path / "absent.lock"), "bench")})

            def noop_nolock():
                summary = run_nightly(nolock_cfg, stream=io.StringIO())
                assert summary.up_to_date and {v.known_from for v in summary.variants} == {"registry"}

            def floor():
                ls_remote_head(url, "master")
                with RegistryClient(registry.host) as client:
                    for key in keys:
                        client.head_manifest("bench/nightly", nightly_tag(key))

            def ls_remote_only():
                ls_remote_head(url, "master")

            def cli():
                proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "nightly"], cwd=project, env=env,
                                      capture_output=True, text=True)
                assert proc.returncode == 0 and "up to date" in proc.stdout, proc.stderr

            def python_start():
                subprocess.run([sys.executable, "-c", "import buildkit.cli"], cwd=project, env=env, check=True)

            noop()  # warm
            t_floor = median_time(floor, args.runs)
            t_ls = median_time(ls_remote_only, args.runs)
            t_noop = median_time(noop, args.runs)
            t_nolock = median_time(noop_nolock, args.runs)
            t_cli = median_time(cli, max(3, args.runs // 2))
            t_import = median_time(python_start, max(3, args.runs // 2))
            n = len(keys)
            print(f"floor: one git ls-remote + /v2/ probe + {n} HEAD requests: {t_floor * 1000:7.1f} ms "
                  f"(ls-remote alone {t_ls * 1000:.1f} ms)")
            print(f"no-op nightly, in process (lock + {n} HEADs):          {t_noop * 1000:7.1f} ms "
                  f"= {t_noop / t_floor:.2f} x the floor")
            print(f"no-op nightly without the lock (labels from registry):  {t_nolock * 1000:7.1f} ms "
                  f"= {t_nolock / t_floor:.2f} x the floor")
            print(f"no-op nightly through the CLI (new Python process):     {t_cli * 1000:7.1f} ms "
                  f"(of which `import buildkit.cli` {t_import * 1000:.1f} ms)")
            print(f"a nightly that builds ({n} cpu variants, warm cache): {build_time:.1f} s")
            remove_local_images(f"{registry.host}/bench/nightly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
