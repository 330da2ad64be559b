"""The SBOM of an image (issue 38): a CycloneDX 1.6 JSON document, made with cyclonedx-python-lib (the
CycloneDX project's own model, serializer and schema validator) and checked against the schema.

What it lists: every Debian package the image's own dpkg database says is installed (read from its
layers, var/lib/dpkg/status and a distroless status.d, through oci/rootfs.py: no engine, no container),
with name, version, architecture and purl `pkg:deb/<vendor>/<name>@<version>?arch=<arch>&distro=<id>-<version>`
(vendor and distro from the image's own os-release); the CUDA wheels
of a wheels-provider build, with their sha256; and llama.cpp itself (the fork's URL, its commit, the patch
set). metadata.tools names buildkit and cyclonedx-python-lib. Predicate type of its attestation:
https://cyclonedx.org/bom (cosign's `--type cyclonedx`).
"""

from __future__ import annotations

import json
import tempfile
from importlib import metadata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cyclonedx.model import ExternalReference, ExternalReferenceType, HashAlgorithm, HashType, Property, XsUri
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL

import buildkit
from buildkit.core.boundedread import MiB, read_regular
from buildkit.core.errors import ImageSourceError
from buildkit.oci.ocilayout import Image
from buildkit.oci.rootfs import apply_layers

PREDICATE_TYPE = "https://cyclonedx.org/bom"
STATUS = "var/lib/dpkg/status"
STATUS_D = "var/lib/dpkg/status.d/"
STATUS_LIMIT = 64 * MiB
OS_RELEASE = ("usr/lib/os-release", "etc/os-release")  # (etc/os-release is a symlink to the first in Debian)


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    architecture: str


def paragraphs(text: str) -> Iterator[dict[str, str]]:
    """The stanzas of a dpkg control file (RFC 822-like; continuation lines folded into their field)."""
    fields: dict[str, str] = {}
    last = ""
    for line in text.splitlines():
        if not line.strip():
            if fields:
                yield fields
            fields, last = {}, ""
        elif line[0] in " \t" and last:
            fields[last] += "\n" + line.strip()
        elif ":" in line:
            last, _, value = line.partition(":")
            fields[last] = value.strip()
    if fields:
        yield fields


def installed(status_texts: list[str]) -> list[DebPackage]:
    """The installed packages of dpkg status files (Status ... installed; status.d files have none)."""
    found = set()
    for text in status_texts:
        for p in paragraphs(text):
            if "Package" not in p or not p.get("Status", "install ok installed").endswith(" installed"):
                continue
            found.add(DebPackage(p["Package"], p.get("Version", ""), p.get("Architecture", "")))
    return sorted(found, key=lambda d: (d.name, d.architecture, d.version))


@dataclass(frozen=True)
class OsRelease:
    """An image's os-release (ID, VERSION_ID): the vendor and the distro= qualifier of its Debian purls."""
    id: str = ""
    version_id: str = ""

    @property
    def vendor(self) -> str:
        return self.id or "debian"

    @property
    def distro(self) -> str:  # debian-12, ubuntu-24.04: as syft and grype write it
        return f"{self.id}-{self.version_id}" if self.id and self.version_id else ""


def os_release(text: str) -> OsRelease:
    """ID and VERSION_ID of an os-release file (shell-like KEY=value lines, values maybe quoted)."""
    values = {}
    for line in text.splitlines():
        key, eq, value = line.strip().partition("=")
        if eq and key in ("ID", "VERSION_ID"):
            values[key] = value.strip().strip("\"'")
    return OsRelease(values.get("ID", ""), values.get("VERSION_ID", ""))


def image_packages(image: Image) -> list[DebPackage]:
    """The Debian packages installed in image, from its own dpkg database (its layers, applied)."""
    return image_contents(image)[0]


def image_contents(image: Image) -> tuple[list[DebPackage], OsRelease]:
    """The Debian packages installed in image (its own dpkg database) and its os-release, from its layers."""
    with tempfile.TemporaryDirectory(prefix="buildkit-sbom-") as tmp:
        root = Path(tmp) / "root"
        apply_layers(image, root, include=lambda rel: rel in (STATUS, *OS_RELEASE) or rel.startswith(STATUS_D))
        files = [root / STATUS] if (root / STATUS).is_file() else []
        if (root / STATUS_D).is_dir():
            files += sorted(p for p in (root / STATUS_D).iterdir() if p.is_file())
        found = next((root / rel for rel in OS_RELEASE if (root / rel).is_file() and not (root / rel).is_symlink()),
                     None)
        try:
            packages = installed([read_regular(f, STATUS_LIMIT).decode("utf-8", "replace") for f in files])
            release = os_release(read_regular(found, MiB).decode("utf-8", "replace")) if found else OsRelease()
        except OSError as exc:
            raise ImageSourceError(f"{image.source}: cannot read its dpkg status: {exc}") from None
        return packages, release


def deb_purl(pkg: DebPackage, release: OsRelease) -> PackageURL:
    """pkg:deb/<vendor>/<name>@<version>?arch=<arch>&distro=<id>-<version_id> (what is known of it)."""
    qualifiers = {k: v for k, v in (("arch", pkg.architecture), ("distro", release.distro)) if v}
    return PackageURL(type="deb", namespace=release.vendor, name=pkg.name, version=pkg.version,
                      qualifiers=qualifiers or None)


def _deb_component(pkg: DebPackage, release: OsRelease) -> Component:
    return Component(name=pkg.name, version=pkg.version, type=ComponentType.LIBRARY, purl=deb_purl(pkg, release),
                     bom_ref=f"deb:{pkg.name}:{pkg.architecture}:{pkg.version}")


def _wheel_component(wheel: Mapping[str, Any]) -> Component:
    name = str(wheel.get("package") or wheel.get("name") or wheel.get("filename") or "cuda-wheel")
    version = str(wheel.get("version") or "")
    purl = PackageURL(type="pypi", name=name, version=version or None)
    return Component(name=name, version=version or None, type=ComponentType.LIBRARY, purl=purl,
                     hashes=[HashType(alg=HashAlgorithm.SHA_256, content=str(wheel["sha256"]))],
                     bom_ref=f"wheel:{name}:{wheel['sha256']}")


def _llama_component(lock: Mapping[str, Any]) -> Component:
    properties = [Property(name="buildkit:patch_set_sha256", value=str(lock.get("patch_set_sha256", "")))]
    properties += [Property(name="buildkit:patch", value=str(p)) for p in lock.get("patches") or ()]
    return Component(name="llama.cpp", version=str(lock["commit"]), type=ComponentType.APPLICATION,
                     bom_ref="llama.cpp", properties=properties,
                     external_references=[ExternalReference(type=ExternalReferenceType.VCS,
                                                            url=XsUri(str(lock["source_url"])))])


def sbom_document(packages: list[DebPackage], lock: Mapping[str, Any] | None, *,
                  release: OsRelease = OsRelease(), image_name: str = "image") -> bytes:
    """The CycloneDX 1.6 JSON of packages (purls of release's vendor and distro) and, from a lock entry
    (entry_dict), llama.cpp and its CUDA wheels; the tools that made it (buildkit, cyclonedx-python-lib) in
    metadata.tools. ImageSourceError when the library's schema validation finds it invalid."""
    bom = Bom()
    bom.metadata.component = root = Component(name=image_name, type=ComponentType.CONTAINER, bom_ref="image")
    bom.metadata.tools.components.add(Component(type=ComponentType.APPLICATION, name="llama-buildkit",
                                                version=buildkit.__version__, group="llama-buildkit"))
    bom.metadata.tools.components.add(Component(type=ComponentType.LIBRARY, group="CycloneDX",
                                                name="cyclonedx-python-lib", version=metadata.version(
                                                    "cyclonedx-python-lib")))
    for pkg in packages:
        bom.components.add(_deb_component(pkg, release))
    if lock is not None:
        bom.components.add(_llama_component(lock))
        for wheel in (lock.get("cuda_root") or {}).get("wheels") or []:
            bom.components.add(_wheel_component(wheel))
    bom.register_dependency(root, list(bom.components))  # the image holds each of them
    text = JsonV1Dot6(bom).output_as_string(indent=None)
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if error is not None:
        raise ImageSourceError(f"the SBOM of {image_name} is not valid CycloneDX 1.6: {error}")
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")).encode()


def sbom_statement(document: bytes, digest: str, image_name: str) -> bytes:
    """The in-toto Statement v1 of the SBOM, for cosign's `--type cyclonedx`."""
    algorithm, _, hexpart = digest.partition(":")
    statement = {"_type": "https://in-toto.io/Statement/v1", "predicateType": PREDICATE_TYPE,
                 "subject": [{"name": image_name, "digest": {algorithm: hexpart}}], "predicate": json.loads(document)}
    return json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
