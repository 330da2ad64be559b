"""verify does not disassemble a CPU backend it has seen before: its counts are kept by content (the library's
bytes, the objdump, the signatures), so a rebuild that left a backend unchanged costs no objdump run."""

import shutil
import subprocess
from pathlib import Path

import pytest

from buildkit.verify import cpucode

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("objdump")), reason="needs gcc and objdump")


def library(tmp_path: Path, body: str) -> Path:
    src = tmp_path / "lib.c"
    src.write_text(body)
    out = tmp_path / "libx.so"
    subprocess.run(["gcc", "-O2", "-msse4.2", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out


def counting_objdump(tmp_path: Path) -> tuple[str, Path]:
    """An objdump that logs each run, then runs the real one."""
    log = tmp_path / "runs.log"
    tool = tmp_path / "objdump"
    tool.write_text(f'#!/bin/sh\necho run >> {log}\nexec {shutil.which("objdump")} "$@"\n')
    tool.chmod(0o755)
    return str(tool), log


def runs(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_counts_are_read_back_for_the_same_bytes_and_counted_again_for_new_ones(tmp_path):
    objdump, log = counting_objdump(tmp_path)
    cache = tmp_path / "cache"
    lib = library(tmp_path, "int f(int *a, int n) { int s = 0; for (int i = 0; i < n; i++) s += a[i]; return s; }")
    first = cpucode.disassembly_counts(objdump, lib, cache=cache)
    assert runs(log) == 1 and first == cpucode.disassembly_counts(objdump, lib)  # the same counts as uncached
    assert runs(log) == 2
    again = cpucode.disassembly_counts(objdump, lib, cache=cache)
    assert again == first and runs(log) == 2  # read back: no objdump run
    other = library(tmp_path, "double g(double x) { return x * 3.0; }")
    cpucode.disassembly_counts(objdump, other, cache=cache)
    assert runs(log) == 3  # other bytes: counted


def test_a_damaged_cache_entry_is_counted_again(tmp_path):
    objdump, log = counting_objdump(tmp_path)
    cache = tmp_path / "cache"
    lib = library(tmp_path, "int f(void) { return 1; }")
    good = cpucode.disassembly_counts(objdump, lib, cache=cache)
    for entry in cache.iterdir():
        entry.write_text('{"avx": -1}')
    assert cpucode.disassembly_counts(objdump, lib, cache=cache) == good and runs(log) == 2
