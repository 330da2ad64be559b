"""Bench: tokens/s of a llama-server image serving the tiny test model (tests/tinymodel.py), with `buildkit bench`.

Writes the tiny GGUF model (llama architecture, random weights, 2 layers, n_embd 64) into a temporary
folder and runs the default protocol (3 runs, max_tokens 800, ignore_eos) against the image, started by
buildkit with docker-py and removed afterwards. The image is any llama-server image in the local
engine, e.g. the one the e2e tests build from the real llama.cpp source (buildkit-test/llama-server:cpu).

    python bench/tiny_server.py --image buildkit-test/llama-server:cpu [--runs 3] [--max-tokens 800] [--json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from tinymodel import write_tiny_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image", default="buildkit-test/llama-server:cpu")
    ap.add_argument("--runs", default="3")
    ap.add_argument("--max-tokens", default="800")
    ap.add_argument("--json", action="store_true")
    args, extra = ap.parse_known_args()
    with tempfile.TemporaryDirectory(prefix="bench-tiny-") as tmp:
        model = write_tiny_model(Path(tmp) / "tiny-llama.gguf")
        argv = [sys.executable, "-m", "buildkit.cli", "bench", "--image", args.image, "--model", str(model),
                "--runs", args.runs, "--max-tokens", args.max_tokens, *(["--json"] if args.json else []),
                "--", "--ctx-size", "4096", "--parallel", "1", *extra]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        return subprocess.call(argv, env=env)


if __name__ == "__main__":
    sys.exit(main())
