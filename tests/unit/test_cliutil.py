"""The shared project-on-disk helper writes the buildkit.toml that load_config reads back."""

from __future__ import annotations

from pathlib import Path

from buildkit.plan.config import load_config
from cliutil import project_toml, write_project


def test_write_project_is_read_back_by_load_config(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", source={"url": tmp_path / "fork", "commit": "ab" * 20},
                         image={"name": "buildkit-test/x", "version": "0.2.0"},
                         build={"arch": "cpu", "jobs": 2, "ccache": False, "cache_from": ['ref="a"{variant}']})
    assert (root / "patches").is_dir()
    cfg = load_config(root / "buildkit.toml", env={})
    assert cfg["source.url"] == str(tmp_path / "fork") and cfg["build.jobs"] == 2 and cfg["build.ccache"] is False
    assert cfg["build.cache_from"] == ['ref="a"{variant}'] and cfg["image.version"] == "0.2.0"


def test_tables_keep_their_order_and_patches_is_optional(tmp_path: Path) -> None:
    assert project_toml(image={"name": "a"}, matrix={"archs": ["cpu"]}) == (
        'schema_version = 1\n[image]\nname = "a"\n[matrix]\narchs = ["cpu"]\n')
    write_project(tmp_path, patches=False, image={"name": "a"})
    assert not (tmp_path / "patches").exists()
