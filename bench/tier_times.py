"""The time of each CI step, as `.ci/run` runs them, against the budget (issue 23: `.ci/run` in 50 minutes).

    python bench/tier_times.py [--checkout DIR] [--targets setup example test-unit test-engine test-e2e]

Runs each make target in the checkout (a clean clone is what CI measures: `git clone . /tmp/ci`), one after
the other and on after a failure, with LLAMA_BUILDKIT_CI=1 as .ci/run sets it; each target's output goes
to <target>.log in --logs. Prints one line per target (exit code, seconds, share of the budget) and the
total. Run it in a foreground terminal (a background job inherits SIGINT ignored, which the interrupt
tests notice) on a machine doing nothing else: the figures are the machine's, not the code's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

BUDGET_S = 50 * 60
TARGETS = ["setup", "example", "test-unit", "test-engine", "test-e2e"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkout", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--targets", nargs="+", default=TARGETS)
    ap.add_argument("--logs", type=Path, default=Path("/tmp/buildkit-tier-times"))
    args = ap.parse_args(argv)
    args.logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, LLAMA_BUILDKIT_CI="1")
    total, failed = 0.0, 0
    print(f"{'target':<12} {'exit':>4} {'seconds':>8} {'budget':>7}")
    for target in args.targets:
        start = time.monotonic()
        with (args.logs / f"{target}.log").open("w") as log:
            code = subprocess.run(["make", target], cwd=args.checkout, env=env, stdout=log,
                                  stderr=subprocess.STDOUT).returncode
        took = time.monotonic() - start
        total += took
        failed += code != 0
        print(f"{target:<12} {code:>4} {took:>8.0f} {100 * took / BUDGET_S:>6.0f}%", flush=True)
    print(f"{'total':<12} {'':>4} {total:>8.0f} {100 * total / BUDGET_S:>6.0f}%  (budget {BUDGET_S // 60} min; "
          f"logs in {args.logs})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
