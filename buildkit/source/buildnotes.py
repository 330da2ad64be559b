"""The CUDA CMake flags a fork's own build notes recommend (issue 37: GGML_CUDA_FA_ALL_QUANTS per fork).

`buildkit init` reads the notes of the pinned commit (CLAUDE.md, README.md, docs/build.md: bounded,
regular files only) and proposes the `-DGGML_CUDA_*=VALUE` flags they give on a CMake line as
`build.cmake_args`, with a comment naming the file and line. The flags then reach the build the way
every build.cmake_args entry does: the Dockerfile's CMake line and the lock's build key.

Flags buildkit sets itself (GGML_CUDA, GGML_CUDA_NO_VMM: build.no_vmm) are never proposed. Reading is
one shallow fetch of the commit without blobs over 256 KiB; a fork that cannot be read that way gets
no proposal (init still pins it).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from buildkit.core.errors import SourceError
from buildkit.core.urlcreds import UrlAuth
from buildkit.source.gitcmd import Git, GitFailed

NOTE_FILES = ("CLAUDE.md", "README.md", "docs/build.md")
MAX_NOTE_BYTES = 256 * 1024
_FLAG = re.compile(r"-D(GGML_CUDA_[A-Z0-9_]+)=([A-Za-z0-9_.;-]+)")
_OURS = {"GGML_CUDA_NO_VMM"}  # build.no_vmm decides it


@dataclass(frozen=True)
class Proposal:
    flags: tuple[str, ...]   # -DNAME=VALUE, first mention of each name wins
    source: str              # "CLAUDE.md line 12" (the first flag's)


def proposed_flags(notes: dict[str, str]) -> Proposal | None:
    """The CUDA flags on CMake lines of the notes ({path: text}, read in NOTE_FILES order)."""
    seen: dict[str, str] = {}
    first = ""
    for path in NOTE_FILES:
        for number, line in _commands(notes.get(path, "")):
            if "cmake" not in line.lower():
                continue
            for name, value in _FLAG.findall(line):
                if name in _OURS or name in seen:
                    continue
                seen[name] = f"-D{name}={value}"
                first = first or f"{path} line {number}"
    return Proposal(tuple(seen.values()), first) if seen else None


def _commands(text: str) -> list[tuple[int, str]]:
    """(first line number, line) with shell continuations (a trailing backslash) joined."""
    out: list[tuple[int, str]] = []
    start, parts = 0, []
    for number, line in enumerate(text.splitlines(), 1):
        start = start or number
        parts.append(line.rstrip())
        if line.rstrip().endswith("\\"):
            parts[-1] = parts[-1][:-1]
            continue
        out.append((start, " ".join(parts)))
        start, parts = 0, []
    if parts:
        out.append((start, " ".join(parts)))
    return out


def read_notes(git: Git, commit: str) -> dict[str, str]:
    """{path: text} of the note files present at commit in git's repository: regular files (mode
    100644/100755) of at most MAX_NOTE_BYTES, decoded as UTF-8 with replacement."""
    found: dict[str, str] = {}
    for path in NOTE_FILES:
        try:
            entry = git.run("ls-tree", "-l", commit, "--", path, what="ls-tree of the build notes")
        except GitFailed:
            continue
        meta, _, name = entry.partition("\t")
        fields = meta.split()
        if name != path or len(fields) != 4 or fields[0] not in ("100644", "100755") or fields[1] != "blob":
            continue  # absent, a symlink, a submodule or a folder
        if not fields[3].isdigit() or int(fields[3]) > MAX_NOTE_BYTES:
            continue
        try:
            found[path] = git.run("cat-file", "blob", fields[2], what="cat-file of a build note")
        except GitFailed:
            continue  # left out of the shallow fetch
    return found


def fork_proposal(url: str, commit: str, auth: UrlAuth | None = None, timeout: float = 120) -> Proposal | None:
    """Fetch commit (depth 1, blobs up to MAX_NOTE_BYTES) into a temporary repository and propose
    from its notes; None when the fork says nothing or cannot be fetched that way."""
    with tempfile.TemporaryDirectory(prefix="buildkit-notes-") as tmp:
        git_dir = Path(tmp) / "notes.git"
        git = Git(git_dir, auth=auth, timeout=timeout)
        try:
            git.run("init", "--bare", "--quiet", str(git_dir), what="init of a notes repository")
            git.run("fetch", "--quiet", "--no-tags", "--depth", "1", f"--filter=blob:limit={MAX_NOTE_BYTES}",
                    "--", url, commit, what="fetch of the fork's build notes")
            return proposed_flags(read_notes(git, commit))
        except (GitFailed, SourceError):
            return None
