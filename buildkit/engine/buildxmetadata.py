"""buildx's metadata file (--metadata-file), read in one place: DockerEngine's build and bake turn it into the
ImageDigests their Finished carries, so no caller reads buildx's format (and a stand-in engine need not write it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from buildkit.core.boundedread import MiB, read_json_object
from buildkit.core.errors import BuildError
from buildkit.engine.api import Finished, ImageDigests
from buildkit.engine.specs import BuildSession
from buildkit.oci.digest import Digest

METADATA_LIMIT = 16 * MiB  # a bake of every matrix target writes a few KB


def _read(path: Path, what: str) -> dict[str, Any]:
    try:
        return read_json_object(path, METADATA_LIMIT)
    except (OSError, ValueError) as exc:
        raise BuildError(f"{what} wrote no readable metadata file {path}: {exc}") from None


def _digests(meta: Mapping[str, Any], where: str) -> ImageDigests | None:
    """The two digests, each checked (oci/digest.py) before anything names a file or a tag with it."""
    manifest, config = meta.get("containerimage.digest", ""), meta.get("containerimage.config.digest", "")
    if not (manifest or config):
        return None
    return ImageDigests(*(str(Digest.parse(d, where, BuildError)) if d else "" for d in (manifest, config)))


def with_build_images(finished: Finished, session: BuildSession) -> Finished:
    """finished with {"": what a successful `buildx build` made}; BuildError when its file names no image."""
    if finished.code != 0 or session.metadata_file is None:
        return finished
    meta = _read(session.metadata_file, "buildx build")
    made = _digests(meta, f"{session.metadata_file}")
    if made is None:
        raise BuildError(f"buildx build's metadata names no image digest (keys: {', '.join(sorted(meta))})")
    return replace(finished, images={"": made})


def with_bake_images(finished: Finished, session: BuildSession, names: Sequence[str]) -> Finished:
    """finished with {target: what it made} for the targets of a successful `buildx bake` that name an image
    (a target missing here is reported by the bake's caller, per target)."""
    if finished.code != 0 or session.metadata_file is None:
        return finished
    meta = _read(session.metadata_file, "buildx bake")
    made = {}
    for name in names:
        target = meta.get(name)
        digests = _digests(target, f"{session.metadata_file}: {name}") if isinstance(target, dict) else None
        if digests is not None:
            made[name] = digests
    return replace(finished, images=made)


__all__ = ["with_bake_images", "with_build_images"]
