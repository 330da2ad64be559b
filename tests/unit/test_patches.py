"""patches.py against real `git apply`."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from buildkit.core.errors import PatchError
from buildkit.source.patches import apply_patches, load_patch_queue
from gitserver import commit_all, run_git


def _tree_hash(root: Path) -> str:
    """Paths, types, modes, contents and symlink targets of everything under root."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        digest.update(f"{path.relative_to(root)}\0{info.st_mode:o}\0".encode())
        if path.is_symlink():
            digest.update(os.readlink(path).encode())
        elif path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _write_tree(root: Path) -> None:
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.c").write_text("".join(f"line {i}\n" for i in range(1, 21)))
    (root / "src" / "b.c").write_text("int b;\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    os.symlink("src/a.c", root / "link")


class PatchMaker:
    """Makes patches with `git diff` in a scratch repository holding the base tree."""

    def __init__(self, scratch: Path, queue: Path) -> None:
        self.repo, self.queue = scratch, queue
        _write_tree(scratch)
        run_git(scratch, "init", "-q")
        commit_all(scratch, "base", 1_700_000_000)
        queue.mkdir()

    def make(self, name: str, change) -> Path:
        """Apply change(repo) on top of the previous patches, write the diff as queue/name."""
        change(self.repo)
        run_git(self.repo, "add", "-A")
        patch = self.queue / name
        patch.write_text(run_git(self.repo, "diff", "--cached", "HEAD") + "\n")
        commit_all(self.repo, name, 1_700_000_000)
        return patch


def _edit(rel: str, old: str, new: str):
    def change(repo: Path) -> None:
        path = repo / rel
        path.write_text(path.read_text().replace(old, new))
    return change


def _create(rel: str, text: str):
    return lambda repo: (repo / rel).write_text(text)


@pytest.fixture
def maker(tmp_path: Path) -> PatchMaker:
    return PatchMaker(tmp_path / "scratch", tmp_path / "queue")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    _write_tree(root)
    return root


def test_empty_queue(tmp_path: Path) -> None:
    none, missing = load_patch_queue(None), load_patch_queue(tmp_path / "nope")
    assert none.files == missing.files == ()
    assert none.sha256 == missing.sha256 == hashlib.sha256(b"buildkit-patch-queue-v1\n").hexdigest()
    apply_patches(none, tmp_path)  # nothing to do, nothing to fail


def test_name_order(tmp_path: Path) -> None:
    for name in ("0002-b.patch", "0010-c.patch", "0001-a.patch", "notes.txt"):
        (tmp_path / name).write_text(name)
    queue = load_patch_queue(tmp_path)
    assert [p.name for p in queue.files] == ["0001-a.patch", "0002-b.patch", "0010-c.patch"]
    assert queue.directory == tmp_path


def test_series_order(tmp_path: Path) -> None:
    for name in ("a.patch", "b.patch", "c.diff", "unlisted.patch"):
        (tmp_path / name).write_text(name)
    (tmp_path / "series").write_text("# our queue\nc.diff\n\n  b.patch  \n# a.patch later\na.patch\n")
    assert [p.name for p in load_patch_queue(tmp_path).files] == ["c.diff", "b.patch", "a.patch"]


def test_series_names_missing_patch(tmp_path: Path) -> None:
    (tmp_path / "a.patch").write_text("a")
    (tmp_path / "series").write_text("a.patch\ngone.patch\n")
    with pytest.raises(PatchError, match="line 2: patch gone.patch is not in"):
        load_patch_queue(tmp_path)


def test_hash_follows_content_names_and_order(tmp_path: Path) -> None:
    (tmp_path / "a.patch").write_text("one")
    (tmp_path / "b.patch").write_text("two")
    first = load_patch_queue(tmp_path).sha256
    assert load_patch_queue(tmp_path).sha256 == first
    (tmp_path / "b.patch").write_text("two!")
    changed = load_patch_queue(tmp_path).sha256
    assert changed != first
    (tmp_path / "series").write_text("b.patch\na.patch\n")
    assert load_patch_queue(tmp_path).sha256 not in (first, changed)
    (tmp_path / "series").unlink()
    (tmp_path / "b.patch").rename(tmp_path / "c.patch")
    assert load_patch_queue(tmp_path).sha256 not in (first, changed)


def test_apply_queue_cumulatively(maker: PatchMaker, tree: Path) -> None:
    maker.make("0001-edit.patch", _edit("src/a.c", "line 5\n", "line five\n"))
    maker.make("0002-same-file.patch", _edit("src/a.c", "line five\n", "line 5 again\n"))
    maker.make("0003-new-file.patch", _create("src/new.c", "int n;\n"))
    maker.make("0004-mode.patch", lambda repo: (repo / "src" / "b.c").chmod(0o755))
    apply_patches(load_patch_queue(maker.queue), tree)
    assert "line 5 again\n" in (tree / "src" / "a.c").read_text()
    assert (tree / "src" / "new.c").read_text() == "int n;\n"
    assert os.access(tree / "src" / "b.c", os.X_OK)
    shutil.rmtree(maker.repo / ".git")
    assert _tree_hash(tree) == _tree_hash(maker.repo)


def test_broken_patch_names_patch_and_file_and_leaves_tree_alone(maker: PatchMaker, tree: Path) -> None:
    maker.make("0001-ok.patch", _edit("src/a.c", "line 5\n", "line five\n"))
    maker.make("0002-ok.patch", _create("src/new.c", "int n;\n"))
    maker.make("0003-bad.patch", _edit("src/b.c", "int b;\n", "long b;\n"))
    maker.make("0004-ok.patch", _edit("src/a.c", "line 9\n", "line nine\n"))
    (tree / "src" / "b.c").write_text("int b; /* the fork moved on */\n")
    before = _tree_hash(tree)
    with pytest.raises(PatchError) as caught:
        apply_patches(load_patch_queue(maker.queue), tree)
    message = str(caught.value)
    assert "0003-bad.patch" in message and "src/b.c" in message and "\n" not in message
    assert _tree_hash(tree) == before


def test_patch_on_missing_file(maker: PatchMaker, tree: Path) -> None:
    maker.make("0001-gone.patch", _edit("src/b.c", "int b;\n", "long b;\n"))
    (tree / "src" / "b.c").unlink()
    before = _tree_hash(tree)
    with pytest.raises(PatchError, match=r"0001-gone.patch .*src/b.c \(No such file or directory\)"):
        apply_patches(load_patch_queue(maker.queue), tree)
    assert _tree_hash(tree) == before


def test_corrupt_patch(tmp_path: Path, tree: Path) -> None:
    queue = tmp_path / "queue"
    queue.mkdir()
    (queue / "0001-corrupt.patch").write_text("--- a/src/b.c\n+++ b/src/b.c\n@@ -1,3 +1,3 @@\n-int b;\n")
    before = _tree_hash(tree)
    with pytest.raises(PatchError, match=r"0001-corrupt.patch does not apply: it fails on the patch itself "
                                         r"\(corrupt patch at line 5\)"):
        apply_patches(load_patch_queue(queue), tree)
    assert _tree_hash(tree) == before


def test_tree_inside_an_enclosing_repository(maker: PatchMaker, tmp_path: Path) -> None:
    maker.make("0001-edit.patch", _edit("src/a.c", "line 5\n", "line five\n"))
    outer = tmp_path / "outer"
    tree = outer / "build" / "src"
    _write_tree(tree)
    run_git(outer, "init", "-q")
    (outer / ".gitattributes").write_text("* text eol=crlf\n")  # would rewrite the file if git used it
    apply_patches(load_patch_queue(maker.queue), tree)
    patched = (tree / "src" / "a.c").read_bytes()
    assert b"line five\n" in patched and b"\r" not in patched
    assert not (tree / "build").exists()


# ---------------------------------------------------------------- the folder, its entries, the hash (issue 22)

def test_a_patch_folder_that_was_named_must_exist(tmp_path: Path) -> None:
    assert load_patch_queue(tmp_path / "nope").files == ()  # the default source.patch_dir may be absent
    with pytest.raises(PatchError, match=r"the patch folder .*nope does not exist; point --patches") as caught:
        load_patch_queue(tmp_path / "nope", required=True)
    assert "\n" not in str(caught.value)


def test_a_missing_patch_folder_stops_a_build_before_any_work(tmp_path: Path) -> None:
    """--patches /no/such/dir: one line before the base images are looked up and anything is fetched."""
    from buildkit.engine.current import use_engine
    from buildkit.flows.unit.pipeline import prepare
    from buildkit.cli.unitspecs import unit_spec
    from buildkit.plan.config import load_config
    from fakeengine import FakeEngine

    cfg = load_config(None, env={}, overrides={
        "source.patch_dir": (str(tmp_path / "no-such-dir"), "--patches"), "build.arch": ("cpu", "--arch"),
        "base.os_image": ("127.0.0.1:1/no-such/image:1", "--os-image"), "source.url": (str(tmp_path / "fork"), "t"),
        "cache.dir": (str(tmp_path / "cache"), "t")})
    with use_engine(FakeEngine()) as engine, pytest.raises(PatchError, match="no-such-dir does not exist"):
        prepare(unit_spec(cfg, engine), engine, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("entry", ["../outside.patch", "{abs}", "sub/../../outside.patch", "link.patch"])
def test_a_series_entry_outside_the_folder_is_refused(tmp_path: Path, entry: str) -> None:
    queue = tmp_path / "queue"
    queue.mkdir()
    (tmp_path / "outside.patch").write_text("outside")
    os.symlink(tmp_path / "outside.patch", queue / "link.patch")
    (queue / "series").write_text(entry.format(abs=tmp_path / "outside.patch") + "\n")
    with pytest.raises(PatchError, match=r"series, line 1: patch .* is outside the patch folder") as caught:
        load_patch_queue(queue)
    assert "\n" not in str(caught.value)


def test_a_patch_symlink_to_outside_the_folder_is_refused(tmp_path: Path) -> None:
    queue = tmp_path / "queue"
    queue.mkdir()
    (tmp_path / "outside.patch").write_text("outside")
    os.symlink(tmp_path / "outside.patch", queue / "0001-link.patch")
    with pytest.raises(PatchError, match="0001-link.patch is outside the patch folder"):
        load_patch_queue(queue)


def test_a_symlink_inside_the_folder_is_a_patch(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "real.patch").write_text("real")
    os.symlink("kept/real.patch", tmp_path / "0001-link.patch")
    queue = load_patch_queue(tmp_path)
    assert queue.names == ("0001-link.patch",) and queue.files == (tmp_path / "0001-link.patch",)


@pytest.mark.parametrize("listed", [False, True])
def test_a_dangling_patch_is_an_error(tmp_path: Path, listed: bool) -> None:
    (tmp_path / "0001-a.patch").write_text("a")
    os.symlink("gone/0002-b.patch", tmp_path / "0002-b.patch")
    if listed:
        (tmp_path / "series").write_text("0001-a.patch\n0002-b.patch\n")
    with pytest.raises(PatchError, match=r"patch 0002-b.patch is a symlink to gone/0002-b.patch, which does not "
                                         r"exist") as caught:
        load_patch_queue(tmp_path)
    assert "\n" not in str(caught.value)


def test_a_series_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "series").write_bytes(b"0001-\xff.patch\n")
    with pytest.raises(PatchError, match=r"series: not UTF-8 text \(byte 5\)"):
        load_patch_queue(tmp_path)


def test_hash_covers_the_path_relative_to_the_folder(tmp_path: Path) -> None:
    """Two queues of one patch each, same bytes and base name, in other subfolders: other hashes. A flat
    folder hashes as before (the relative path of a flat patch is its name): pinned."""
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "fix.patch").write_text("same bytes")
    (tmp_path / "series").write_text("a/fix.patch\n")
    first = load_patch_queue(tmp_path)
    (tmp_path / "series").write_text("b/fix.patch\n")
    second = load_patch_queue(tmp_path)
    assert first.names == ("a/fix.patch",) and second.names == ("b/fix.patch",)
    assert first.sha256 != second.sha256
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "0001-fix.patch").write_bytes(b"same bytes")
    expected = hashlib.sha256(b"buildkit-patch-queue-v1\n0001-fix.patch\x0010\x00same bytes").hexdigest()
    assert load_patch_queue(flat).sha256 == expected
