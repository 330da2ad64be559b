"""Turn a plain source tree into a small "fork" git repository, for tests.

``make_fork_repo`` commits the tree as an "upstream" commit, then adds one
"fork" commit on top, with fixed author/committer identities and dates so that
the same tree always gives the same commit SHAs. Used with the bundled
``examples/tiny-fork`` tree and with the real llama.cpp tree of
``tests/realsource.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

AUTHOR_NAME = "Buildkit Tests"
AUTHOR_EMAIL = "tests@buildkit.invalid"
UPSTREAM_DATE = "2024-01-01T00:00:00+00:00"
FORK_DATE = "2024-01-02T00:00:00+00:00"
# committer epochs of the two commits (what SourceInfo.commit_time should be)
UPSTREAM_EPOCH = 1704067200
FORK_EPOCH = 1704153600

DEFAULT_FORK_FILES: Mapping[str, str] = {
    "FORK.md": "# Fork\n\nThis tree carries one commit on top of upstream (made by tests/forkrepo.py).\n",
}


def _git_env(date: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        # never let the caller's repository or identity leak in
        if not k.startswith("GIT_")
    }
    env.update(
        GIT_AUTHOR_NAME=AUTHOR_NAME,
        GIT_AUTHOR_EMAIL=AUTHOR_EMAIL,
        GIT_AUTHOR_DATE=date,
        GIT_COMMITTER_NAME=AUTHOR_NAME,
        GIT_COMMITTER_EMAIL=AUTHOR_EMAIL,
        GIT_COMMITTER_DATE=date,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
    )
    return env


def _git(repo: Path, *args: str, date: str = UPSTREAM_DATE) -> str:
    proc = subprocess.run(
        [
            "git",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.autocrlf=false",
            "-c",
            "core.fileMode=true",
            *args,
        ],
        cwd=repo,
        env=_git_env(date),
        check=True,
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip()


def _copy_tree(source_tree: Path, dest: Path) -> None:
    # keep symlinks as symlinks; drop any .git (directory or submodule gitlink file)
    shutil.copytree(
        source_tree,
        dest,
        symlinks=True,
        ignore=shutil.ignore_patterns(".git"),
        dirs_exist_ok=True,
    )


def make_fork_repo(
    dest: Path,
    source_tree: Path,
    *,
    upstream_message: str = "upstream",
    fork_message: str = "fork: add FORK.md",
    fork_files: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """Create a git repository at *dest* (absent or empty) holding *source_tree*.

    Branch ``master`` gets two commits: *upstream_message* with the tree exactly
    as given (``.git`` entries left out, files matched by the tree's own
    ``.gitignore`` still included), then *fork_message*, which writes
    *fork_files* (relative path -> text; default: a ``FORK.md``). Returns
    ``(upstream_sha, fork_sha)``.
    """
    dest = Path(dest)
    source_tree = Path(source_tree)
    if not source_tree.is_dir():
        raise FileNotFoundError(f"source tree not found: {source_tree}")
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"destination is not empty: {dest}")
    dest.mkdir(parents=True, exist_ok=True)

    _git(dest, "init", "-q", "-b", "master")
    _copy_tree(source_tree, dest)
    _git(dest, "add", "-A", "-f")
    _git(dest, "commit", "-q", "--no-verify", "--allow-empty", "-m", upstream_message)
    upstream_sha = _git(dest, "rev-parse", "HEAD")

    files = DEFAULT_FORK_FILES if fork_files is None else fork_files
    for rel, text in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        _git(dest, "add", "-f", "--", rel, date=FORK_DATE)
    _git(
        dest,
        "commit",
        "-q",
        "--no-verify",
        "--allow-empty",
        "-m",
        fork_message,
        date=FORK_DATE,
    )
    fork_sha = _git(dest, "rev-parse", "HEAD")
    return upstream_sha, fork_sha
