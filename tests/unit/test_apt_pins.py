"""Debian packages in the lock, pinned by `reproduce`, and base.apt_snapshot (plan/aptpins.py; issue 41 item 5).

The pins' check script runs here in /bin/sh against stand-in apt-cache and dpkg-query programs on PATH (the
engine test tests/engine/test_debian_packages_docker.py runs it against a real mirror); base.apt_snapshot's
source rewriting runs on a real deb822 sources file (snapshot.debian.org itself cannot be reached here).
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from buildkit.core.errors import ConfigError, LockError
from buildkit.flows.reproduce.record import from_lock
from buildkit.plan.aptpins import (REFUSED, SCRIPT, AptPins, check_apt_snapshot, package_versions, pins_from_record,
                                   refusal, stage_files)
from buildkit.plan.buildkey import key_of
from buildkit.plan.inputs import BaseImage
from buildkit.plan.plantypes import plan_inputs
from buildkit.plan.render import render_dockerfile, write_context
from buildkit.release.lock import LockEntry, entry_dict, entry_from_dict
from buildkit.release.lockfile import write_lock_entry

from test_cross_render import ARM64_ON_AMD64
from test_plan_render import plan_for

PINS = AptPins(build=(("cmake", "3.25.1-1"), ("gcc", "4:12.2.0-3"), ("libc6:arm64", "2.36-9")),
               runtime=(("curl", "7.88.1-10+deb12u15"), ("libgomp1", "12.2.0-14+deb12u1")))


# ------------------------------------------------------------------ base.apt_snapshot

@pytest.mark.parametrize("value, expected", [("2026-11-01", "20261101T000000Z"),
                                             ("20240229T235959Z", "20240229T235959Z"),
                                             (" 2026-11-01 ", "20261101T000000Z"), ("", "")])
def test_a_snapshot_date_is_snapshot_debian_orgs_form(value, expected):
    assert check_apt_snapshot(value) == expected


@pytest.mark.parametrize("value", ["2026-02-30", "20261301T000000Z", "2026-11-01T00:00:00Z", "yesterday",
                                   "20261101", "20261101T000000Z; rm -rf /"])
def test_a_bad_snapshot_is_one_line_naming_the_forms(value):
    with pytest.raises(ConfigError, match=r"base.apt_snapshot .* YYYY-MM-DD or YYYYMMDDTHHMMSSZ"):
        check_apt_snapshot(value)
    with pytest.raises(ConfigError, match="base.apt_snapshot"):  # before any work: the request refuses it
        plan_for(**{"build.arch": "cpu", "base.apt_snapshot": value})


def test_a_snapshot_is_an_input_recorded_and_keyed_and_absent_leaves_old_keys_alone():
    plain = plan_for(**{"build.arch": "cpu"})
    dated = plan_for(**{"build.arch": "cpu", "base.apt_snapshot": "2026-11-01"})
    inputs = plan_inputs(dated, (), None)
    assert inputs.apt_snapshot == "20261101T000000Z" and inputs.record()["apt_snapshot"] == "20261101T000000Z"
    assert key_of(inputs) != key_of(plan_inputs(plain, (), None))
    assert "apt_snapshot" not in plan_inputs(plain, (), None).record()  # an unset one: labels as before


@pytest.mark.parametrize("overrides", [{}, ARM64_ON_AMD64], ids=["native", "cross"])
def test_a_snapshot_points_both_stages_debian_sources_at_its_date(overrides, tmp_path):
    text = render_dockerfile(plan_for(**{"build.arch": "cpu", "base.apt_snapshot": "2026-11-01", **overrides}))
    assert "snapshot.debian.org" not in render_dockerfile(plan_for(**{"build.arch": "cpu", **overrides}))
    for stage in ("build-os", "runtime-packages" if overrides else "base"):
        run = text.split(f" AS {stage}\n", 1)[1].split("\nFROM ", 1)[0]
        assert "archive/debian/20261101T000000Z/" in run and "Check-Valid-Until=false update" in run
    # the rewriting itself, on a copy of Debian 12's own sources file (the cross stage's /target form)
    loop = re.search(r"(for f in /target/etc/apt/sources\.list .*?fi;? done \\\n &&.*?exit 1; fi)", text, re.S) \
        if overrides else re.search(r"(for f in /etc/apt/sources\.list .*?exit 1; fi)", text, re.S)
    assert loop is not None
    sources = tmp_path / "etc" / "apt" / "sources.list.d"
    sources.mkdir(parents=True)
    (sources / "debian.sources").write_text(
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n")
    root = "/target" if overrides else ""
    script = loop.group(1).replace(f"{root}/etc/apt", f"{tmp_path}/etc/apt")
    subprocess.run(["sh", "-c", script], check=True)
    uris = re.findall(r"^URIs: (.*)$", (sources / "debian.sources").read_text(), re.M)
    assert uris == ["http://snapshot.debian.org/archive/debian/20261101T000000Z/",
                    "http://snapshot.debian.org/archive/debian-security/20261101T000000Z/"]
    (sources / "debian.sources").write_text("Types: deb\nURIs: http://archive.ubuntu.com/ubuntu\n")
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True)  # no Debian source: one line
    assert proc.returncode == 1 and proc.stdout.startswith(f"{REFUSED} base.apt_snapshot: the image's apt sources")


# ------------------------------------------------------------------ the record

def test_package_versions_name_a_package_of_several_architectures_with_each():
    found = package_versions([("libc6", "amd64", "2.36-9"), ("libc6", "arm64", "2.36-9"), ("gcc", "amd64", "4:12"),
                              ("tzdata", "all", "2026b")])
    assert found == {"gcc": "4:12", "libc6:amd64": "2.36-9", "libc6:arm64": "2.36-9", "tzdata": "2026b"}


def lock_entry(**changes) -> LockEntry:
    inputs = plan_inputs(plan_for(**{"build.arch": "cpu"}), (BaseImage("debian:12", "sha256:" + "c" * 64),), None)
    return LockEntry(**inputs.lock_fields(), ref="main", template="t.j2", dockerfile_sha256="d" * 64,
                     cuda_root=None, cmake_archs=None, image_name="x/y", image_digest="sha256:" + "e" * 64,
                     image_id="sha256:" + "f" * 64, tags=("x/y:cpu",), build_key="b" * 64,
                     labels=inputs.to_labels("b" * 64), **changes)


def test_the_lock_round_trips_the_packages_and_an_old_lock_reads_and_writes_back_the_same(tmp_path):
    packages = {"build": {"gcc": "4:12.2.0-3"}, "runtime": {"curl": "7.88.1-10+deb12u15"}}
    entry = lock_entry(debian_packages=packages)
    assert entry_from_dict(json.loads(json.dumps(entry_dict(entry)))) == entry
    write_lock_entry(tmp_path / "buildkit.lock", entry)
    stored = json.loads((tmp_path / "buildkit.lock").read_text())["builds"][entry.key]
    assert stored["debian_packages"] == packages
    assert from_lock(tmp_path / "buildkit.lock").debian_packages == packages  # what reproduce pins
    old = json.loads(json.dumps(entry_dict(lock_entry())))
    assert "debian_packages" not in old and entry_from_dict(old).debian_packages is None
    with pytest.raises(LockError, match="debian_packages: expected an object"):
        entry_from_dict({**old, "debian_packages": ["gcc"]})


def test_a_recorded_name_or_version_apt_would_not_take_is_refused():
    assert pins_from_record({}, "lock x") is None
    assert pins_from_record({"build": {"gcc": "4:12"}, "runtime": {}}, "lock x") == AptPins(build=(("gcc", "4:12"),))
    for bad in ({"build": {"gcc; rm -rf /": "1"}}, {"runtime": {"curl": "1 2"}}, {"build": ["gcc"]}):
        with pytest.raises(ConfigError, match="lock x: debian_packages"):
            pins_from_record(bad, "lock x")


# ------------------------------------------------------------------ reproduce's pins

@pytest.mark.parametrize("overrides", [{"build.arch": "cpu"}, {"build.arch": "sm_120"},
                                       {"build.arch": "cpu", **ARM64_ON_AMD64}], ids=["cpu", "nvidia", "cpu-cross"])
def test_pins_change_only_the_mounts_so_the_images_history_is_the_same(overrides):
    plan = plan_for(**overrides)
    plain, pinned = render_dockerfile(plan), render_dockerfile(replace(plan, apt_pins=PINS))
    assert "--mount=type=bind,source=apt-pins/build,target=/mnt" in pinned
    assert "--mount=type=bind,source=apt-pins/runtime,target=/mnt" in pinned
    assert "source=apt-pins" not in plain  # a normal build mounts nothing
    assert re.sub(r" --mount=type=bind,source=apt-pins/\w+,target=/mnt", "", pinned) == plain


def test_the_context_holds_each_stages_script_and_preferences(tmp_path):
    plan = replace(plan_for(**{"build.arch": "cpu"}), apt_pins=PINS)
    write_context(plan, tmp_path)
    prefs = (tmp_path / "apt-pins" / "runtime" / "preferences").read_text()
    assert "Package: libgomp1\nPin: version 12.2.0-14+deb12u1\nPin-Priority: 1001\n" in prefs and "gcc" not in prefs
    early = (tmp_path / "apt-pins" / "build" / SCRIPT).read_text()
    assert "curl=7.88.1-10+deb12u15" in early  # same image for both stages: checked before the compile
    assert "curl=" not in stage_files(PINS, same_base=False)["build/" + SCRIPT]


def run_check(tmp_path: Path, pins, *, installed: dict[str, str], mirror: dict[str, list[str]]):
    """The stage's script, sourced as the apt step does, with apt-cache and dpkg-query standing in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    rows = "".join(f" {p} | {v} | http://deb.debian.org/debian bookworm/main amd64 Packages\\n"
                   for p, vs in mirror.items() for v in vs)
    (bin_dir / "apt-cache").write_text(f'#!/bin/sh\nprintf "{rows}" | grep "^ $2 |"\n')
    cases = "".join(f'  {p}) printf %s {v};;\n' for p, v in installed.items())
    (bin_dir / "dpkg-query").write_text(f'#!/bin/sh\neval p=\\${{$#}}\ncase "$p" in\n{cases}  *) exit 1;;\nesac\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    (tmp_path / "preferences").write_text("Package: x\n")
    script = stage_files(pins, same_base=False)["build/" + SCRIPT].replace("/mnt/", f"{tmp_path}/")
    (tmp_path / SCRIPT).write_text(script)
    return subprocess.run(["sh", "-c", f'pins= && . {tmp_path / SCRIPT} && echo "pins=$pins"'],
                          capture_output=True, text=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"})


def test_the_check_refuses_in_one_line_naming_the_packages_the_recorded_and_the_mirrors_versions(tmp_path):
    pins = AptPins(build=(("cmake", "3.25.1-1"), ("gcc", "4:12.2.0-3"), ("libc6", "2.36-9+deb12u13")))
    proc = run_check(tmp_path, pins, installed={"libc6": "2.36-9+deb12u14"},
                     mirror={"cmake": ["3.25.1-1"], "gcc": ["4:12.2.0-3+b1", "4:12.2.0-4"],
                             "libc6": ["2.36-9+deb12u14"]})
    assert proc.returncode == 1 and "pins=" not in proc.stdout
    line, = proc.stdout.splitlines()
    assert line == REFUSED + " " + refusal([("gcc", "4:12.2.0-3", "4:12.2.0-3+b1,4:12.2.0-4"),
                                            ("libc6", "2.36-9+deb12u13", "2.36-9+deb12u14")])
    assert "the Debian mirror no longer has the recorded versions: gcc 4:12.2.0-3 (the mirror has " in line


def test_the_check_passes_when_each_version_is_installed_or_on_the_mirror_and_sets_the_preferences(tmp_path):
    proc = run_check(tmp_path, AptPins(build=(("cmake", "3.25.1-1"), ("libc6", "2.36-9"))),
                     installed={"libc6": "2.36-9"}, mirror={"cmake": ["3.25.1-1", "3.25.1-2"]})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == f"pins=-o Dir::Etc::Preferences={tmp_path}/preferences"
    gone = run_check(tmp_path, AptPins(build=(("ccache", "4.8"),)), installed={}, mirror={})
    assert gone.stdout.strip() == REFUSED + " " + refusal([("ccache", "4.8", "")])  # (the mirror has none)
