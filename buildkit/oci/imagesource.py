"""Opening any image as ocilayout's `Image`: `oci:PATH` (an archive or layout folder), `docker:REF` (the engine's,
through its `save`), `registry:REF` (registryimage.py), or, without a prefix, whichever of those the text names."""

from __future__ import annotations

import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Protocol

from buildkit.core.errors import BuildkitError, ImageSourceError
from buildkit.core.platforms import DEFAULT_PLATFORM
from buildkit.oci.ocilayout import Image, OciArchive
from buildkit.oci.registryimage import open_registry


def _looks_like_path(spec: str) -> bool:
    return spec.startswith(("/", "./", "../", "~")) or spec.endswith((".tar", ".oci"))


class EngineImages(Protocol):
    """What opening an engine's image needs of the engine (engine/api.Engine has both)."""

    def image_id(self, ref: str) -> str | None: ...

    def save(self, ref: str, dest: Path) -> Path: ...


def open_image(spec: str, stack: ExitStack, *, platform: str | None = DEFAULT_PLATFORM,
               engine: EngineImages | None = None) -> Image:
    """An image from `oci:PATH`, `docker:REF` (the engine's), `registry:REF`, or, without a prefix,
    an existing path, then an image the engine has, then a registry reference. Without an engine
    (get_engine() is what the flows pass) no engine image is looked at."""
    kind, _, rest = spec.partition(":")
    if kind in ("oci", "docker", "registry") and rest:
        forced, target = kind, rest
    else:
        forced, target = "", spec
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="buildkit-image-")))
    if forced == "oci" or (not forced and (Path(target).expanduser().exists() or _looks_like_path(target))):
        archive = stack.enter_context(OciArchive(Path(target).expanduser()))
        return archive.image(platform, source=spec)
    if forced == "docker" or (not forced and engine is not None and engine.image_id(target) is not None):
        if engine is None:
            raise ImageSourceError(f"{spec}: no engine to read it from")
        try:
            saved = engine.save(target, tmp / "saved.tar")
        except BuildkitError as exc:  # the engine's EngineError, its own message
            raise ImageSourceError(str(exc)) from None
        archive = stack.enter_context(OciArchive(saved))
        return archive.image(platform, source=spec)

    try:
        return open_registry(target, stack, tmp, platform)
    except BuildkitError as exc:
        if forced:
            raise
        raise ImageSourceError(f"{spec}: not a file, not an image in the local engine, and the registry "
                               f"cannot give it ({exc})") from None
