"""What a tree's CUDA sources hold that a build cannot compile, found before it starts (file reading, bounded).

* nvcc's front ends (cudafe++, cicc) fold ``long double`` constants in the format of the machine nvcc
  runs on (x87 80-bit on x86-64, IEEE quad on AArch64), whatever the target; no flag changes that. A
  cross build therefore refuses a tree whose ``.cu``/``.cuh`` files use it (flows/pipeline.py).
* CCCL's iterators that ``<cub/cub.cuh>`` stopped including (ITERATORS_CUB_DROPPED): up to CCCL 3.2
  (CUDA 13.2) it included all of ``<cuda/iterator>``; CCCL 3.3 and later include only the counting,
  constant, transform, tabulate-output and zip iterators (CCCL 3.5, measured with ``nvcc -M``). A source
  that uses another one (``cuda::make_strided_iterator`` in llama.cpp's argsort.cu, ``cuda::discard_iterator``
  in top-k.cu, ggml-org/ggml#1624) and reaches neither ``<cuda/iterator>`` nor its own header stops nvcc
  with CUDA 13.3 and later, one file at a time: in the DFlash fork, argsort.cu 50 s into the compile, then
  (with argsort.cu fixed) top-k.cu 5 minutes in.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
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


def _cuda_sources(tree: Path) -> list[str]:
    """Paths relative to tree of its CUDA sources (regular files, no symlink), in path order."""
    return sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*")
                  if p.suffix in CUDA_SUFFIXES and p.is_file() and not p.is_symlink())


def _read(tree: Path, relative: str) -> str | None:
    try:
        return read_tree_file(tree, relative).decode("utf-8", errors="replace")
    except (NotAFile, TooLarge, Outside) as exc:  # a huge file, or one swapped under us: one line
        raise SourceError(str(exc)) from None
    except OSError:
        return None


def long_double_uses(tree: Path) -> list[tuple[str, int]]:
    """(path relative to tree, line) of every use of long double in its CUDA sources, in path order."""
    uses: list[tuple[str, int]] = []
    for relative in _cuda_sources(tree):
        text = _read(tree, relative)
        if text is None:
            continue
        for m in _LONG_DOUBLE.finditer(_code(text)):
            uses.append((relative, text.count("\n", 0, m.start()) + 1))
    return uses


# The first CUDA release whose CCCL's <cub/cub.cuh> no longer includes all of <cuda/iterator>; and the
# iterators it dropped, each with its header under cuda/__iterator/ (CCCL 3.5's <cuda/iterator> lists them).
CUB_DROPPED_ITERATORS_FROM = (13, 3)
ITERATORS_CUB_DROPPED = ("discard_iterator", "permutation_iterator", "shuffle_iterator", "strided_iterator",
                         "transform_input_output_iterator", "transform_output_iterator", "zip_function",
                         "zip_transform_iterator")
_DROPPED_USE = re.compile(r"\bcuda\s*::\s*(?:make_)?(" + "|".join(ITERATORS_CUB_DROPPED) + r")\b")
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
_HEADER_DIRS = ("", "ggml/include", "ggml/src", "include")  # where a quoted include may be found, besides its file's


def _reaches(tree: Path, relative: str, wanted: str) -> bool:
    """Whether the file, or a header of the tree it includes with quotes (each read once, however deep),
    includes <cuda/iterator>, <cuda/__iterator/WANTED.h> or any Thrust header (which may bring it)."""
    seen = {relative}
    pending = [relative]
    while pending:
        current = pending.pop()
        text = _read(tree, current)
        if text is None:
            continue
        for m in _INCLUDE.finditer(_COMMENTS.sub(" ", text)):
            kind, name = m.group(1), m.group(2).strip()
            if kind == "<":
                if name in ("cuda/iterator", f"cuda/__iterator/{wanted}.h") or name.startswith("thrust/"):
                    return True
                continue
            for base in (posixpath.dirname(current), *_HEADER_DIRS):
                candidate = posixpath.normpath(posixpath.join(base, name))
                if candidate.startswith("../") or candidate.startswith("/") or not (tree / candidate).is_file():
                    continue
                if candidate not in seen:
                    seen.add(candidate)
                    pending.append(candidate)
                break
    return False


def cub_dropped_iterator_uses(tree: Path) -> list[tuple[str, int, str]]:
    """(path, line, name) of each CUDA source's first use of an iterator that <cub/cub.cuh> no longer
    brings (CUB_DROPPED_ITERATORS_FROM on) where the file reaches neither <cuda/iterator> nor its header;
    in path order. A use in a branch of #if that a build leaves out counts too: the check reads no macro."""
    uses: list[tuple[str, int, str]] = []
    for relative in _cuda_sources(tree):
        text = _read(tree, relative)
        if text is None:
            continue
        for m in _DROPPED_USE.finditer(_code(text)):
            if not _reaches(tree, relative, m.group(1)):
                name = m.group(0).replace(" ", "")
                uses.append((relative, text.count("\n", 0, m.start()) + 1, name))
                break
    return uses


CUDA_DIR = "ggml/src/ggml-cuda"
INSTANCE_PREFIXES = ("fattn-tile", "fattn-mma", "mmq", "mmf")  # compiled whatever the flags


def cuda_object_count(tree: Path, cmake_args: Sequence[str]) -> int | None:
    """How many CUDA objects ggml-cuda's CMakeLists.txt compiles (the compile estimate's weight): every
    `*.cu` of ggml/src/ggml-cuda, the template instances it always globs, and the flash-attention vector
    instances: all of them with GGML_CUDA_FA_ALL_QUANTS, else the same-type K/V pairs and the TurboQuant
    ones (the fork's list; upstream's is its same-type pairs). None when the tree has no ggml-cuda."""
    folder = tree / CUDA_DIR
    if not folder.is_dir():
        return None
    all_quants = any(arg.split("=", 1)[0] == "-DGGML_CUDA_FA_ALL_QUANTS"
                     and arg.split("=", 1)[-1].upper() in ("ON", "1", "TRUE", "YES") for arg in cmake_args)

    def compiled(name: str) -> bool:
        if name.startswith(INSTANCE_PREFIXES):
            return True
        if not name.startswith("fattn-vec"):
            return False
        pair = name.removeprefix("fattn-vec-instance-").removesuffix(".cu")
        k_type, _, v_type = pair.partition("-")
        return all_quants or k_type == v_type or "turbo" in pair

    instances = folder / "template-instances"
    top = sum(1 for p in folder.glob("*.cu") if p.is_file())
    return top + (sum(1 for p in instances.glob("*.cu") if p.is_file() and compiled(p.name))
                  if instances.is_dir() else 0)
