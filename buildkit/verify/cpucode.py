"""Which vector instructions a CPU backend library holds: its disassembly (binutils objdump),
counted per instruction-set class. The counting is pure (tested on text); running objdump is the edge.

Classes (x86-64): sse42 (SSSE3/SSE4 integer ops such as pshufb, pmaddubsw, ptest), avx (any ymm
register), avx2 (integer ops on ymm: vpmaddubsw, vpshufb, vpbroadcast*, ...; AVX1 has no 256-bit
integer ops), avx512 (any zmm register). arm64: neon (vector registers v0.16b ...), sve (z0.s ...),
sme (streaming mode switches and the ZA array: smstart, za0h.s ...), counted, required of no level: ggml's
armv9.2 variants compile with +sme, but only KleidiAI's kernels hold SME instructions.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from buildkit.core.errors import VerifyError
from buildkit.core.platforms import ARCHES
from buildkit.core.wholefile import write_whole

SIGNATURES: dict[str, re.Pattern[str]] = {
    "sse42": re.compile(r"\t(?:pshufb|pmaddubsw|pmulld|ptest|pmov[sz]x\w+|pblendvb|pcmpgtq|pminsd|pmaxsd)\s"),
    "avx": re.compile(r"%ymm"),
    "avx2": re.compile(r"\t(?:vpmaddubsw|vpmaddwd|vpshufb|vpbroadcast[bwdq]|vpermq|vpermd|vpaddd|vpaddw|"
                       r"vpsubb|vpsignb|vpabsb|vpsllw|vpsrlw|vpand|vpor|vpmulld|vpcmpeqb)\s[^\n]*%ymm"),
    "avx512": re.compile(r"%zmm"),
    "neon": re.compile(r"\bv\d+\.(?:16b|8b|8h|4h|4s|2s|2d)\b"),
    "sve": re.compile(r"\bz\d+\.[bhsd]\b"),
    "sme": re.compile(r"\t(?:smstart|smstop)\b|\bza(?:\d+[hv])?(?:\.[bhsdq])?\[|\bza\d+[hv]?\.[bhsdq]\b|\bzt0\b"),
}
# What a class promises: the class itself is required; the wider registers above it must be absent
# (code the CPU of that level could not run).
ABOVE = {"baseline": ("avx", "avx512"), "sse42": ("avx", "avx512"), "avx": ("avx512",), "avx2": ("avx512",),
         "avx512": (), "neon": (), "sve": (), "sme": ()}
REQUIRED = {"baseline": (), "sse42": ("sse42",), "avx": ("avx",), "avx2": ("avx2",),
            "avx512": ("avx512",), "neon": ("neon",), "sve": ("sve",), "sme": ("sve",)}


def count_lines(lines: Iterable[str]) -> dict[str, int]:
    """Instruction lines matching each class's signature."""
    counts = {name: 0 for name in SIGNATURES}
    for line in lines:
        if "\t" not in line:
            continue  # labels, section headers
        for name, pattern in SIGNATURES.items():
            if pattern.search(line):
                counts[name] += 1
    return counts


def problems(simd_class: str, counts: dict[str, int]) -> list[str]:
    """Why a library of `simd_class` does not hold the code of that class (empty: it does)."""
    out = [f"no {need} instructions" for need in REQUIRED[simd_class] if counts.get(need, 0) == 0]
    out += [f"{counts[above]} {above} instructions (above its level)" for above in ABOVE[simd_class]
            if counts.get(above, 0) > 0]
    return out


def summary(counts: dict[str, int], always: tuple[str, ...] = ()) -> str:
    """The classes found, with their counts; those of `always` even when none was found."""
    shown = [f"{name} {n}" for name, n in counts.items() if n or name in always]
    return ", ".join(shown) or "no vector instructions"


def _knows(objdump: str, target: str) -> bool:
    """The objdump lists the target among its architectures (`objdump -i`)."""
    try:
        info = subprocess.run([objdump, "-i"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return target in info


def find_objdump(platform_arch: str) -> str | None:
    """An objdump that can disassemble the platform's code: the plain one when it lists the platform (this
    machine's binutils, or binutils-multiarch), else the platform's cross binutils' (<triplet>-objdump)."""
    target = ARCHES.get(platform_arch)
    if target is None:
        return None
    for name in ("objdump", *(f"{p.triplet}-objdump" for p in ARCHES.values())):
        path = shutil.which(name)
        if path is None:
            continue
        if name == f"{target.triplet}-objdump" or (name == "objdump" and _knows(path, target.objdump_name)):
            return path
    return None


def _cache_key(objdump: str, library: Path) -> str:
    """The library's bytes, the objdump and the signatures: a rebuild that left a backend unchanged (a change
    outside ggml-cpu) finds its counts again; a new objdump or signature counts afresh."""
    digest = hashlib.sha256()
    with library.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    tool = Path(objdump).resolve()
    stat = tool.stat()
    digest.update(f"\0{tool}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    digest.update(repr(sorted((k, v.pattern) for k, v in SIGNATURES.items())).encode())
    return digest.hexdigest()


def disassembly_counts(objdump: str, library: Path, cache: Path | None = None) -> dict[str, int]:
    """objdump -d of the library's code sections, streamed and counted; with cache (a folder), counts of a
    library seen before are read back instead (keyed by content, _cache_key)."""
    if cache is not None:
        saved = cache / f"{_cache_key(objdump, library)}.json"
        try:
            counts = json.loads(saved.read_text())
            if isinstance(counts, dict) and set(counts) == set(SIGNATURES) and \
                    all(isinstance(v, int) and v >= 0 for v in counts.values()):
                return counts
        except (OSError, ValueError):
            pass
        counts = disassembly_counts(objdump, library)
        try:
            cache.mkdir(parents=True, exist_ok=True)
            write_whole(saved, json.dumps(counts))
        except OSError:
            pass  # a cache that cannot be written only costs the next run the objdump
        return counts
    proc = subprocess.Popen([objdump, "-d", "--no-show-raw-insn", str(library)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace")
    assert proc.stdout is not None
    counts = count_lines(proc.stdout)
    err = proc.stderr.read() if proc.stderr else ""
    if proc.wait() != 0:
        raise VerifyError(f"objdump -d {library.name} failed: {err.strip()[:200]}")
    return counts
