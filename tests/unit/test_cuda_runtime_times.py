"""cudaroot.runtime_subset: the runtime libraries of a root we laid out get one fixed time (0), whenever the
root was laid out; the image copies them with their times, and rewrite-timestamp lowers only later ones."""

from __future__ import annotations

import os
import time

from buildkit.source.cudaroot import runtime_subset


def _root(tmp_path):
    lib64 = tmp_path / "13.1-nocublas" / "lib64"
    lib64.mkdir(parents=True)
    (lib64 / "libcudart.so.13.1.80").write_bytes(b"\x7fELF runtime")
    (lib64 / "libcudart.so.13").symlink_to("libcudart.so.13.1.80")
    (lib64 / "libnvrtc.so.13").write_bytes(b"not a runtime library")
    return lib64.parent


def _times(folder):
    return {p.name: os.lstat(p).st_mtime for p in [*folder.iterdir(), folder]}


def test_a_laid_out_root_gives_its_runtime_libraries_time_zero_each_time(tmp_path):
    root = _root(tmp_path)
    subset = runtime_subset(root)
    assert sorted(p.name for p in (subset / "lib64").iterdir()) == ["libcudart.so.13", "libcudart.so.13.1.80"]
    assert set(_times(subset / "lib64").values()) == {0}
    # a subset reused from an older cache, its times from when it was made: fixed again
    now = time.time()
    os.utime(subset / "lib64" / "libcudart.so.13.1.80", (now, now))
    os.utime(subset / "lib64", (now, now))
    assert runtime_subset(root) == subset and set(_times(subset / "lib64").values()) == {0}


def test_a_users_own_root_keeps_its_times(tmp_path):
    root = _root(tmp_path)
    before = os.lstat(root / "lib64" / "libcudart.so.13.1.80").st_mtime
    subset = runtime_subset(root, tmp_path / "local.runtime")
    assert os.lstat(root / "lib64" / "libcudart.so.13.1.80").st_mtime == before != 0
    assert (subset / "lib64" / "libcudart.so.13").is_symlink()
