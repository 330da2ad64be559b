"""gpu-check on a GPU host without Docker (`scripts/gpu_run.py backend-ops`): the bundle's own
/app/test-backend-ops (a bundle made from an image's `tests` target) run with the same library plan as
its llama-server (libplan.py: the driver from the host, the rest from the image), its output kept as
backend-ops.log, judged (verify/backendverdict.py) and written as gpu-check.json beside it.

`buildkit gpu-check --log backend-ops.log IMAGE --attach-lock` on the Docker host judges the same log again
with the project's own gpu_check settings and records it in the lock.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from buildkit.core.errors import BuildkitError
from buildkit.gpu import libplan
from buildkit.verify.backendops import parse
from buildkit.verify.backendverdict import GpuCheck, Known, judge

PROGRAM = "test-backend-ops"


def run_backend_ops(folder: Path, host: libplan.HostDirs, work: Path, out: Path, *, backend: str = "CUDA0",
                    ops: Sequence[str] = (), known: Sequence[Known] = (), cuda_from: str = "auto",
                    timeout: float = 3600, log: Callable[[str], None] = print) -> GpuCheck:
    """Run the unpacked bundle's test-backend-ops (`test -b BACKEND [-o OPS]`) and judge it."""
    exe = libplan.roots_of(folder, PROGRAM)[0]
    if not exe.is_file():
        raise BuildkitError(f"{folder}: the bundle has no app/{PROGRAM}: make it from the image's tests target "
                            "(buildkit build --target tests, docs/gpu.md)")
    choices = libplan.plan(folder, host, cuda_from=cuda_from, program=PROGRAM)
    farm = libplan.link_farm(choices, work / "libs-tests")
    checked = libplan.check(folder, farm, host, program=PROGRAM)
    log(libplan.table(checked, folder))
    missing = [c.soname for c in checked if c.path is None]
    if missing:
        raise BuildkitError(f"{PROGRAM}: libraries not found: {', '.join(missing)}")
    argv = [str(exe), "test", "-b", backend] + (["-o", ",".join(ops)] if ops else [])
    cwd = folder / "app" / "lib" if (folder / "app" / "lib").is_dir() else folder / "app"  # GGML_BACKEND_DL's search
    log(f"$ LD_LIBRARY_PATH={farm} {' '.join(argv)}")
    out.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd, timeout=timeout,
                              env=dict(os.environ, LD_LIBRARY_PATH=str(farm)))
        text, code = done.stdout.decode(errors="replace"), done.returncode
    except subprocess.TimeoutExpired as exc:
        text, code = (exc.stdout or b"").decode(errors="replace") + f"\ntimed out after {timeout:.0f} s\n", 124
    # the process's fate goes with the log: `buildkit gpu-check --log` judges a crash at exit as this run does
    ending = "" if not text or text.endswith("\n") else "\n"
    (out / "backend-ops.log").write_text(f"{text}{ending}[gpu_run] {PROGRAM} exited with code {code}\n")
    check = judge(parse(text), backend, known, tuple(ops), exit_code=code)
    (out / "gpu-check.json").write_text(json.dumps(dict(check.to_dict(), exit_code=code), indent=2) + "\n")
    return check
