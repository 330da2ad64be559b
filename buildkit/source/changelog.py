"""The changelog of a nightly: the commits between the last built commit and the new head.

`git log old..new` in the source stage's *history* mirror (commits only, full history: see
source.py). The content mirror cannot answer it: it holds depth-1 snapshots, whose shallow
boundaries would cut the log short. The history mirror already has the new commit's ancestry
(fetched for the build number); the old commit is normally an ancestor of it. When it is not
(the branch was force-pushed) and the mirror lacks it, the changelog says so instead of failing
the night.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from buildkit.source.fetch import mirror_dir
from buildkit.source.gitcmd import Git


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

    def to_dict(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, "note": self.note,
                "commits": [{"sha": c.sha, "subject": c.subject} for c in self.commits]}


def history_dir(cache_dir: Path, url: str) -> Path:
    content = mirror_dir(cache_dir, url)
    return content.with_name(content.stem + ".history.git")


class _Done:
    """What a git command gave: its exit status, stdout and stderr."""

    def __init__(self, returncode: int, stdout: str = "", stderr: str = "") -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _git(git_dir: Path, *args: str) -> _Done:
    import git

    try:
        return _Done(0, Git(git_dir, timeout=120).run(*args, what=f"git {args[0]} in the history mirror"))
    except git.GitCommandError as err:
        return _Done(err.status if isinstance(err.status, int) else 1, "", getattr(err, "raw_stderr", ""))


def _has(git_dir: Path, sha: str) -> bool:
    # a keep-ref lookup first: the history mirror holds commits only
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
