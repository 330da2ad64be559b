"""The CPU backend variants a tree declares for GGML_CPU_ALL_VARIANTS (file reading, bounded).

llama.cpp lists them in ggml/src/CMakeLists.txt as ``ggml_add_cpu_backend_variant(<name> <FEATURE>...)``,
one list per platform and OS. What a tree declares decides what the build stage needs: the armv9.2 (SME)
variants of arm64 Linux want GCC 14 (plan/cpulevels.py), and a tree without them does not.
"""

from __future__ import annotations

import re
from pathlib import Path

from buildkit.core.boundedread import NotAFile, Outside, TooLarge, read_tree_file
from buildkit.core.errors import SourceError

VARIANTS_FILE = "ggml/src/CMakeLists.txt"
_CALL = re.compile(r"\bggml_add_cpu_backend_variant\(\s*([A-Za-z0-9_.]+)((?:\s+[A-Za-z0-9_]+)*)\s*\)")
_COMMENT = re.compile(r"#[^\n]*")


def declared_variants(tree: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(name, features) of every variant the tree's ggml declares, in file order; () when it declares none
    (an older ggml, or a fork that builds its CPU backend its own way)."""
    try:
        text = read_tree_file(tree, VARIANTS_FILE).decode("utf-8", errors="replace")
    except (NotAFile, TooLarge, Outside) as exc:  # a symlink to /dev/zero, a huge file: one line
        raise SourceError(str(exc)) from None
    except OSError:
        return ()
    return tuple((m.group(1), tuple(m.group(2).split())) for m in _CALL.finditer(_COMMENT.sub("", text)))
