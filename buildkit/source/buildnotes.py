"""What a fork's own tree says about building and serving it: the CUDA CMake flags its build notes recommend
(issue 37: GGML_CUDA_FA_ALL_QUANTS per fork), and whether it is a DFlash fork (issue 50 item 4).

`buildkit init` reads the notes of the pinned commit (CLAUDE.md, README.md, docs/build.md: bounded,
regular files only) and proposes the `-DGGML_CUDA_*=VALUE` flags they give on a CMake line as
`build.cmake_args`, with a comment naming the file and line and, for a flag whose cost was measured
(FLAG_NOTES), that cost; `--no-fork-flags` leaves them out. The flags then reach the build the way
every build.cmake_args entry does: the Dockerfile's CMake line and the lock's build key. A fork whose
sources hold a DFlash drafter (a `dflash` file under src/ or common/) or whose notes run `--spec-type
dflash` gets the `dflash` runtime profile.

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


SOURCE_FOLDERS = ("src", "common")  # where a DFlash fork's drafter lives (src/models/dflash_draft.cpp)
_DFLASH_RUN = re.compile(r"--spec-type[= ]+dflash\b")


@dataclass(frozen=True)
class FlagNote:
    """What a proposed flag costs and gives, as measured: init says it beside the flag."""

    gives: str                 # what the flag does for the user
    compile_cost: str          # the measured compile cost
    measured_in: str           # the repository file that holds the measurement
    gpu_effect: str = ""       # its measured effect on the GPU ("" = not measured yet)

    def text(self) -> str:
        gpu = self.gpu_effect or "its effect on the GPU is not measured yet"
        return f"{self.gives}; {self.compile_cost}, {gpu} (buildkit's {self.measured_in})."


# The flags whose cost was measured. The GPU figure of FA_ALL_QUANTS goes into gpu_effect when it is measured.
FLAG_NOTES = {
    "GGML_CUDA_FA_ALL_QUANTS": FlagNote(
        gives="flash-attention kernels for every K/V cache type pair (48 more objects), needed only for mixed "
              "pairs such as -ctk q8_0 -ctv f16 or -ctk turbo4 -ctv f16; one type for K and V, TurboQuant's "
              "included, runs without it",
        compile_cost="+18% compile time (1,102 of 6,235 compile seconds of the fork's sm_90 server)",
        gpu_effect=("on an H100 without it mixed pairs ran their attention on the CPU at 52-91 tokens/s against "
                    "668-707 with it, and a TurboQuant K with an f16 or q8_0 V stopped the server in its warm-up; "
                    "one-type pairs ran at the same speed either way"),
        measured_in="docs/gpu-runs/2026-12-06-h100/README.md"),
}


@dataclass(frozen=True)
class Proposal:
    flags: tuple[str, ...] = ()  # -DNAME=VALUE, first mention of each name wins
    source: str = ""             # "CLAUDE.md line 12" (the first flag's)
    dflash: str = ""             # where the tree shows DFlash ("src/models/dflash_draft.cpp"); "" = not a DFlash fork

    def notes(self) -> tuple[str, ...]:
        """The measured cost of each proposed flag that has one."""
        return tuple(f"{flag}: {FLAG_NOTES[name].text()}" for flag in self.flags
                     if (name := flag[2:].split("=", 1)[0]) in FLAG_NOTES)


def proposed_flags(notes: dict[str, str], paths: tuple[str, ...] = ()) -> Proposal | None:
    """The CUDA flags on CMake lines of the notes ({path: text}, read in NOTE_FILES order), and whether the
    tree (paths: its files under SOURCE_FOLDERS) or the notes show DFlash; None when there is neither."""
    seen: dict[str, str] = {}
    first = ""
    dflash = next((p for p in paths if "dflash" in p.rsplit("/", 1)[-1].lower()), "")
    for path in NOTE_FILES:
        for number, line in _commands(notes.get(path, "")):
            if not dflash and _DFLASH_RUN.search(line):
                dflash = f"{path} line {number}"
            if "cmake" not in line.lower():
                continue
            for name, value in _FLAG.findall(line):
                if name in _OURS or name in seen:
                    continue
                seen[name] = f"-D{name}={value}"
                first = first or f"{path} line {number}"
    return Proposal(tuple(seen.values()), first, dflash) if seen or dflash else None


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


def source_paths(git: Git, commit: str) -> tuple[str, ...]:
    """The file paths under SOURCE_FOLDERS at commit (the trees a blob-filtered fetch brings)."""
    try:
        listing = git.run("ls-tree", "-r", "--name-only", commit, "--", *SOURCE_FOLDERS, what="ls-tree of the sources")
    except GitFailed:
        return ()
    return tuple(line for line in listing.splitlines() if line)


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
            return proposed_flags(read_notes(git, commit), source_paths(git, commit))
        except (GitFailed, SourceError):
            return None
