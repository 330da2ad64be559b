"""An image in a registry as ocilayout's `Image`: its manifest (an index followed to the platform's), its
config read whole within its declared size, its layers streamed once each into a temporary folder within
their declared size, each checked against its digest (registryblobs.py)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import IO

from buildkit.core.errors import ImageSourceError
from buildkit.oci.digest import MAX_DOCUMENT
from buildkit.oci.ocilayout import INDEX_TYPES, Descriptor, Image, image_from, json_document, select_manifest
from buildkit.oci.imageref import parse_image_ref
from buildkit.oci.registry import RegistryClient, client_for


class _RegistryBlobs:
    """Blobs of one registry repository, fetched once each into a temporary folder (within their declared
    size, checked against their digest: download_blob)."""

    def __init__(self, client: RegistryClient, repo: str, tmp: Path) -> None:
        self.client, self.repo, self.tmp = client, repo, tmp

    def path(self, desc: Descriptor) -> Path:
        target = self.tmp / desc.parsed.file_name()
        if not target.exists():
            self.client.download_blob(self.repo, desc.digest, target, desc.size)
        return target

    def open_raw(self, desc: Descriptor) -> IO[bytes]:
        return open(self.path(desc), "rb")

    def read(self, desc: Descriptor) -> bytes:
        if desc.size > MAX_DOCUMENT:
            raise ImageSourceError(f"blob {desc.digest[:19]} declares {desc.size} bytes, over the limit of "
                                   f"{MAX_DOCUMENT} bytes")
        return self.client.get_blob(self.repo, desc.digest, max_bytes=desc.size)


def open_registry(ref_text: str, stack: ExitStack, tmp: Path, platform: str | None) -> Image:
    ref = parse_image_ref(ref_text)
    client = stack.enter_context(client_for(ref.registry))
    body, media_type, digest = client.get_manifest(ref.repository, ref.reference)
    blobs = _RegistryBlobs(client, ref.repository, tmp)
    manifests: dict[str, bytes] = {digest: body}

    def read_manifest(d: Descriptor) -> bytes:
        if d.digest not in manifests:
            manifests[d.digest] = client.get_manifest(ref.repository, d.digest)[0]
        return manifests[d.digest]

    doc = json_document(body, ref_text, "manifest")
    if media_type in INDEX_TYPES or "manifests" in doc:
        desc = select_manifest(read_manifest, doc, platform, ref_text)
        read_manifest(desc)
    else:
        desc = Descriptor(media_type=media_type, digest=digest, size=len(body))

    def read_blob_or_manifest(d: Descriptor) -> bytes:
        return manifests[d.digest] if d.digest in manifests else blobs.read(d)

    return image_from(ref_text, read_blob_or_manifest, blobs.open_raw, desc)


__all__ = ["open_registry"]
