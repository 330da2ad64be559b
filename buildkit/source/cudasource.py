"""What a tree's CUDA sources hold that a build cannot compile, found before it starts (file reading, bounded).

* nvcc's front ends (cudafe++, cicc) fold ``long double`` constants in the format of the machine nvcc
  runs on (x87 80-bit on x86-64, IEEE quad on AArch64), whatever the target; no flag changes that. A
  cross build therefore refuses a tree whose ``.cu``/``.cuh`` files use it (flows/unit/pipeline.py).
* CCCL's iterators that ``<cub/cub.cuh>`` stopped including (ITERATORS_CUB_DROPPED): up to CCCL 3.2
  (CUDA 13.2) it included all of ``<cuda/iterator>``; CCCL 3.3 and later include only the counting,
  constant, transform, tabulate-output and zip iterators (CCCL 3.5, measured with ``nvcc -M``). A source
  that uses another one (``cuda::make_strided_iterator`` in llama.cpp's argsort.cu, ``cuda::discard_iterator``
  in top-k.cu, ggml-org/ggml#1624) and reaches neither ``<cuda/iterator>`` nor its own header stops nvcc
  with CUDA 13.3 and later, one file at a time: in the DFlash fork, argsort.cu 50 s into the compile, then
  (with argsort.cu fixed) top-k.cu 5 minutes in.

Reading is linear in a file's length and the tree's depth (issue 48): comments and literals are found by one
pass (an opener, then its end), not by expressions tried from every start; line numbers are counted once
through the file; each header's includes are read once for the whole tree; the tree is walked with a stack
(core/treewalk.py). A 1 MiB file of `/*x` with no `*/`, or of `"\\` on one line, is scanned in a fraction of
a second (bench/hostile_scan.py; the expressions before took over 120 s per 256 KiB).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from buildkit.core.boundedread import NotAFile, Outside, TooLarge, read_tree_file
from buildkit.core.errors import SourceError
from buildkit.core.treewalk import files_below

CUDA_SUFFIXES = (".cu", ".cuh")
_LONG_DOUBLE = re.compile(r"\blong\s+double\b")
# Scanning is linear in the file's length: the start of each comment or literal is found by one search,
# its end by one more (str.find, or a match that never backtracks: its two branches start differently).
# Regular expressions that matched a comment or literal whole from every start (/\*.*?\*/) were quadratic:
# a file of /*x repeated with no */ took over 120 s per 256 KiB (bench/hostile_scan.py).
_OPENERS = re.compile(r"//|/\*|[\"']")
# after the opening quote: to the closing one or the line's end (the loop unrolled: 10x faster in re)
_STRING_REST = re.compile(r'[^"\\\n]*(?:\\.[^"\\\n]*)*"?', re.S)
_CHAR_REST = re.compile(r"[^'\\\n]*(?:\\.[^'\\\n]*)*'?", re.S)
_RAW_DELIMITER = re.compile(r'[^ ()\\\t\v\f\n]{0,16}\(')  # R"delim( ... )delim"
_LITERAL_PREFIXES = ("L", "u", "U", "u8", "R", "LR", "uR", "UR", "u8R")
_NOT_NEWLINE = re.compile(r"[^\n]+")


def _word_before(text: str, pos: int) -> str:
    """The identifier characters just before pos (at most 3: enough for every literal prefix, u8R)."""
    start = pos
    while start > 0 and pos - start < 3 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    return text[start:pos]


def _literal_end(text: str, start: int) -> int:
    """Where the string or character literal whose quote is at start ends (its line's end when unclosed)."""
    quote, before = text[start], _word_before(text, start)
    if quote == '"' and before.endswith("R") and before in _LITERAL_PREFIXES:
        opening = _RAW_DELIMITER.match(text, start + 1)
        if opening:
            close = text.find(")" + opening.group(0)[:-1] + '"', opening.end())
            return len(text) if close < 0 else close + len(opening.group(0)) + 1
    rest = _STRING_REST if quote == '"' else _CHAR_REST
    match = rest.match(text, start + 1)
    assert match is not None  # both patterns match the empty string
    return match.end()


def _blanked(text: str, *, literals: bool = True) -> str:
    """text with comments (and string and character literals, unless literals=False) blanked, line breaks
    kept (so line numbers hold). A literal is always skipped whole: a // inside one starts no comment."""
    out: list[str] = []
    pos = 0
    while (m := _OPENERS.search(text, pos)) is not None:
        start, opener = m.start(), m.group(0)
        if opener == "//":
            end = text.find("\n", start)
            end = len(text) if end < 0 else end
        elif opener == "/*":
            end = text.find("*/", start + 2)
            end = len(text) if end < 0 else end + 2
        elif opener == "'" and start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_") \
                and _word_before(text, start) not in _LITERAL_PREFIXES:
            end = start + 1  # a digit separator (1'000'000), not a character literal
        else:
            end = _literal_end(text, start)
        out.append(text[pos:start])
        chunk = text[start:end]
        out.append(_NOT_NEWLINE.sub(lambda b: " " * len(b.group(0)), chunk)
                   if (literals or opener in ("//", "/*")) and end > start + 1 else chunk)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _lines(text: str, positions: Iterable[int]) -> Iterator[int]:
    """The 1-based line of each position (in increasing order), counted once through the text."""
    line, last = 1, 0
    for pos in positions:
        line += text.count("\n", last, pos)
        last = pos
        yield line


def _cuda_sources(tree: Path) -> list[str]:
    """Paths relative to tree of its CUDA sources (regular files, no symlink), in path order; a tree of any
    depth (core/treewalk.py: no recursion)."""
    return sorted(p.relative_to(tree).as_posix() for p in files_below(tree)
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
        starts = [m.start() for m in _LONG_DOUBLE.finditer(_blanked(text))]
        uses += [(relative, line) for line in _lines(text, starts)]
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


class _Includes:
    """The tree's include graph, each file read and scanned once however many sources reach it: the <...>
    names a file includes and the tree's files its "..." includes name (each resolved once)."""

    def __init__(self, tree: Path) -> None:
        self.tree = tree
        self._edges: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}
        self._reached: dict[str, frozenset[str]] = {}
        self._is_file: dict[str, bool] = {}

    def _file(self, candidate: str) -> bool:
        if candidate not in self._is_file:
            self._is_file[candidate] = (self.tree / candidate).is_file()
        return self._is_file[candidate]

    def _of(self, relative: str) -> tuple[frozenset[str], tuple[str, ...]]:
        if relative not in self._edges:
            angled: set[str] = set()
            quoted: list[str] = []
            text = _read(self.tree, relative)
            for m in _INCLUDE.finditer(_blanked(text, literals=False) if text is not None else ""):
                kind, name = m.group(1), m.group(2).strip()
                if kind == "<":
                    angled.add(name)
                    continue
                for base in (posixpath.dirname(relative), *_HEADER_DIRS):
                    candidate = posixpath.normpath(posixpath.join(base, name))
                    if candidate.startswith("../") or candidate.startswith("/") or not self._file(candidate):
                        continue
                    quoted.append(candidate)
                    break
            self._edges[relative] = (frozenset(angled), tuple(quoted))
        return self._edges[relative]

    def angled(self, relative: str) -> frozenset[str]:
        """Every <...> name the file includes, or a header of the tree it includes with quotes does (each
        header followed once, however deep: a stack, not recursion)."""
        if relative not in self._reached:
            seen, pending, found = {relative}, [relative], set[str]()
            while pending:
                angled, quoted = self._of(pending.pop())
                found |= angled
                for header in quoted:
                    if header not in seen:
                        seen.add(header)
                        pending.append(header)
            self._reached[relative] = frozenset(found)
        return self._reached[relative]


def _brings(angled: frozenset[str], wanted: str) -> bool:
    """Whether these includes bring the iterator: <cuda/iterator>, <cuda/__iterator/WANTED.h>, or any Thrust
    header (which may)."""
    return ("cuda/iterator" in angled or f"cuda/__iterator/{wanted}.h" in angled
            or any(name.startswith("thrust/") for name in angled))


def cub_dropped_iterator_uses(tree: Path) -> list[tuple[str, int, str]]:
    """(path, line, name) of each CUDA source's first use of an iterator that <cub/cub.cuh> no longer
    brings (CUB_DROPPED_ITERATORS_FROM on) where the file reaches neither <cuda/iterator> nor its header;
    in path order. A use in a branch of #if that a build leaves out counts too: the check reads no macro."""
    uses: list[tuple[str, int, str]] = []
    includes = _Includes(tree)
    for relative in _cuda_sources(tree):
        text = _read(tree, relative)
        if text is None:
            continue
        for m in _DROPPED_USE.finditer(_blanked(text)):
            if not _brings(includes.angled(relative), m.group(1)):
                line = next(_lines(text, [m.start()]))
                uses.append((relative, line, re.sub(r"\s+", "", m.group(0))))
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
