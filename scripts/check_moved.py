"""Check that a README's facts survive a move: every heading, paragraph, list item and table row of
an old README.md (a git revision) must have each of its sentences (a table row: each cell; a heading: its
text) somewhere in today's README.md or docs/.

    python3 scripts/check_moved.py 1dc560f          # the README before it became a guide

Prints what it cannot find, one per line, and exits 1 when anything is missing. Whitespace, line
breaks, Markdown link targets and heading levels do not count, so text moved whole, re-wrapped or
given a shallower heading is found. Written for issue 40 (the README made a guide, the reference
moved to docs/reference/, the measurement logs to docs/bench-runs/).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def normal(text: str) -> str:
    text = re.sub(r"\]\([^)]*\)", "]", text)  # [label](target) -> [label]
    text = re.sub(r"^\s*(#+|[-*]|\d+\.|>)\s+", "", text)
    return re.sub(r"\s+", " ", text).strip()


def units(markdown: str) -> list[str]:
    """Headings, paragraphs, list items and table rows, each as one string."""
    found: list[str] = []
    current: list[str] = []
    in_code = False
    for line in markdown.splitlines() + [""]:
        if line.startswith("```"):
            in_code = not in_code
            continue
        starts = (not line.strip() or line.startswith("#") or line.startswith("|")
                  or re.match(r"^\s{0,2}([-*]|\d+\.)\s", line) is not None)
        if current and starts:
            found.append(" ".join(current))
            current = []
        if line.strip():
            current.append(line)
        if line.startswith(("#", "|")):
            found.append(line)
            current = []
    return [u for u in found if u.strip() and not re.match(r"^\|[\s|:-]+\|$", u.strip())]


def sentences(unit: str) -> list[str]:
    """The unit's sentences (a table row: its cells), each cut to 160 characters."""
    text = normal(unit)
    if unit.lstrip().startswith("|"):
        parts = [normal(c) for c in unit.strip().strip("|").split("|")]
    else:
        parts = re.split(r"(?<=[.:;])\s+(?=[A-Z`*(\[])", text)
    return [s[:160] for s in parts if len(s) > 3]


def today() -> str:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return "\n".join(normal(" ".join(p.read_text().split())) for p in pages)


def missing(old: str, corpus: str) -> list[str]:
    """Each sentence of the old text that today's pages do not hold, with the unit it came from."""
    lost = []
    for unit in units(old):
        gone = [s for s in sentences(unit) if s not in corpus]
        lost += [f"{s}   (in: {normal(unit)[:80]}...)" for s in gone]
    return lost


def main() -> int:
    rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
    shown = subprocess.run(["git", "show", f"{rev}:README.md"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode != 0:
        print(f"error: git show {rev}:README.md: {shown.stderr.strip()}", file=sys.stderr)
        return 1
    old = shown.stdout
    lost = missing(old, today())
    for k in lost:
        print(f"not found: {k}")
    total = sum(len(sentences(u)) for u in units(old))
    print(f"{total - len(lost)} of {total} sentences (table cells) of {rev}'s README found in README.md and docs/")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
