"""The provenance against the lock entry it is made from, field by field (issue 47, item 5): what a verifier can
check without buildkit. Each patch is a resolved dependency with its own sha256; each Debian package of the build
stage is one, by purl (name, version, architecture, the stage's distro); a local fork's URI is git+file://; the
run's times are the build's, carried in the lock (a later push signs them too), never the signing time."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

from packageurl import PackageURL
from test_inputs import CASES, _entry

from buildkit.plan.buildkey import key_of
from buildkit.plan.plantypes import plan_inputs
from buildkit.release.lock import entry_dict, entry_from_dict
from buildkit.release.lockfile import write_lock_entry
from buildkit.release.provenance import provenance_statement, run_details
from buildkit.release.sbom import DebPackage, OsRelease, installed, os_release, sbom_document
from buildkit.source.patches import load_patch_queue

DIGEST = "sha256:" + "12" * 32
PACKAGES = {"build": {"gcc": "4:12.2.0-3", "libc6": "2.36-9+deb12u13", "libc6:arm64": "2.36-9+deb12u13",
                      "tzdata": "2025b-0+deb12u1"},
            "runtime": {"libgomp1": "12.2.0-14+deb12u1"},
            "architectures": {"build": {"gcc": "amd64", "libc6": "amd64", "libc6:arm64": "arm64", "tzdata": "all"},
                              "runtime": {"libgomp1": "amd64"}},
            "os": {"build": {"id": "debian", "version_id": "12"}, "runtime": {"id": "debian", "version_id": "12"}}}


def locked(tmp_path: Path) -> dict:
    """A lock entry as a build writes it, through the lock file: a local fork, two patches, both stages'
    packages, the build's times."""
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "series").write_text("0002-b.patch\n0001-a.patch\n")
    (patches / "0001-a.patch").write_bytes(b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    (patches / "0002-b.patch").write_bytes(b"--- a/y\n+++ b/y\n@@ -1 +1 @@\n-c\n+d\n")
    queue = load_patch_queue(patches)
    make, bases, manifest, host, _ = CASES["cpu"]
    inputs = plan_inputs(make(), bases, manifest, host)
    entry = replace(_entry(inputs, key_of(inputs)), source_url=str(tmp_path / "my fork"), patches=queue.names,
                    patch_set_sha256=queue.sha256, patch_sha256=queue.digests, debian_packages=PACKAGES,
                    build_started="2026-12-06T03:26:48Z", build_finished="2026-12-06T03:41:02Z")
    write_lock_entry(tmp_path / "buildkit.lock", entry)
    return json.loads((tmp_path / "buildkit.lock").read_text())["builds"][entry.key]


def test_the_provenance_says_what_the_lock_says(tmp_path):
    lock = locked(tmp_path)
    entry = entry_from_dict(lock)
    statement = json.loads(provenance_statement(entry, DIGEST, "reg.example/x/y", run_details(entry, "inv-1")))
    deps = statement["predicate"]["buildDefinition"]["resolvedDependencies"]

    fork, = (d for d in deps if d.get("name") == "llama.cpp fork")
    assert fork["uri"] == f"git+file://{tmp_path}/my%20fork@{lock['commit']}"
    assert fork["digest"] == {"sha1": lock["commit"]}

    patches = [d for d in deps if (d.get("annotations") or {}).get("kind") == "patch"]
    assert [p["name"] for p in patches] == lock["patches"] == ["0002-b.patch", "0001-a.patch"]  # series order
    assert [p["digest"]["sha256"] for p in patches] == lock["patch_sha256"]
    assert lock["patch_sha256"] == [hashlib.sha256((tmp_path / "patches" / n).read_bytes()).hexdigest()
                                    for n in lock["patches"]]  # each file's own, as sha256sum gives it
    assert [p["annotations"]["position"] for p in patches] == [1, 2]

    packages = [d for d in deps if (d.get("annotations") or {}).get("kind") == "build-stage package"]
    seen = {}
    for dep in packages:
        purl = PackageURL.from_string(dep["uri"])
        arch = purl.qualifiers["arch"]
        key = next(k for k in lock["debian_packages"]["build"] if k.split(":")[0] == purl.name
                   and lock["debian_packages"]["architectures"]["build"][k] == arch)
        seen[key] = (purl.name, purl.version, arch, purl.namespace, purl.qualifiers["distro"])
        assert (dep["name"], dep["annotations"]["version"], dep["annotations"]["architecture"]) == (
            purl.name, purl.version, arch)
    assert seen == {key: (key.split(":")[0], version, lock["debian_packages"]["architectures"]["build"][key],
                          "debian", "debian-12") for key, version in lock["debian_packages"]["build"].items()}

    metadata = statement["predicate"]["runDetails"]["metadata"]
    assert metadata == {"invocationId": "inv-1", "startedOn": lock["build_started"],
                        "finishedOn": lock["build_finished"]}


def test_a_lock_without_the_builds_times_gives_none_rather_than_the_signing_time(tmp_path):
    entry = replace(entry_from_dict(locked(tmp_path)), build_started="", build_finished="")
    statement = json.loads(provenance_statement(entry, DIGEST, "r/x", run_details(entry, "inv-2")))
    assert statement["predicate"]["runDetails"]["metadata"] == {"invocationId": "inv-2"}
    assert "build_started" not in entry_dict(entry)  # an older lock is written back as it was


def test_the_sbom_names_its_tools_and_the_distro_of_its_purls():
    release = os_release('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n')
    assert release == OsRelease("debian", "12")
    bom = json.loads(sbom_document(installed(["Package: libc6\nArchitecture: amd64\nVersion: 2.36-9\n"]), None,
                                   release=release, image_name="reg/x"))
    assert [c["purl"] for c in bom["components"]] == ["pkg:deb/debian/libc6@2.36-9?arch=amd64&distro=debian-12"]
    tools = {c["name"]: c for c in bom["metadata"]["tools"]["components"]}
    assert set(tools) == {"llama-buildkit", "cyclonedx-python-lib"} and tools["llama-buildkit"]["version"]
    ubuntu = os_release("ID=ubuntu\nVERSION_ID=\"24.04\"\n")
    bom = json.loads(sbom_document([DebPackage("libc6", "2.39-0ubuntu8", "amd64")], None, release=ubuntu))
    assert bom["components"][0]["purl"] == "pkg:deb/ubuntu/libc6@2.39-0ubuntu8?arch=amd64&distro=ubuntu-24.04"
