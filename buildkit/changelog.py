"""The changelog of a nightly: the commits between the last built commit and the new head.

`git log old..new` in the source stage's *history* mirror (commits only, full history: see
source.py). The content mirror cannot answer it: it holds depth-1 snapshots, whose shallow
boundaries would cut the log short. The history mirror already has the new commit's ancestry
(fetched for the build number); the old commit is normally an ancestor of it. When it is not
(the branch was force-pushed) and the mirror lacks it, the changelog says so instead of failing
the night.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path


MAX_COMMITS = 500  # a changelog longer than this is cut (and says so)


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str


@dataclass(frozen=True)
class Changelog:
    old: str | None
    new: str
    commits: tuple[Commit, ...]  # newest first, as git log lists them
    note: str = ""  # why the list is empty or incomplete

    @property
    def subjects(self) -> list[str]:
        return [c.subject for c in self.commits]

    def to_dict(self) -> dict:
        return {"old": self.old, "new": self.new, "note": self.note,
                "commits": [{"sha": c.sha, "subject": c.subject} for c in self.commits]}


def history_dir(cache_dir: Path, url: str) -> Path:
    from .source import mirror_dir  # (GitPython is imported with it: only when a changelog is made)

    content = mirror_dir(cache_dir, url)
    return content.with_name(content.stem + ".history.git")


def _git(git_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_DIR=str(git_dir), GIT_TERMINAL_PROMPT="0", LC_ALL="C", LANGUAGE="C")
    return subprocess.run(["git", *args], env=env, capture_output=True, text=True, timeout=120)


def _has(git_dir: Path, sha: str) -> bool:
    # a keep-ref lookup first: in a partial clone, asking for a missing object may fetch it lazily
    return (_git(git_dir, "show-ref", "--verify", "--quiet", f"refs/buildkit/{sha}").returncode == 0
            or _git(git_dir, "cat-file", "-e", f"{sha}^{{commit}}").returncode == 0)


def changelog(cache_dir: Path, url: str, old: str | None, new: str, *, limit: int = MAX_COMMITS) -> Changelog:
    """Commits in new but not in old (`git log old..new`), newest first."""
    if not old:
        return Changelog(old, new, (), note="no earlier nightly: nothing to compare with")
    if old == new:
        return Changelog(old, new, ())
    git_dir = history_dir(cache_dir, url)
    if not git_dir.is_dir() or not _has(git_dir, new):
        return Changelog(old, new, (), note=f"{new[:12]} is not in the history mirror")
    if not _has(git_dir, old):
        return Changelog(old, new, (), note=f"the last built commit {old[:12]} is not in the branch's history "
                                            "(force-pushed?); no changelog")
    proc = _git(git_dir, "log", f"--max-count={limit + 1}", "--format=%H%x00%s", f"{old}..{new}")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["git log failed"])[-1]
        return Changelog(old, new, (), note=f"git log failed: {last}")
    commits = []
    for line in proc.stdout.splitlines():
        sha, _, subject = line.partition("\0")
        commits.append(Commit(sha, subject))
    note = ""
    if len(commits) > limit:
        commits, note = commits[:limit], f"only the newest {limit} commits are listed"
    is_ancestor = _git(git_dir, "merge-base", "--is-ancestor", old, new).returncode == 0
    if not is_ancestor:
        note = (note + "; " if note else "") + f"{old[:12]} is not an ancestor of {new[:12]} (the branch was rewritten)"
    return Changelog(old, new, tuple(commits), note=note)
