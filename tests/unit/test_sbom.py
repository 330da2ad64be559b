"""release/sbom.py: dpkg's status read as dpkg does, and a schema-valid CycloneDX 1.6 document (issue 38)."""

from __future__ import annotations

import json

from buildkit.release.sbom import DebPackage, installed, sbom_document

STATUS = """Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9+deb12u10
Description: GNU C Library
 shared libraries (continuation line: Status: install ok installed)

Package: removed-one
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: tzdata
Status: install ok installed
Architecture: all
Version: 2025b-0+deb12u1
"""


def test_only_installed_packages_count_and_continuation_lines_are_not_fields():
    assert installed([STATUS]) == [DebPackage("libc6", "2.36-9+deb12u10", "amd64"),
                                   DebPackage("tzdata", "2025b-0+deb12u1", "all")]
    # a distroless status.d file has no Status field: its package is installed
    assert installed(["Package: base-files\nVersion: 12.4\nArchitecture: amd64\n"]) == [
        DebPackage("base-files", "12.4", "amd64")]


def test_the_document_is_cyclonedx_1_6_with_deb_purls():
    bom = json.loads(sbom_document(installed([STATUS]), None, image_name="reg/x"))
    assert bom["specVersion"] == "1.6"
    assert {c["purl"] for c in bom["components"]} == {"pkg:deb/debian/libc6@2.36-9%2Bdeb12u10?arch=amd64",
                                                      "pkg:deb/debian/tzdata@2025b-0%2Bdeb12u1?arch=all"}
