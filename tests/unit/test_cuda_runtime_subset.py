"""cudaroot.runtime_subset: the runtime libraries of a CUDA root, with their symlinks, and nothing else; the
root's files are left as they are (the image's times of them are the template's: cuda.Dockerfile.j2)."""

from __future__ import annotations

import os

from buildkit.source.cudaroot import runtime_subset


def _root(tmp_path):
    lib64 = tmp_path / "13.1-nocublas" / "lib64"
    lib64.mkdir(parents=True)
    (lib64 / "libcudart.so.13.1.80").write_bytes(b"\x7fELF runtime")
    (lib64 / "libcudart.so.13").symlink_to("libcudart.so.13.1.80")
    (lib64 / "libnvrtc.so.13").write_bytes(b"not a runtime library")
    return lib64.parent


def test_a_laid_out_roots_subset_holds_the_runtime_libraries_and_is_reused(tmp_path):
    root = _root(tmp_path)
    subset = runtime_subset(root)
    assert sorted(p.name for p in (subset / "lib64").iterdir()) == ["libcudart.so.13", "libcudart.so.13.1.80"]
    assert os.readlink(subset / "lib64" / "libcudart.so.13") == "libcudart.so.13.1.80"
    inode = os.lstat(subset / "lib64" / "libcudart.so.13.1.80").st_ino
    assert runtime_subset(root) == subset
    assert os.lstat(subset / "lib64" / "libcudart.so.13.1.80").st_ino == inode


def test_a_users_own_root_is_left_as_it_is(tmp_path):
    root = _root(tmp_path)
    before = os.lstat(root / "lib64" / "libcudart.so.13.1.80")
    subset = runtime_subset(root, tmp_path / "local.runtime")
    after = os.lstat(root / "lib64" / "libcudart.so.13.1.80")
    assert (after.st_mtime_ns, after.st_mode) == (before.st_mtime_ns, before.st_mode) and before.st_mtime != 0
    assert (subset / "lib64" / "libcudart.so.13").is_symlink()
