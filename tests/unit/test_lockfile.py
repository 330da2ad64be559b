"""Lock (release/lockfile.py), the one reader and writer of buildkit.lock: an old lock reads and writes back as
the same bytes, the lookups find what the raw dicts were searched for, an entry a hand left without a key is
kept as it is and refused in one line where every key is needed, and a change is a new Lock."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from test_buildx_lock_cli import entry

from buildkit.core.errors import LockError
from buildkit.release.lock import IndexEntry, PlatformRecord, entry_dict
from buildkit.release.lockfile import Lock, update_lock, write_index_entry, write_lock_entry

ROOT = Path(__file__).resolve().parents[2]
OLD_LOCKS = sorted((ROOT / "docs" / "gpu-runs").glob("*/*.buildkit.lock"))


@pytest.mark.parametrize("path", OLD_LOCKS, ids=[f"{p.parent.name}/{p.name}" for p in OLD_LOCKS])
def test_an_old_lock_is_written_back_byte_for_byte(tmp_path, path):
    copy = tmp_path / "buildkit.lock"
    copy.write_bytes(path.read_bytes())
    update_lock(copy, lambda lock: lock)  # the one writer, changing nothing
    assert copy.read_bytes() == path.read_bytes()
    lock = Lock.read(path)
    assert lock.version == 1 and all(lock.entry(k) == e for k, e in lock.builds.items())


def test_lookups(tmp_path):
    path = tmp_path / "buildkit.lock"
    cpu, arm = entry(), entry(platform="linux/arm64", image_digest="sha256:arm", build_key="ka", tags=("x:arm",))
    write_lock_entry(path, cpu)
    write_lock_entry(path, arm)
    index = IndexEntry(variant="cpu", target="server", image_name="x", index_digest="sha256:idx", build_key="ki",
                       platforms=(PlatformRecord("linux/arm64", "sha256:arm", "ka", arm.key),))
    write_index_entry(path, index, {})
    lock = Lock.read(path)
    assert lock.find("cpu", "server", "linux/arm64") == ("cpu-arm64/server", arm)
    assert lock.find("cpu", "server", "linux/amd64") == ("cpu/server", cpu)
    assert lock.find("cpu", "full", "linux/amd64") is None
    assert lock.entry("cpu/server") == cpu and lock.by_digest("sha256:arm") == "cpu-arm64/server"
    assert lock.by_digest("sha256:none") is None and lock.by_digest("") is None
    assert lock.index_by_digest("sha256:idx") == ("cpu/server", index) and lock.indexes == {"cpu/server": index}
    assert lock.describing("x:arm") == "cpu-arm64/server" and lock.describing("y", "sha256:3") == "cpu-arm64/server"
    assert lock.digests_of("ka") == ["sha256:arm"] and lock.digests_of("ki") == ["sha256:idx"]
    with pytest.raises(LockError, match="has no build 'cpu/full'"):
        lock.entry("cpu/full")


def test_an_entry_lacking_keys_is_kept_read_typed_and_refused_in_one_line_where_every_key_is_needed(tmp_path):
    path = tmp_path / "buildkit.lock"
    odd = {"commit": "c", "image_digest": "sha256:odd", "newer": 1}  # hand-made, or of a newer buildkit
    path.write_text(json.dumps({"lock_version": 1, "builds": {"cpu/server": odd}, "other": [1]}))
    lock = Lock.read(path)
    typed = lock.builds["cpu/server"]
    assert (typed.commit, typed.image_digest, typed.variant, typed.source_date_epoch, typed.tags) == \
        ("c", "sha256:odd", "", 0, ())
    assert lock.by_digest("sha256:odd") == "cpu/server"
    with pytest.raises(LockError) as refused:
        lock.entry("cpu/server")
    assert str(refused.value) == f"{path}: builds['cpu/server']: unknown key 'newer'"
    del odd["newer"]
    path.write_text(json.dumps({"lock_version": 1, "builds": {"cpu/server": odd}}))
    with pytest.raises(LockError, match=r"builds\['cpu/server'\]: the key '\w+' is missing$"):
        Lock.read(path).entry("cpu/server")
    update_lock(path, lambda lock: lock.with_attached("cpu/server", "bench", {"runs": []}))
    assert json.loads(path.read_text())["builds"]["cpu/server"] == {**odd, "bench": {"runs": []}}  # as it was


def test_a_change_is_a_new_lock_and_the_file_is_sorted_and_indented(tmp_path):
    path = tmp_path / "buildkit.lock"
    lock = Lock.read(path)  # none: an empty lock
    assert lock.builds == {} and lock.text() == '{\n  "builds": {},\n  "lock_version": 1\n}\n'
    changed = lock.with_entry(entry(variant="zz")).with_entry(entry()).with_nightly({"url": "u"})
    assert lock.builds == {} and list(changed.builds) == ["cpu/server", "zz/server"]
    assert changed.without("zz/server").builds == {"cpu/server": entry()}
    update_lock(path, lambda _: changed)
    assert path.read_text() == json.dumps({"builds": {k: entry_dict(e) for k, e in changed.builds.items()},
                                           "lock_version": 1, "nightly": {"url": "u"}}, indent=2,
                                          sort_keys=True) + "\n"
    assert Lock.read(path).with_attached("cpu/server", "gpu_check", {"ok": True}).builds["cpu/server"] == \
        replace(entry(), gpu_check={"ok": True})
