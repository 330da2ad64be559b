"""OCI 1.1 referrers (pure): what the distribution spec 1.1 asks of a client that attaches a manifest to another
one through its `subject`, and reads back what is attached.

* A registry with the referrers API (`GET /v2/<name>/referrers/<digest>` answers an image index) lists the
  manifests whose subject is the digest; it says it processed a pushed manifest's subject with the
  `OCI-Subject` header. One without (a 404 there; CNCF distribution 2.8) gets the referrers tag schema: the
  tag `<alg>-<hex>` (`sha256-<hex>`, cosign's `.sig`/`.att` tags without the suffix) holds an image index of
  them, which the client keeps. A registry that answers the API but not the header (go-containerregistry
  0.20.1) is given the tag too, as the spec says a client must when the header is missing.
* Each entry of that index is the pushed manifest's descriptor with its `artifactType` (the manifest's own,
  else its config's media type) and every annotation of the manifest.
* What a list says is input: an entry's artifactType is a hint (go-containerregistry 0.20.1 lists the
  config's media type where the manifest's artifactType belongs), so a reader opens the manifest itself and
  takes its artifactType and subject from there (manifest_facts).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from buildkit.core.errors import RegistryError
from buildkit.oci.digest import Digest

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_BLOB = b"{}"  # the image spec's empty descriptor's content
SUBJECT_HEADER = "OCI-Subject"
MAX_LISTED = 1000  # entries of one list read (the API's pages together, or the tag's index)


@dataclass(frozen=True)
class Referrer:
    """One entry of a referrers list: a manifest that names a subject."""

    digest: str
    media_type: str
    size: int
    artifact_type: str = ""
    annotations: tuple[tuple[str, str], ...] = ()

    def descriptor(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.artifact_type:
            entry["artifactType"] = self.artifact_type
        if self.annotations:
            entry["annotations"] = dict(self.annotations)
        return entry


@dataclass(frozen=True)
class ManifestFacts:
    """What a reader takes from a referrer's own manifest, not from the list that named it."""

    artifact_type: str
    subject: str  # the subject's digest ("" when none)
    layers: tuple[dict[str, Any], ...]
    annotations: tuple[tuple[str, str], ...]


def fallback_tag(digest: str) -> str:
    """The referrers tag schema's tag of digest: `<alg>-<ref>`, the algorithm within 32 characters and the
    encoded digest within 64 (sha256-<hex>)."""
    parsed = Digest.parse(digest, "referrers tag", RegistryError)
    return f"{parsed.algorithm[:32]}-{parsed.hex[:64]}"


def empty_descriptor() -> dict[str, Any]:
    """The image spec's empty descriptor: the config of an artifact that has none."""
    return {"mediaType": EMPTY_MEDIA_TYPE, "digest": str(Digest.of(EMPTY_BLOB)), "size": len(EMPTY_BLOB)}


def _object(body: bytes, what: str) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError:
        raise RegistryError(f"{what} is not JSON") from None
    if not isinstance(document, dict):
        raise RegistryError(f"{what} is not a JSON object")
    return document


def _annotations(value: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        return ()
    return tuple(sorted((k, v) for k, v in value.items() if isinstance(k, str) and isinstance(v, str)))


def manifest_facts(body: bytes, what: str) -> ManifestFacts:
    """A manifest's artifactType (its own, else its config's media type, as the spec lists it), subject and
    layers; RegistryError naming what when it is no image manifest."""
    document = _object(body, what)
    config, layers, subject = document.get("config"), document.get("layers"), document.get("subject")
    if not isinstance(config, dict) or not isinstance(layers, list):
        raise RegistryError(f"{what} is not an image manifest (no config and layers)")
    declared = document.get("artifactType")
    artifact_type = declared if isinstance(declared, str) and declared else str(config.get("mediaType") or "")
    subject_digest = subject.get("digest") if isinstance(subject, dict) else ""
    return ManifestFacts(artifact_type, subject_digest if isinstance(subject_digest, str) else "",
                         tuple(layer for layer in layers if isinstance(layer, dict)),
                         _annotations(document.get("annotations")))


def referrer_of(body: bytes, media_type: str) -> Referrer:
    """The entry a referrers list gives the manifest body: its digest, size, artifactType and annotations."""
    facts = manifest_facts(body, "the manifest pushed")
    return Referrer(str(Digest.of(body)), media_type, len(body), facts.artifact_type, facts.annotations)


def listed(body: bytes, what: str) -> list[Referrer]:
    """The entries of a referrers list (the API's answer or the tag's index) that name a manifest by a valid
    digest, at most MAX_LISTED; RegistryError when it is no image index."""
    document = _object(body, what)
    entries = document.get("manifests")
    if not isinstance(entries, list):
        raise RegistryError(f"{what} is not an image index (no manifests list)")
    found = []
    for entry in entries[:MAX_LISTED]:
        if not isinstance(entry, dict):
            continue
        try:
            digest = str(Digest.parse(entry.get("digest"), what, RegistryError))
        except RegistryError:
            continue
        size, media_type, artifact_type = entry.get("size"), entry.get("mediaType"), entry.get("artifactType")
        found.append(Referrer(digest, media_type if isinstance(media_type, str) else "",
                              size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else 0,
                              artifact_type if isinstance(artifact_type, str) else "",
                              _annotations(entry.get("annotations"))))
    return found


def index_with(current: bytes | None, added: Sequence[Referrer], what: str) -> bytes | None:
    """The referrers tag's index with the added entries appended (the entries already there kept as they are,
    none listed twice); None when every one is listed already. current: the tag's index, None when the tag
    does not exist (an empty index to start from)."""
    document = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []} if current is None \
        else _object(current, what)
    entries = document.get("manifests")
    if not isinstance(entries, list) or document.get("mediaType", OCI_INDEX) != OCI_INDEX:
        raise RegistryError(f"{what} holds no image index; the referrers tag schema needs one there, so nothing "
                            "is attached to it (remove or rename that tag)")
    there = {entry.get("digest") for entry in entries if isinstance(entry, dict)}
    new = [referrer.descriptor() for referrer in dict.fromkeys(added) if referrer.digest not in there]
    if not new:
        return None
    document["manifests"] = [*entries, *new]
    document.setdefault("mediaType", OCI_INDEX)
    return json.dumps(document, separators=(",", ":")).encode()


def subject_manifest(document: dict[str, Any], subject: dict[str, Any]) -> bytes:
    """A manifest document with its subject (the descriptor of the manifest it refers to), serialised."""
    return json.dumps({**document, "subject": subject}, separators=(",", ":")).encode()
