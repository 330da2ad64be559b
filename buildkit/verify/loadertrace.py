"""What glibc's dynamic loader says a program loaded: its LD_DEBUG=files trace, parsed.

verify asks the loader, not the program, which CPU backend a llama.cpp binary chose. llama.cpp logs
"loaded CPU backend from ..." through common_log, whose worker thread prints asynchronously; a
program that exits right after (`--list-devices` calls exit(0)) loses the line when that thread has
not run yet, as on a machine whose cores are all busy (common/log.cpp leaks its logger on purpose and
says its last lines may be lost). The loader writes its trace to stderr itself, before it returns.

ggml opens every libggml-cpu-<variant>.so to ask its score, closes it, then opens the best one again
and keeps it: the backend in use is the one still mapped when the program exits.
"""

from __future__ import annotations

import re

TRACE_ENV = {"LD_DEBUG": "files"}

# "   1234:	file=/app/lib/libggml-cpu-zen4.so [0];  generating link map"
_LINK_MAP_RE = re.compile(r"^\s*\d+:\s+file=(?P<path>\S+) \[\d+\];\s+(?P<what>generating|destroying) link map",
                          re.M)
_TRACE_LINE_RE = re.compile(r"^\s*\d+:\s")


def mapped_at_exit(output: str, prefix: str) -> list[str] | None:
    """The files whose name starts with prefix that were still mapped when the program ended, in the
    order they were loaded; None when output holds no loader trace (not glibc, or LD_DEBUG ignored)."""
    mapped: dict[str, None] = {}
    traced = False
    for match in _LINK_MAP_RE.finditer(output):
        traced = True
        path = match.group("path")
        if not path.rsplit("/", 1)[-1].startswith(prefix):
            continue
        if match.group("what") == "generating":
            mapped[path] = None
        else:
            mapped.pop(path, None)
    return list(mapped) if traced else None


def program_lines(output: str) -> list[str]:
    """output without the loader's trace: what the program itself printed."""
    return [ln for ln in output.splitlines() if ln.strip() and not _TRACE_LINE_RE.match(ln)]
