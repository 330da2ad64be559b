"""plan/schema.py: the one checker of buildkit.toml's tables, for the settings and the profiles alike."""

from __future__ import annotations

import pytest

from buildkit.core.errors import ConfigError
from buildkit.plan.config import KEY_BY_NAME, read_config_file, read_document
from buildkit.plan.profiles import PROFILE_KEYS, read_profiles
from buildkit.plan.schema import Field, check_table, check_value

FIELDS = {f.name: f for f in (
    Field("count", int, "a count", rule=lambda n: None if n >= 0 else f"must not be negative, got {n}"),
    Field("mode", str, "a mode", choices=("a", "b")),
    Field("names", list, "names"),
    Field("on", bool, "a switch"),
)}


@pytest.mark.parametrize("table,message", [
    ({"cont": 1}, "here: unknown key 'cont' (did you mean 'count'?)"),
    ({"zzz": 1}, "here: unknown key 'zzz'"),
    ({"count": True}, "here: count must be an integer, got boolean True"),
    ({"count": -1}, "here: count must not be negative, got -1"),
    ({"mode": "c"}, "here: mode must be one of a, b, got 'c'"),
    ({"names": ["x", 1]}, "here: names must be a list of strings, got list ['x', 1]"),
    ({"on": "yes"}, "here: on must be true or false, got string 'yes'"),
])
def test_each_problem_is_one_line(table, message):
    with pytest.raises(ConfigError) as err:
        check_table(table, FIELDS, "here")
    assert str(err.value) == message


def test_a_valid_table_comes_back_with_its_names():
    assert check_table({"count": 2, "mode": "a"}, FIELDS, "here") == {"count": 2, "mode": "a"}
    assert check_value(FIELDS["names"], ["x"], "here") == ["x"]
    with pytest.raises(ConfigError, match=r"unknown key 'zzz' \(keys: count, mode, names, on\)"):
        check_table({"zzz": 1}, FIELDS, "here", list_known=True)


def test_settings_and_profiles_are_checked_alike(tmp_path):
    """The same wrong type reads the same in [build] and in [profiles.x]: one checker."""
    path = tmp_path / "buildkit.toml"
    path.write_text('schema_version = 1\n[build]\njobs = "4"\n')
    with pytest.raises(ConfigError) as settings:
        read_config_file(path)
    path.write_text('schema_version = 1\n[profiles.x]\nport = "4"\n')
    with pytest.raises(ConfigError) as profile:
        read_profiles(read_document(path))
    assert str(settings.value) == f"{path}: build.jobs must be an integer, got string '4'"
    assert str(profile.value) == f"{path} [profiles.x]: port must be an integer, got string '4'"
    assert KEY_BY_NAME["build.jobs"].type is int and {f.name for f in PROFILE_KEYS} >= {"port", "args"}
