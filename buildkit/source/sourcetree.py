"""The source tree kept in place between builds: only the files that changed are written.

`export_tree` (fetch.py) writes a commit's whole tree into an empty folder, every file new. The
engine's context transfer compares each file's size and mtime with what it holds from the last
build of the same folder, so a new folder per build sends the whole tree again (174 MB for
llama.cpp). `sync_tree` keeps one folder and a git index beside it instead:

1. `git read-tree --reset -u <commit>` (what `git reset --hard` does, without a HEAD to move) brings
   the folder to the commit: git writes the files whose content differs from the index's, the ones
   whose size or mtime says they changed since (a patch of the last build edited them), and removes
   the ones the commit lacks, leaving every other file (and its mtime) alone;
2. `git clean` removes what the index does not list (files a patch added).

The result is the same files as export_tree writes (same bytes, modes and symlinks). A tree whose
.gitattributes ask `git archive` for more than a checkout does (export-ignore, export-subst) is
exported afresh with export_tree instead, as is any folder git cannot bring to the commit.
"""

from __future__ import annotations

from pathlib import Path

import git

from buildkit.core.errors import SourceError
from buildkit.core.treewalk import remove_tree
from buildkit.source.fetch import SourceInfo, export_tree, mirror_dir, tree_depth_checked
from buildkit.source.gitcmd import Git

_ARCHIVE_ONLY = ("export-ignore", "export-subst")  # attributes git archive applies and a checkout does not


def index_path(dest: Path) -> Path:
    """The git index recording what dest holds (beside it, so it is never part of the tree)."""
    return dest.with_name(dest.name + ".index")


def clear_around(tree: Path) -> None:
    """Make tree's folder (created if need be) hold nothing but tree and its index: what a build wrote
    beside a kept source tree (its Dockerfile, buildx's metadata, the OCI archive) goes."""
    keep = {tree.name, index_path(tree).name}
    try:
        tree.parent.mkdir(parents=True, exist_ok=True)
        for child in tree.parent.iterdir():
            if child.name not in keep:
                remove_tree(child)
    except OSError as exc:
        raise SourceError(f"cannot clear the build folder {tree.parent}: {exc.strerror or exc}") from None


def sync_tree(info: SourceInfo, cache_dir: Path, dest: Path) -> None:
    """Make dest hold the tree of info.commit, as export_tree does, writing only what differs from
    what dest held after the last sync_tree (see the module's docstring)."""
    dest, index = Path(dest), index_path(Path(dest))
    content = mirror_dir(cache_dir, info.url)
    work = Git(content, env={"GIT_INDEX_FILE": str(index), "GIT_WORK_TREE": str(dest)})
    try:
        if _archive_only_attributes(work, info.commit):
            _fresh(dest, index)
            export_tree(info, cache_dir, dest)
            return
        tree_depth_checked(Git(content), info.commit)  # before git writes a tree nested deeper than buildkit takes
        if not (index.is_file() and dest.is_dir()):
            _fresh(dest, index)
            dest.mkdir(parents=True)
        work.run("read-tree", "--reset", "-u", info.commit, what=f"checkout of {info.commit[:12]}")
        work.run("clean", "-ffdxq", what="clean")
    except git.GitCommandError:
        _fresh(dest, index)  # whatever git left behind is not trusted: the whole tree, afresh
        export_tree(info, cache_dir, dest)
    except OSError as exc:
        raise SourceError(f"cannot write the source of {info.commit[:12]} into {dest}: "
                          f"{exc.strerror or exc}") from None


def _archive_only_attributes(work: Git, commit: str) -> bool:
    args = ["grep", "-q", "-I"] + [a for attr in _ARCHIVE_ONLY for a in ("-e", attr)]
    return work.ok(*args, commit, "--", ".gitattributes", "**/.gitattributes", what="grep")


def _fresh(dest: Path, index: Path) -> None:
    remove_tree(dest)
    index.unlink(missing_ok=True)
