"""One type check for what buildkit reads (plan/schema.py JSON_TYPES): buildkit.toml, an image's inputs label
and buildkit.lock refuse the same wrong value the same way, in the same words."""

from __future__ import annotations

import json

import pytest

from buildkit.core.errors import ConfigError, InputsError, LockError
from buildkit.plan.config import read_config_file
from buildkit.plan.inputs import INPUTS_LABEL, from_labels
from buildkit.release.lock import check_entry

WRONG = [  # (a value of the wrong type, what each says it must be)
    (True, "an integer"),  # a bool is never an integer
    ("8", "an integer"),
    (1.5, "an integer"),
]


@pytest.mark.parametrize("value, words", WRONG)
def test_an_integer_is_checked_alike_in_config_label_and_lock(tmp_path, value, words):
    path = tmp_path / "buildkit.toml"
    path.write_text(f"schema_version = 1\n[build]\njobs = {json.dumps(value)}\n")
    with pytest.raises(ConfigError, match=f"build.jobs must be {words}, got"):
        read_config_file(path)
    labels = {INPUTS_LABEL: json.dumps({"format": value})}
    with pytest.raises(InputsError, match=f"key 'format' must be {words}, got"):
        from_labels(labels, "image")
    with pytest.raises(LockError, match=f"builds.source_date_epoch: expected {words}, got"):
        check_entry({"source_date_epoch": value}, "builds", complete=False)


@pytest.mark.parametrize("value", [["a", 1], "a", [["a"]]])
def test_a_list_of_strings_is_checked_alike(tmp_path, value):
    path = tmp_path / "buildkit.toml"
    path.write_text(f"schema_version = 1\n[build]\ncmake_args = {json.dumps(value)}\n")
    with pytest.raises(ConfigError, match="build.cmake_args must be a list of strings, got"):
        read_config_file(path)
    with pytest.raises(LockError, match="builds.patches: expected a list of strings, got"):
        check_entry({"patches": value}, "builds", complete=False)


def test_null_is_taken_only_where_the_annotation_allows_it():
    check_entry({"cuda_version": None, "bench": None}, "builds", complete=False)
    with pytest.raises(LockError, match="builds.commit: expected a string, got null"):
        check_entry({"commit": None}, "builds", complete=False)
    with pytest.raises(LockError, match="builds.cuda_version: expected a string or null, got a number"):
        check_entry({"cuda_version": 13}, "builds", complete=False)
