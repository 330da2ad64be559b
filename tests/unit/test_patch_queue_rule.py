"""Which patch queue a build applies (plan/patchqueue.py, the one rule the pipeline, the nightly, its jobs and
reproduce share): the bundled queue holds the seed fork's fixes (docs/gpu-runs/2026-12-06-h100), so it goes only
with the seed's source."""

from __future__ import annotations

from buildkit.core.paths import bundled_patches_dir
from buildkit.plan.config import load_config
from buildkit.plan.patchqueue import patch_dir, queue_required


def test_no_config_and_the_seed_source_take_the_bundled_queue(tmp_path):
    cfg = load_config(None, env={}, cwd=tmp_path)
    assert patch_dir(cfg) == bundled_patches_dir() and not queue_required(cfg)
    assert sorted(p.name for p in bundled_patches_dir().glob("*.patch"))[:1] == [
        "0001-cuda-argmax-write-log-probs-only-where-dst-has-room.patch"]


def test_another_source_without_a_config_gets_no_seed_patches(tmp_path):
    cfg = load_config(None, env={}, overrides={"source.url": ("https://example.invalid/other-fork", "--source")},
                      cwd=tmp_path)
    assert patch_dir(cfg) != bundled_patches_dir() and not patch_dir(cfg).exists()
    assert not queue_required(cfg)  # the default folder, absent: an empty queue


def test_a_queue_asked_for_is_that_folder_and_required(tmp_path):
    cfg = load_config(None, env={}, overrides={"source.patch_dir": ("q", "--patches")}, cwd=tmp_path)
    assert patch_dir(cfg) == tmp_path / "q" and queue_required(cfg)
    (tmp_path / "buildkit.toml").write_text("schema_version = 1\n")
    cfg = load_config(tmp_path / "buildkit.toml", env={})
    assert patch_dir(cfg) == tmp_path / "patches" and not queue_required(cfg)
