"""The table of bench/cpu_gap_device.sh (issue 25 item 1): for each build, thread count and test (prompt,
generation), the median tokens/s over the rounds and the median of its ratio to `native` measured in the
same round (rounds alternate the order of the builds), with the lowest and highest ratio.

    python3 bench/cpu_gap_table.py bench.jsonl
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict


def load(path: str) -> dict[tuple[str, int, str, int], float]:
    rows = {}
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        test = "prompt" if r.get("n_prompt", 0) else "generation"
        ts = float(r["avg_ts"])
        if not (math.isfinite(ts) and 0 < ts < 1e7):  # llama-bench's figure is input: a sane rate only
            print(f"skipped an insane figure for {r['build']}: {ts}", file=sys.stderr)
            continue
        rows[(r["build"], int(r["n_threads"]), test, int(r["round"]))] = ts
    return rows


def main(path: str) -> int:
    rows = load(path)
    builds = list(dict.fromkeys(k[0] for k in rows))
    threads = sorted({k[1] for k in rows})
    rounds = sorted({k[3] for k in rows})
    cells = defaultdict(list)
    for (build, t, test, rnd), ts in rows.items():
        base = rows.get(("native", t, test, rnd))
        if base:
            cells[(build, t, test)].append((ts, ts / base))
    print(f"{'build':<10} {'threads':>7} {'prompt t/s':>11} {'x native':>8} {'range':>13} "
          f"{'gen t/s':>9} {'x native':>8} {'range':>13}")
    for build in builds:
        for t in threads:
            line = f"{build:<10} {t:>7}"
            for test in ("prompt", "generation"):
                got = cells.get((build, t, test), [])
                if not got:
                    line += f" {'-':>11} {'-':>8} {'-':>13}" if test == "prompt" else f" {'-':>9} {'-':>8} {'-':>13}"
                    continue
                ts = statistics.median(g[0] for g in got)
                ratios = [g[1] for g in got]
                width = 11 if test == "prompt" else 9
                line += f" {ts:>{width}.1f} {statistics.median(ratios):>8.3f} " \
                        f"{min(ratios):>6.3f}-{max(ratios):<6.3f}"
            print(line)
    print(f"median over {len(rounds)} rounds (odd rounds in one order of the builds, even in the reverse); "
          "ratio: to native in the same round")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
