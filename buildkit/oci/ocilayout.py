"""Images as OCI content: an OCI archive or layout folder, an image in the local engine, or in a registry.

Every source gives the same view, an `Image`: the manifest (its digest and bytes), the config
and the layer descriptors, plus a way to open any blob. That is what `buildkit diff` and
`buildkit reproduce` compare, whatever the two images are.

* `OciArchive`: a tar written by `buildx --output type=oci` (or `docker save` on the containerd
  store), or a folder in OCI image layout (oci-layout, index.json, blobs/sha256/...).
* An engine image is read through the engine's `save` (`docker save`) into a temporary archive (on the containerd
  store that archive holds the stored bytes, so the manifest digest is the image's).
* A registry image is read with our registry client (registryimage.py); blobs are streamed to temporary files.

imagesource.open_image opens any of them from its name.

`push_layout` puts an image of an archive into a registry byte for byte (blobs first, then the
manifest), so the registry digest is the archive's manifest digest on any engine.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from buildkit.core.errors import ImageSourceError
from buildkit.core.platforms import DEFAULT_PLATFORM
from buildkit.oci.digest import MAX_DOCUMENT, Digest, check_bytes, read_bounded, verified
from buildkit.oci.layoutfiles import open_inside

if TYPE_CHECKING:
    from buildkit.oci.registry import RegistryClient

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ATTESTATION = "attestation-manifest"


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def json_document(body: bytes | str, where: str, what: str,
                  error: type[Exception] = ImageSourceError) -> dict[str, Any]:
    """A JSON object (an index, manifest or image config) read from an untrusted source; one line naming
    where and what otherwise."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise error(f"{where}: the {what} is not JSON") from None
    if not isinstance(doc, dict):
        raise error(f"{where}: the {what} must be a JSON object, got {type(doc).__name__}")
    for key, kind, expect in (("manifests", list, "a list"), ("layers", list, "a list"), ("config", dict, "an object"),
                              ("mediaType", str, "a string"), ("rootfs", dict, "an object"),
                              ("history", list, "a list")):
        if key in doc and not isinstance(doc[key], kind):
            raise error(f"{where}: the {what}'s {key!r} must be {expect}, got {type(doc[key]).__name__}")
    return doc


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int
    annotations: dict[str, Any] = field(default_factory=dict, compare=False)
    platform: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Descriptor:
        """A descriptor of untrusted content: its digest checked (digest.py), its size a whole number."""
        ok = (isinstance(data, dict) and isinstance(data.get("digest"), str)
              and isinstance(data.get("size"), int) and not isinstance(data["size"], bool) and data["size"] >= 0
              and isinstance(data.get("mediaType", ""), str) and isinstance(data.get("annotations") or {}, dict)
              and isinstance(data.get("platform") or {}, dict))
        if not ok:
            raise ImageSourceError(f"malformed descriptor (expected an object with mediaType, a digest and a "
                                   f"size): {json.dumps(data, default=str)[:120]}")
        digest = str(Digest.parse(data["digest"], "descriptor"))
        return cls(media_type=data.get("mediaType", ""), digest=digest, size=data["size"],
                   annotations=data.get("annotations") or {}, platform=data.get("platform") or {})

    @property
    def parsed(self) -> Digest:
        return Digest.parse(self.digest, "descriptor")


Read = Callable[[Descriptor], bytes]  # a document's bytes, reading at most its declared size and one byte
Open = Callable[[Descriptor], IO[bytes]]  # a blob's stream (checked by the caller: VerifiedReader)


def document(read: Read, desc: Descriptor, where: str, what: str) -> bytes:
    """A manifest, index or config read whole: within MAX_DOCUMENT, its declared size and its digest."""
    name = f"{where}: the {what} {desc.digest[:19]}"
    if desc.size > MAX_DOCUMENT:
        raise ImageSourceError(f"{name} declares {desc.size} bytes, over the limit of {MAX_DOCUMENT} bytes")
    return check_bytes(read(desc), desc.parsed, desc.size, name)


@dataclass
class Image:
    """One platform's image: manifest, config and layers, and how to open its blobs."""
    source: str  # what the user named
    manifest_digest: str
    manifest_bytes: bytes
    manifest: dict[str, Any]
    config_digest: str
    config_bytes: bytes
    config: dict[str, Any]
    layers: list[Descriptor]
    open_blob: Callable[[str], IO[bytes]]  # digest -> readable binary file (caller closes)
    media_type: str = OCI_MANIFEST

    @property
    def labels(self) -> dict[str, str]:
        inner = self.config.get("config") or {}
        labels = inner.get("Labels") if isinstance(inner, dict) else None
        return labels if isinstance(labels, dict) else {}

    @property
    def history(self) -> list[dict[str, Any]]:
        """The history entries that made a layer, in layer order."""
        return [h for h in self.config.get("history") or [] if not h.get("empty_layer")]

    @property
    def diff_ids(self) -> list[str]:
        return list((self.config.get("rootfs") or {}).get("diff_ids") or [])


def _platform_matches(platform: dict[str, Any], wanted: str | None) -> bool:
    if not wanted:
        return True
    parts = wanted.split("/")
    got = [platform.get("os", ""), platform.get("architecture", "")]
    if len(parts) > 2:
        got.append(platform.get("variant", ""))
    return got == parts


def select_manifest(read: Read, index: dict[str, Any], platform: str | None,
                    where: str) -> Descriptor:
    """The image manifest an index stands for: nested indexes are followed, attestation manifests
    skipped, several entries for one digest (one per tag) counted once."""
    seen: dict[str, Descriptor] = {}
    for entry in index.get("manifests") or []:
        desc = Descriptor.from_json(entry)
        if desc.annotations.get("vnd.docker.reference.type") == ATTESTATION:
            continue
        if desc.media_type in INDEX_TYPES:
            nested = json_document(document(read, desc, where, "index"), where, f"index {desc.digest[:19]}")
            desc = select_manifest(read, nested, platform, where)
        elif desc.platform and not _platform_matches(desc.platform, platform):
            continue
        seen.setdefault(desc.digest, desc)
    if not seen:
        raise ImageSourceError(f"{where}: no image manifest{f' for {platform}' if platform else ''} in the index")
    if len(seen) > 1:
        raise ImageSourceError(f"{where}: the index holds {len(seen)} different images; name one by digest "
                               f"({', '.join(d[:19] for d in seen)})")
    return next(iter(seen.values()))


def image_from(source: str, read: Read, open_raw: Open, manifest_desc: Descriptor) -> Image:
    """The image of a manifest: the manifest and config read within their sizes and checked against their
    digests; its blobs opened only as the manifest declares them, each checked as it is read."""
    body = document(read, manifest_desc, source, "manifest")
    manifest = json_document(body, source, f"manifest {manifest_desc.digest[:19]}")
    if "config" not in manifest:
        raise ImageSourceError(f"{source}: the manifest {manifest_desc.digest[:19]} has no config")
    config_desc = Descriptor.from_json(manifest["config"])
    config_bytes = document(read, config_desc, source, "image config")
    config = json_document(config_bytes, source, "image config")
    layers = [Descriptor.from_json(x) for x in manifest.get("layers") or []]
    declared = {d.digest: d for d in [config_desc, *layers]}

    def open_blob(digest: str) -> IO[bytes]:
        desc = declared.get(digest)
        if desc is None:
            raise ImageSourceError(f"{source}: {digest[:19]} is not a blob of the manifest {manifest_desc.digest[:19]}")
        return verified(open_raw(desc), desc.parsed, desc.size, f"{source}: blob {desc.digest[:19]}")

    return Image(source=source, manifest_digest=manifest_desc.digest, manifest_bytes=body, manifest=manifest,
                 config_digest=config_desc.digest, config_bytes=config_bytes, config=config,
                 layers=layers, open_blob=open_blob,
                 media_type=manifest.get("mediaType") or manifest_desc.media_type or OCI_MANIFEST)


class OciArchive:
    """An OCI image layout, as a tar archive or as a folder."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._tar: tarfile.TarFile | None = None
        self._members: dict[str, tarfile.TarInfo] = {}
        if self.path.is_dir():
            if not (self.path / "index.json").is_file():
                raise ImageSourceError(f"{self.path}: a folder without index.json is not an OCI layout")
        elif self.path.is_file():
            try:
                self._tar = tarfile.open(self.path, "r:")
            except tarfile.TarError as exc:
                raise ImageSourceError(f"{self.path}: not a tar archive ({exc})") from None
            for member in self._tar.getmembers():
                self._members[member.name.lstrip("./")] = member
            if "index.json" not in self._members:
                raise ImageSourceError(f"{self.path}: no index.json; not an OCI archive")
        else:
            raise ImageSourceError(f"{self.path}: no such file or folder")

    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()

    def __enter__(self) -> OciArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open_path(self, name: str) -> IO[bytes]:
        """A file of the layout: a regular file inside the folder (layoutfiles.py), a member of the archive."""
        if self._tar is None:
            return open_inside(self.path, name)
        member = self._members.get(name)
        fh = self._tar.extractfile(member) if member is not None and (member.isreg() or member.islnk()) else None
        if fh is None:
            raise ImageSourceError(f"{self.path}: {name} is missing")
        return fh

    def open_raw(self, desc: Descriptor) -> IO[bytes]:
        return self.open_path(str(desc.parsed.blob_path()))

    def read_raw(self, desc: Descriptor) -> bytes:
        with self.open_raw(desc) as fh:
            return read_bounded(fh, desc.size, f"{self.path}: blob {desc.digest[:19]}")

    def open_blob(self, digest: str, size: int) -> IO[bytes]:
        """The blob's stream, checked against its digest and size as it is read (digest.VerifiedReader)."""
        desc = Descriptor("", digest, size)
        return verified(self.open_raw(desc), desc.parsed, size, f"{self.path}: blob {digest[:19]}")

    def read_blob(self, digest: str, size: int | None = None) -> bytes:
        """A blob read whole (within size, else MAX_DOCUMENT), checked against its digest."""
        parsed = Digest.parse(digest, str(self.path))
        with self.open_raw(Descriptor("", digest, 0)) as fh:
            body = read_bounded(fh, MAX_DOCUMENT if size is None else size, f"{self.path}: blob {digest[:19]}")
        return check_bytes(body, parsed, size, f"{self.path}: blob {digest[:19]}")

    def index(self) -> dict[str, Any]:
        with self.open_path("index.json") as fh:
            body = read_bounded(fh, MAX_DOCUMENT, f"{self.path}: index.json")
        return json_document(body, str(self.path), "index.json")

    def image(self, platform: str | None = DEFAULT_PLATFORM, source: str | None = None) -> Image:
        where = source or str(self.path)
        desc = select_manifest(self.read_raw, self.index(), platform, where)
        return image_from(where, self.read_raw, self.open_raw, desc)

    def manifest_digest(self, platform: str | None = DEFAULT_PLATFORM) -> str:
        return select_manifest(self.read_raw, self.index(), platform, str(self.path)).digest


# --------------------------------------------------------------------------- pushing an archive

def push_layout(client: RegistryClient, repo: str, image: Image, tags: list[str] | tuple[str, ...]) -> str:
    """Upload the image's blobs (skipping those the registry has) and put its manifest, byte for
    byte, under every tag; returns the manifest digest (the archive's)."""
    if not tags:
        raise ImageSourceError("push_layout needs at least one tag")
    blobs = [(image.config_digest, len(image.config_bytes))] + [(d.digest, d.size) for d in image.layers]
    for digest, size in dict(blobs).items():
        if client.blob_exists(repo, digest):
            continue
        with image.open_blob(digest) as fh:
            client.upload_blob(repo, digest, fh, size)
    for tag in tags:
        got = client.put_manifest(repo, tag, image.manifest_bytes, image.media_type)
        if got != image.manifest_digest:
            raise ImageSourceError(f"the registry stored {got} for {repo}:{tag}, not {image.manifest_digest}")
    return image.manifest_digest


def copy_blob(src: IO[bytes], dest: IO[bytes]) -> str:
    """Copy and hash; returns the sha256 digest of what was copied."""
    digest = hashlib.sha256()
    while chunk := src.read(1 << 20):
        digest.update(chunk)
        dest.write(chunk)
    return "sha256:" + digest.hexdigest()


__all__ = ["Descriptor", "Image", "OciArchive", "copy_blob", "push_layout",
           "select_manifest", "sha256_digest"]
