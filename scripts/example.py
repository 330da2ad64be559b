"""The main job on the bundled example fork, with nothing pulled from a registry (`make example`).

1. Makes the local Debian base image with debootstrap (once, about 2 minutes).
2. Commits examples/tiny-fork as an "upstream" plus one fork commit, in the cache folder.
3. Runs `buildkit build --arch sm_120` on it with the PyPI-wheel CUDA provider: fetch the pinned
   commit, apply patches, render, buildx, verify (cuobjdump shows sm_120a only), lock.
4. Runs the image's `llama-server --version`.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from buildkit.core.paths import cache_dir  # noqa: E402
from forkrepo import make_fork_repo  # noqa: E402
from images import ensure_debian_image  # noqa: E402


def main() -> int:
    base = ensure_debian_image()
    work = cache_dir() / "example"
    repo = work / "tiny-fork"
    if repo.exists():
        subprocess.run(["rm", "-rf", str(repo)], check=True)
    work.mkdir(parents=True, exist_ok=True)
    _, commit = make_fork_repo(repo, ROOT / "examples" / "tiny-fork")
    patches = work / "patches"
    patches.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "buildkit.cli", "build", "--arch", "sm_120", "--provider", "wheels",
            "--os-image", base, "--source", str(repo), "--commit", commit, "--image", "tiny-fork",
            "--set", "base.cublas=false", "--lock", str(work / "buildkit.lock"),
            # the preflight's default disk figure is for llama.cpp's whole tree (16 GB); the example fork's build,
            # the CUDA wheels included, took about 3 GB here
            "--set", "build.min_free_gb=4",
            "--patches", str(patches)]  # the example fork's own (empty) queue: patches/ is the seed fork's
    print("+ buildkit " + shlex.join(argv[3:]), flush=True)
    proc = subprocess.run(argv, cwd=ROOT)
    if proc.returncode != 0:
        return proc.returncode
    image = "tiny-fork:cuda13.1-sm120"
    print(f"+ docker run --rm {image} --version", flush=True)
    subprocess.run(["docker", "run", "--rm", image, "--version"], check=False)
    print(f"lock written to {work / 'buildkit.lock'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
