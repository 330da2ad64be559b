"""Issue 38: the SBOM (release/sbom.py) of an existing image, read from its own layers, lists every package
`dpkg-query` lists inside the image, and is valid CycloneDX 1.6 (the library's strict schema validation)."""

from __future__ import annotations

import json
import subprocess
from contextlib import ExitStack

import pytest

from buildkit.engine.current import get_engine
from buildkit.oci.imagesource import open_image
from buildkit.release.sbom import image_packages, sbom_document

pytestmark = pytest.mark.docker


def test_the_sbom_lists_every_package_dpkg_query_lists_in_the_image(debian_base_image):
    done = subprocess.run(["docker", "run", "--rm", "--network", "none", debian_base_image, "dpkg-query", "-W",
                           "-f", "${db:Status-Status} ${Package} ${Version} ${Architecture}\n"],
                          capture_output=True, text=True, timeout=120, check=True)
    listed = {tuple(line.split()[1:]) for line in done.stdout.splitlines() if line.startswith("installed ")}
    assert len(listed) > 50  # debootstrap's minbase
    with ExitStack() as stack:
        image = open_image(f"docker:{debian_base_image}", stack, engine=get_engine())
        packages = image_packages(image)
    lock = {"source_url": "https://example.invalid/fork", "commit": "9" * 40, "patch_set_sha256": "ab" * 32,
            "patches": ["0001-x.patch"], "cuda_root": {"wheels": [{"package": "nvidia-cublas", "version": "13.1.0",
                                                                    "sha256": "b" * 64}]}}
    bom = json.loads(sbom_document(packages, lock, image_name=debian_base_image))
    assert bom["specVersion"] == "1.6" and bom["bomFormat"] == "CycloneDX"
    in_sbom = {(c["name"], c["version"], c["purl"].rsplit("arch=", 1)[1]) for c in bom["components"]
               if c.get("purl", "").startswith("pkg:deb/")}
    assert sorted(listed - in_sbom) == [] and sorted(in_sbom - listed) == []
    purls = {c.get("purl") for c in bom["components"]}
    assert "pkg:deb/debian/dpkg@" + next(v for n, v, _ in listed if n == "dpkg") + "?arch=amd64" in purls
    llama = next(c for c in bom["components"] if c["name"] == "llama.cpp")
    assert llama["version"] == "9" * 40 and llama["externalReferences"][0]["url"] == lock["source_url"]
    wheel = next(c for c in bom["components"] if c["name"] == "nvidia-cublas")
    assert wheel["hashes"] == [{"alg": "SHA-256", "content": "b" * 64}]
