"""LockEntry is a plain frozen dataclass: mypy checks its users, its input fields stay those plan/inputs.py
declares `lock`, and the locks written before it (docs/gpu-runs) read back and are written with the same
values (a key added since, such as build_seconds, takes its default)."""

from __future__ import annotations

import json
import textwrap
from dataclasses import MISSING, fields
from pathlib import Path

import pytest
from mypy import api as mypy_api

from buildkit.plan.inputs import INPUTS, NEEDED
from buildkit.release.lock import LockEntry, entry_dict
from buildkit.release.lockfile import Lock

ROOT = Path(__file__).resolve().parents[2]
OLD_LOCKS = sorted((ROOT / "docs" / "gpu-runs").glob("*/*.buildkit.lock"))


def test_mypy_sees_the_fields_of_a_lock_entry(tmp_path):
    """A misuse of an entry is a type error (it was none while LockEntry was Any to mypy)."""
    snippet = tmp_path / "use_entry.py"
    snippet.write_text(textwrap.dedent("""\
        from buildkit.release.lock import LockEntry

        def digest_length(entry: LockEntry) -> int:
            return entry.image_digest

        def no_such(entry: LockEntry) -> str:
            return entry.image_digestt
        """))
    out, _, status = mypy_api.run([str(snippet), "--follow-imports=silent", "--no-error-summary",
                                   "--cache-dir", str(ROOT / ".mypy_cache")])
    assert status == 1, out
    assert 'Incompatible return value type (got "str", expected "int")' in out
    assert '"LockEntry" has no attribute "image_digestt"' in out


def test_the_input_fields_are_those_declared_lock():
    entry_fields = {f.name: f for f in fields(LockEntry)}
    for declared in (i for i in INPUTS if i.lock):
        assert declared.name in entry_fields, declared.name
        spec = entry_fields[declared.name]
        assert str(spec.type) == declared.annotation, declared.name
        expected = MISSING if declared.lock_default is NEEDED else declared.lock_default
        assert spec.default == expected, declared.name


@pytest.mark.parametrize("path", OLD_LOCKS, ids=[f"{p.parent.name}/{p.name}" for p in OLD_LOCKS])
def test_an_old_lock_reads_and_writes_back_the_same(path):
    lock = Lock.read(path)
    assert lock.builds and lock.text() == path.read_text()  # read and written back: the same bytes
    for key, raw in json.loads(path.read_text())["builds"].items():
        entry = lock.entry(key)
        assert entry.key == key and lock.builds[key] == entry
        assert isinstance(entry.source_date_epoch, int) and isinstance(entry.cmake_args, tuple)
        written = json.loads(json.dumps(entry_dict(entry)))
        assert {k: written[k] for k in raw} == raw  # every key kept, with its value
        defaults = {f.name: f.default for f in fields(LockEntry)}
        assert {k: written[k] for k in set(written) - set(raw)} == {k: defaults[k] for k in set(written) - set(raw)}
