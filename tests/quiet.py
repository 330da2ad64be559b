"""A quiet machine for the tests that compare speeds, while the tiers run their modules side by side.

The e2e tier runs the arm64 cross build and the seed's build under QEMU on one pytest-xdist worker
beside the real tree's tests on the other. The bench gate's test decides "slower or not" from tok/s
measured here, and a compile on the other core took one of its runs from 69 to 19 tok/s (CI, stop 31). So:

    with compiling("the arm64 cross build"):   # shared: compiles run together
    with measuring("the bench gate"):          # exclusive: waits until no compile holds the machine

One flock across the test processes (buildkit.core.filelock), released by the kernel if a process dies.
Never nest the two in one process: a process holding it shared and asking for it exclusive waits on itself.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from buildkit.core.filelock import file_lock

QUIET_LOCK = Path(tempfile.gettempdir()) / "llama-buildkit-test-images" / "quiet-machine.lock"


def _say(text: str) -> None:
    print(f"[quiet] {text}", file=sys.stderr, flush=True)


def compiling(what: str):
    """Hold the machine shared for a long compile: measurements wait until it ends."""
    return file_lock(QUIET_LOCK, shared=True, on_wait=lambda: _say(f"{what} waits for a measurement to end"))


def measuring(what: str):
    """Hold the machine alone for a measurement: it waits for every compile holding it to end."""
    return file_lock(QUIET_LOCK, on_wait=lambda: _say(f"{what} waits for the compiles beside it to end"))
