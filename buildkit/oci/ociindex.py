"""One OCI image index over several single-platform images (pure, but for reading and writing archives).

A multi-platform build is one ordinary build per platform, each with its own verified OCI archive;
this module puts their manifests under one `application/vnd.oci.image.index.v1+json`:

* `index_document`: the index bytes. Manifests in the order the platforms were given (the order
  the user wrote them), each descriptor with its platform {os, architecture[, variant]}; the JSON
  is written with sorted keys and no spaces, so the same manifests in the same order always give
  the same index digest. The index carries the annotations every one of its manifests carries
  with the same value (the OCI labels of the build: source, revision, version, ...); a value that
  differs between platforms (a base image's digest, a description naming the variant) stays on the
  manifests. They come from the manifests themselves, so assembling the index again (reproduce,
  the nightly's assemble) gives the same bytes; manifests without annotations give an index without.
* `write_index_archive`: one OCI archive (tar) holding the index and every blob of every
  manifest, with fixed member order, times and owners (the same inputs give the same bytes).
  Its index.json names the tags (`io.containerd.image.name`), so `docker load` on the containerd
  store gives each tag the index digest.
* `push_index`: every platform's blobs and manifest (by digest), then the index byte for byte
  under the tags; the registry's digest of the tags is the index digest.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from buildkit.core.errors import ImageSourceError
from buildkit.oci.digest import Digest
from buildkit.oci.ocilayout import (OCI_INDEX, Image, OciArchive, json_document, sha256_digest, Descriptor, document,
                                    image_from, push_layout)

if TYPE_CHECKING:
    from buildkit.oci.registry import RegistryClient

IMAGE_NAME = "io.containerd.image.name"
REF_NAME = "org.opencontainers.image.ref.name"


@dataclass(frozen=True)
class PlatformManifest:
    """One platform's image manifest as the index lists it."""
    platform: str  # linux/arm64 or linux/arm64/v8
    digest: str
    size: int
    media_type: str
    annotations: tuple[tuple[str, str], ...] = ()  # the manifest's own

    @classmethod
    def of_body(cls, platform: str, digest: str, body: bytes, media_type: str) -> PlatformManifest:
        """The entry of a manifest read as bytes (a registry's)."""
        manifest = json_document(body, f"{platform} {digest[:19]}", "image manifest")
        return cls(platform, digest, len(body), media_type, manifest_annotations(manifest))

    def descriptor(self) -> dict[str, Any]:
        parts = self.platform.split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise ImageSourceError(f"platform {self.platform!r} is not of the form os/arch[/variant]")
        platform = {"os": parts[0], "architecture": parts[1]}
        if len(parts) == 3:
            platform["variant"] = parts[2]
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size, "platform": platform}


def manifest_annotations(manifest: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    found = manifest.get("annotations")
    if not isinstance(found, dict):
        return ()
    return tuple(sorted((k, v) for k, v in found.items() if isinstance(k, str) and isinstance(v, str)))


def shared_annotations(manifests: Sequence[PlatformManifest]) -> dict[str, str]:
    """The annotations every manifest carries, each with one value."""
    shared = set(manifests[0].annotations)
    for m in manifests[1:]:
        shared &= set(m.annotations)
    return dict(sorted(shared))


def index_document(manifests: Sequence[PlatformManifest]) -> bytes:
    """The index's bytes: manifests in the given order; deterministic (sorted keys, compact)."""
    if not manifests:
        raise ImageSourceError("an image index needs at least one manifest")
    platforms = [m.platform for m in manifests]
    if len(set(platforms)) != len(platforms):
        raise ImageSourceError(f"an image index lists each platform once, got {', '.join(platforms)}")
    doc: dict[str, Any] = {"schemaVersion": 2, "mediaType": OCI_INDEX,
                           "manifests": [m.descriptor() for m in manifests]}
    annotations = shared_annotations(manifests)
    if annotations:
        doc["annotations"] = annotations
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def platform_manifest(platform: str, image: Image) -> PlatformManifest:
    return PlatformManifest(platform=platform, digest=image.manifest_digest, size=len(image.manifest_bytes),
                            media_type=image.media_type, annotations=manifest_annotations(image.manifest))


def index_digest_of(archives: Sequence[tuple[str, Path]]) -> str:
    """The digest of the index over (platform, single-platform OCI archive) pairs, in that order."""
    manifests = []
    for platform, path in archives:
        with OciArchive(path) as layout:
            manifests.append(platform_manifest(platform, layout.image(None)))
    return sha256_digest(index_document(manifests))


def _add(tar: tarfile.TarFile, name: str, size: int, fh: IO[bytes]) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uid, info.gid = size, 0, 0o644, 0, 0
    info.uname = info.gname = ""
    tar.addfile(info, fh)


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mtime, info.mode, info.uid, info.gid = tarfile.DIRTYPE, 0, 0o755, 0, 0
    tar.addfile(info)


def write_index_archive(archives: Sequence[tuple[str, Path]], dest: Path, tags: Sequence[str] = ()) -> str:
    """Write one OCI archive of the index over (platform, archive) pairs, with every blob of each
    image; returns the index digest. tags: full references docker load gives the index."""
    with ExitStack() as stack:
        images = [(p, stack.enter_context(OciArchive(path)).image(None)) for p, path in archives]
        index = index_document([platform_manifest(p, image) for p, image in images])
        digest = sha256_digest(index)
        blobs: dict[str, tuple[int, Image]] = {}  # digest -> (size, image that has it)
        for _, image in images:
            blobs.setdefault(image.manifest_digest, (len(image.manifest_bytes), image))
            blobs.setdefault(image.config_digest, (len(image.config_bytes), image))
            for layer in image.layers:
                blobs.setdefault(layer.digest, (layer.size, image))
        descriptor = {"mediaType": OCI_INDEX, "digest": digest, "size": len(index)}
        entries = [dict(descriptor, annotations={IMAGE_NAME: t, REF_NAME: t.rsplit(":", 1)[-1]}) for t in tags]
        outer = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries or [descriptor]},
                           sort_keys=True, separators=(",", ":")).encode()
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            layout = json.dumps({"imageLayoutVersion": "1.0.0"}).encode()
            _add(tar, "oci-layout", len(layout), io.BytesIO(layout))
            _add(tar, "index.json", len(outer), io.BytesIO(outer))
            _add_dir(tar, "blobs/")
            _add_dir(tar, "blobs/sha256/")
            _add(tar, str(Digest.parse(digest).blob_path()), len(index), io.BytesIO(index))
            for blob in sorted(blobs):
                size, image = blobs[blob]
                name = str(Digest.parse(blob, str(dest)).blob_path())
                if blob == image.manifest_digest:
                    _add(tar, name, size, io.BytesIO(image.manifest_bytes))
                    continue
                with image.open_blob(blob) as fh:
                    _add(tar, name, size, fh)
        tmp.replace(dest)
    return digest


def push_index(client: RegistryClient, repo: str, archive: Path, tags: Sequence[str]) -> str:
    """Push an index archive (write_index_archive's): each image's blobs and manifest by digest,
    then the index, byte for byte, under every tag; returns the index digest (the registry's)."""
    if not tags:
        raise ImageSourceError("push_index needs at least one tag")
    with OciArchive(archive) as layout:
        outer = layout.index()
        top = Descriptor.from_json((outer.get("manifests") or [{}])[0])
        index = document(layout.read_raw, top, str(archive), "index")  # within its size, checked against its digest
        for entry in json_document(index, str(archive), "image index").get("manifests") or []:
            image = image_from(str(archive), layout.read_raw, layout.open_raw, Descriptor.from_json(entry))
            push_layout(client, repo, image, [image.manifest_digest])
        for tag in tags:
            got = client.put_manifest(repo, tag, index, OCI_INDEX)
            if got != top.digest:
                raise ImageSourceError(f"the registry stored {got} for {repo}:{tag}, not {top.digest}")
    return top.digest
