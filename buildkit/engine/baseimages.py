"""Base images: which digest each one is, and how it reaches BuildKit.

BuildKit resolves every ``FROM name@digest`` through the registry that the name points at, even
when the engine holds that exact image; where the machine's resolver fails hard (no DNS, an
air-gapped site, a name under a registry that does not exist) the build then stops. So:

* an image that its registry has, with the digest the engine has (or that only the registry has),
  is pinned as ``FROM ref@sha256:...``: BuildKit pulls or reuses it as before;
* an image that is only in the engine (imported, debootstrapped, loaded from an archive, built
  here, or pulled once from a registry that cannot be asked now) is exported once with ``docker
  save`` into an OCI layout under ``<cache>/base-images/<digest>`` (its platforms are checked there)
  and reaches the build by content, no registry contacted:
  - on the engine's own builder (buildx's ``docker`` driver, which reads the engine's images by
    name) as ``FROM 127.0.0.1:1/llama-buildkit/base:<digest hex>``, a name buildkit gives that one
    image in the engine, under a registry that refuses connections (so a missing name fails at once
    and never reaches a network). BuildKit then knows it as the base image and keeps its layers as
    they are: with the named context below, the reproducible exporter (rewrite-timestamp) rewrote and
    re-compressed every base layer on every export, cached or not (5.5 s of a 7 s export of a
    50 MB base here; a CUDA base is GBs), and the image's base layers differed from the base's;
  - on any other builder (a docker-container, remote or Kubernetes builder has no view of the
    engine's images) as the named context ``oci-layout://DIR@sha256:...``;
* an image that is neither stops the build before any work, with one line naming the image, what
  was tried and how to provide it.

Either way the lock, the labels and the build key record the configured name and its digest.
"""

from __future__ import annotations

import json
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from buildkit.core.errors import BaseImageError, BuildkitError
from buildkit.core.wholefile import scratch_dir
from buildkit.core.treewalk import remove_tree
from buildkit.engine.api import Engine, EngineError, Images
from buildkit.oci.digest import MAX_DOCUMENT, Digest, check_bytes, read_bounded
from buildkit.oci.imageref import parse_image_ref
from buildkit.oci.layoutfiles import open_inside
from buildkit.oci.registry import client_for

LAYOUT_DIR = "base-images"
_COMPLETE = ".complete"
PINNED_REPOSITORY = "127.0.0.1:1/llama-buildkit/base"  # engine-only bases, by digest (port 1 refuses)
LAYOUT_CONTEXT_PREFIX = "local-base-"  # a base from an OCI layout: this and its digest's first 12 hex digits


@dataclass(frozen=True)
class BaseSource:
    """A resolved base image: what is recorded (ref and digest: the plan's BaseImage) and how the build
    gets it (layout or registry)."""

    ref: str
    digest: str  # repo digest where known, else the local image id, else ""
    layout: Path | None = None  # OCI layout folder when the image reaches the build by content
    pinned: str = ""  # its name in the engine's store, pinned to digest (the engine's own builder reads it)

    @property
    def context_name(self) -> str:
        return f"{LAYOUT_CONTEXT_PREFIX}{self.digest.removeprefix('sha256:')[:12]}"

    @property
    def from_ref(self) -> str:
        """What the Dockerfile's FROM line names."""
        if self.pinned:
            return self.pinned
        if self.layout is not None:
            return self.context_name
        return self.ref if "@" in self.ref else f"{self.ref}@{self.digest}"

    def named_context(self) -> tuple[str, str] | None:
        if self.layout is None or self.pinned:
            return None
        return self.context_name, f"oci-layout://{self.layout}@{self.digest}"


def local_digest(engine: Images, ref: str) -> str:
    """The engine's digest of ref (its repo digest, else its id); "" when the engine lacks it (or
    there is no engine: every image then has to come from its registry)."""
    info = engine.image(ref)
    if info is None:
        return ""
    return info.repo_digests[0].split("@", 1)[1] if info.repo_digests else info.id


def registry_digest(ref: str, timeout: float = 10) -> tuple[str, str]:
    """(digest, "") from ref's registry, or ("", why it could not be had)."""
    try:
        image = parse_image_ref(ref)
        with client_for(image.registry, retries=1, timeout=timeout) as client:
            info = client.head_manifest(image.repository, image.reference)
    except BuildkitError as exc:
        return "", str(exc)
    if info is None:
        return "", f"{image.registry} has no {image.repository}:{image.reference}"
    return info.digest, ""


def export_layout(engine: Engine, ref: str, digest: str, cache: Path) -> Path:
    """The OCI layout of the engine's ref under cache (made once per digest, atomically)."""
    dest = cache / LAYOUT_DIR / Digest.parse(digest, f"base image {ref}", BaseImageError).file_name()
    if (dest / _COMPLETE).is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with scratch_dir(dest.parent, "export") as tmp:  # a killed run's (a whole image) is swept by the next
        archive = tmp / "image.tar"
        try:
            engine.save(ref, archive)
        except EngineError as exc:  # the engine's own message
            raise BaseImageError(f"base image {ref}: {exc}") from None
        layout = tmp / "layout"
        with tarfile.open(archive) as tar:
            tar.extractall(layout, filter="data")
        archive.unlink()
        digests = layout_digests(layout)
        if digest not in digests:
            raise BaseImageError(f"base image {ref}: docker save wrote {', '.join(digests) or 'no manifest'}, "
                                 f"not {digest}; this engine's store cannot export it by content "
                                 "(use the containerd image store, or a registry mirror)")
        (layout / _COMPLETE).write_text(ref + "\n")  # scratch: the folder is renamed into place whole
        remove_tree(dest)
        os.replace(layout, dest)
    return dest


def pinned_name(digest: str) -> str:
    return f"{PINNED_REPOSITORY}:{digest.removeprefix('sha256:')}"


def pin_in_engine(engine: Engine, ref: str, digest: str) -> str:
    """ref's image named by its digest in the engine (pinned_name), checked to be that image."""
    name = pinned_name(digest)
    try:
        engine.tag(ref, name)
    except EngineError as exc:
        raise BaseImageError(f"base image {ref}: {exc}") from None
    got = local_digest(engine, name)
    if got != digest:
        raise BaseImageError(f"base image {ref} changed while it was being resolved ({digest} became "
                             f"{got or 'nothing'}); run the build again")
    return name


def engine_builder(engine: Engine, builder: str) -> bool:
    """Whether buildx's builder (empty: the current one) is the engine's own, the `docker` driver,
    which reads the engine's images by name. False when it cannot be told (the layout is used)."""
    try:
        described = engine.inspect_builder(builder)
    except EngineError:
        return False
    drivers = [line.split(":", 1)[1].strip() for line in described.splitlines() if line.startswith("Driver:")]
    return drivers[:1] == ["docker"]


def layout_digests(layout: Path) -> list[str]:
    """The manifest digests an OCI layout's index.json names."""
    try:
        index = json.loads((layout / "index.json").read_text())
        return [m["digest"] for m in index.get("manifests", []) if isinstance(m, dict) and "digest" in m]
    except (OSError, ValueError, TypeError):
        return []


# How a machine that cannot pull a base image gets one: said by the build's refusal and by doctor's warning.
OFFLINE_BASE_HINT = ("load it (docker load -i FILE, or docker import); or make a Debian base here, `buildkit base "
                     "debian --tag local/debian:bookworm`, and build on it with `--os-image local/debian:bookworm`, "
                     "adding `--provider wheels` for a CUDA arch (the CUDA toolkit from NVIDIA's PyPI wheels instead "
                     "of NVIDIA's devel and runtime images; --os-image alone changes only a cpu build); or name it "
                     "under a mirror registry you can reach (--devel-image, --runtime-image)")


def _missing(ref: str, why: str) -> BaseImageError:
    return BaseImageError(f"base image {ref} is not in the engine and its registry cannot provide it ({why}); "
                          + OFFLINE_BASE_HINT)


def resolve_base_images(refs: list[str], cache: Path | None = None, *, ask_registry: bool = True,
                        builder: str | None = None, engine: Engine) -> tuple[BaseSource, ...]:
    """Each distinct ref resolved to a BaseSource. With a cache folder, engine-only images are
    exported to OCI layouts there, and with builder (the buildx builder name, "" the current one)
    pinned by name in the engine when that builder is the engine's own; without a cache folder
    (planning only) they are only recorded."""
    in_engine: bool | None = None  # asked once, when an engine-only image needs it
    out = []
    for ref in dict.fromkeys(refs):
        local = local_digest(engine, ref)
        remote, why = registry_digest(ref, timeout=5 if local else 10) if ask_registry else ("", "not asked")
        if local and remote != local:
            layout = export_layout(engine, ref, local, cache) if cache is not None else None
            if layout is not None and builder is not None and in_engine is None:
                in_engine = engine_builder(engine, builder)
            pinned = pin_in_engine(engine, ref, local) if layout is not None and in_engine else ""
            out.append(BaseSource(ref, local, layout, pinned))
        elif remote:
            out.append(BaseSource(ref, remote))
        elif ask_registry:
            raise _missing(ref, why)
        else:
            out.append(BaseSource(ref, ""))
    return tuple(out)


def _layout_document(layout: Path, d: object) -> dict[str, Any]:
    """A JSON object of the layout: a regular file inside it, within 4 MiB, that matches its digest
    (oci/digest.py); {} when it is not one."""
    try:
        digest = Digest.parse(d)
        with open_inside(layout, str(digest.blob_path())) as fh:
            doc = json.loads(check_bytes(read_bounded(fh, MAX_DOCUMENT, str(d)), digest, None, str(d)))
    except (BuildkitError, ValueError, TypeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def offered_platforms(layout: Path, digest: str) -> tuple[str, ...]:
    """The platforms (os/arch[/variant]) the image `digest` of an OCI layout offers: its index's entries
    (attestation manifests skipped, nested indexes followed), or its config's os and architecture.
    () when the layout cannot be read (then nothing is checked: the build says what it finds)."""
    def blob(d: str) -> dict[str, Any]:
        return _layout_document(layout, d)

    def walk(doc: dict[str, Any], depth: int = 0) -> list[str]:
        if isinstance(doc.get("manifests"), list) and depth < 4:
            found: list[str] = []
            for entry in doc["manifests"]:
                if not isinstance(entry, dict):
                    continue
                plat, notes = entry.get("platform"), entry.get("annotations") or {}
                if isinstance(notes, dict) and notes.get("vnd.docker.reference.type") == "attestation-manifest":
                    continue
                if isinstance(plat, dict) and plat.get("architecture") not in (None, "unknown"):
                    found.append("/".join(str(plat[k]) for k in ("os", "architecture", "variant") if plat.get(k)))
                elif isinstance(entry.get("digest"), str):
                    found += walk(blob(entry["digest"]), depth + 1)
            return found
        config = doc.get("config")
        if isinstance(config, dict) and isinstance(config.get("digest"), str):
            oci_config = blob(config["digest"])
            if oci_config.get("architecture"):
                return ["/".join(str(oci_config[k]) for k in ("os", "architecture", "variant") if oci_config.get(k))]
        return []

    return tuple(dict.fromkeys(walk(blob(digest))))


def platform_offered(offered: tuple[str, ...], wanted: str) -> bool:
    """linux/arm64 is offered by linux/arm64 and linux/arm64/v8 (one CPU); linux/amd64 by linux/amd64."""
    os_, arch = wanted.split("/")[:2]
    return any(o.split("/")[:2] == [os_, arch] for o in offered)


def check_base_platforms(sources: tuple[BaseSource, ...], platforms: tuple[str, ...], why: str) -> None:
    """Each base image read by content must offer every platform the build runs it on: one line naming
    the image, the platforms it has and the one asked for, before any work. (An image pinned in its
    registry is checked by BuildKit when it pulls it.)"""
    for source in sources:
        if source.layout is None:
            continue
        offered = offered_platforms(source.layout, source.digest)
        missing = [p for p in platforms if offered and not platform_offered(offered, p)]
        if missing:
            raise BaseImageError(
                f"base image {source.ref} offers {', '.join(offered)}, not {missing[0]} ({why}); "
                f"choose a base image that has {' and '.join(platforms)}")


def image_configs(layout: Path, digest: str, depth: int = 0) -> list[dict[str, Any]]:
    """The image configurations of digest in an OCI layout: its own, or each of its index's images (attestation
    manifests skipped, nested indexes followed); those that cannot be read are left out."""
    document = _layout_document(layout, digest)
    if isinstance(document.get("manifests"), list):
        return [config for entry in document["manifests"] if depth < 4 and isinstance(entry, dict)
                and not (isinstance(entry.get("annotations"), dict)
                         and entry["annotations"].get("vnd.docker.reference.type") == "attestation-manifest")
                for config in image_configs(layout, str(entry.get("digest")), depth + 1)]
    config = document.get("config")
    return [_layout_document(layout, config.get("digest"))] if isinstance(config, dict) else []


def undated_history(config: dict[str, Any]) -> int:
    """How many of an image's layers and history entries BuildKit would date itself: entries without a
    `created` time, and layers that no history entry stands for."""
    listed, rootfs = config.get("history"), config.get("rootfs")
    history = [h for h in listed if isinstance(h, dict)] if isinstance(listed, list) else []
    diffs = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    diffs = diffs if isinstance(diffs, list) else []
    with_layer = sum(1 for h in history if not h.get("empty_layer"))
    undated = sum(1 for h in history if not isinstance(h.get("created"), str) or not h["created"])
    return undated + max(0, len(diffs) - with_layer)


def check_base_history(sources: tuple[BaseSource, ...]) -> None:
    """Each base image read by content must date every history entry: BuildKit gives an entry without a time
    the time its own cache first held the base's layer, so the image built on it would differ on an engine that
    has not seen the base (issue 47). One line naming the image, before any work."""
    for source in sources:
        if source.layout is None:
            continue
        undated = max((undated_history(c) for c in image_configs(source.layout, source.digest)), default=0)
        if undated:
            raise BaseImageError(
                f"base image {source.ref} has {undated} history entr{'y' if undated == 1 else 'ies'} without a "
                "created time, which BuildKit fills with the time its cache first held the base: the image would "
                "not reproduce on another engine; remake it with `buildkit base debian` (this version dates it) "
                "or give it one with times (docker import and docker build date theirs)")
