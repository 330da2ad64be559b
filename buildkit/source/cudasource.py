"""What a tree's CUDA sources hold that a cross build cannot compile faithfully (file reading, bounded).

nvcc's front ends (cudafe++, cicc) fold ``long double`` constants in the format of the machine nvcc
runs on (x87 80-bit on x86-64, IEEE quad on AArch64), whatever the target; no flag changes that. A
cross build therefore refuses a tree whose ``.cu``/``.cuh`` files use it (flows/pipeline.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from buildkit.core.boundedread import NotAFile, Outside, TooLarge, read_tree_file
from buildkit.core.errors import SourceError

CUDA_SUFFIXES = (".cu", ".cuh")
_LONG_DOUBLE = re.compile(r"\blong\s+double\b")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRINGS = re.compile(r'"(?:\\.|[^"\\\n])*"')


def _code(text: str) -> str:
    """text with comments and string literals blanked, line breaks kept (so line numbers hold)."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    return _COMMENTS.sub(blank, _STRINGS.sub(blank, text))


def long_double_uses(tree: Path) -> list[tuple[str, int]]:
    """(path relative to tree, line) of every use of long double in its CUDA sources, in path order."""
    uses: list[tuple[str, int]] = []
    for path in sorted(p for p in tree.rglob("*") if p.suffix in CUDA_SUFFIXES and p.is_file() and not p.is_symlink()):
        relative = path.relative_to(tree).as_posix()
        try:
            text = read_tree_file(tree, relative).decode("utf-8", errors="replace")
        except (NotAFile, TooLarge, Outside) as exc:  # a huge file, or one swapped under us: one line
            raise SourceError(str(exc)) from None
        except OSError:
            continue
        for m in _LONG_DOUBLE.finditer(_code(text)):
            uses.append((relative, text.count("\n", 0, m.start()) + 1))
    return uses
