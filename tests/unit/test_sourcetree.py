"""source/sourcetree.py: the kept source folder holds exactly what export_tree writes, and a new commit
rewrites only the files that changed (an unchanged file keeps its mtime: the engine does not send it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from buildkit.source.fetch import export_tree, fetch_source
from buildkit.source.sourcetree import index_path, sync_tree

ENV = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t",
           GIT_COMMITTER_EMAIL="t@x", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=ENV).stdout.strip()


def commit(repo: Path, files: dict[str, str | None]) -> str:
    for name, text in files.items():
        path = repo / name
        if text is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "c")
    return git(repo, "rev-parse", "HEAD")


def snapshot(top: Path) -> dict[str, tuple]:
    """Every path under top: its kind, and a file's bytes and mode, a link's target, a folder's mode."""
    out: dict[str, tuple] = {}
    for path in sorted(top.rglob("*")):
        rel = path.relative_to(top).as_posix()
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path))
        elif path.is_file():
            out[rel] = ("file", path.read_bytes(), os.stat(path).st_mode & 0o7777)
        else:
            out[rel] = ("dir", os.stat(path).st_mode & 0o7777)
    return out


def fetched(repo: Path, sha: str, cache: Path):
    return fetch_source(str(repo), sha, sha, cache)


def test_a_new_commit_rewrites_only_what_changed_and_undoes_the_last_patches(tmp_path):
    repo, cache, dest = tmp_path / "repo", tmp_path / "cache", tmp_path / "ctx" / "src"
    repo.mkdir()
    git(repo, "init", "-q")
    first = commit(repo, {"a.c": "int a;\n", "sub/b.c": "int b;\n", "gone.c": "x\n", "run.sh": "#!/bin/sh\n"})
    (repo / "run.sh").chmod(0o755)
    (repo / "link").symlink_to("a.c")
    first = commit(repo, {})
    second = commit(repo, {"sub/b.c": "int b2;\n", "gone.c": None, "new/c.c": "int c;\n"})

    sync_tree(fetched(repo, first, cache), cache, dest)
    assert index_path(dest).is_file() and not (dest / ".git").exists()
    before = os.stat(dest / "a.c")
    # what a patch of the last build left: an edited file, an added one
    (dest / "sub" / "b.c").write_text("patched\n")
    (dest / "added.c").write_text("from a patch\n")
    (dest / "run.sh").write_text("patched too\n")

    info = fetched(repo, second, cache)
    sync_tree(info, cache, dest)
    export_tree(info, cache, tmp_path / "archive")
    assert snapshot(dest) == snapshot(tmp_path / "archive")
    after = os.stat(dest / "a.c")  # not written again (git writes a new file: another inode)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_tree_asking_git_archive_for_export_attributes_is_exported_as_export_tree_does(tmp_path):
    repo, cache, dest = tmp_path / "repo", tmp_path / "cache", tmp_path / "ctx" / "src"
    repo.mkdir()
    git(repo, "init", "-q")
    sha = commit(repo, {"a.c": "int a;\n", "tests/big.bin": "x\n", ".gitattributes": "tests export-ignore\n"})
    dest.mkdir(parents=True)
    (dest / "stale.c").write_text("left from before\n")
    info = fetched(repo, sha, cache)
    sync_tree(info, cache, dest)
    export_tree(info, cache, tmp_path / "archive")
    assert snapshot(dest) == snapshot(tmp_path / "archive") and not (dest / "stale.c").exists()
