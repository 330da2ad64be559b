"""What a publication publishes: one `Artifact`, an `Image` or an `Index`, and what publishing it gave.

Every flow that publishes (`build --push`, `push`, a multi-platform build, bake's matrix, the nightly,
the nightly's CI jobs, `promote`) hands release/publish.publish() one of these with its tags; where
its bytes come from decides how they reach the registry:

- an `Image` with `archive`: the OCI archive the build wrote (the bytes verify checked), byte for byte;
- an `Image` with `engine_ref`: the engine's copy, by `docker push` (the classic image store);
- an `Index` with `archive`: a multi-platform OCI archive, each platform's manifest by digest, then the index;
- an `Index` with `document`: an index over manifests the registry already holds (the nightly's jobs);
- either with neither: already in the registry at `digest` (a build key found there, promote): only tags move.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from buildkit.oci.imageref import ImageRef
from buildkit.oci.registry import RegistryClient


@dataclass(frozen=True)
class Image:
    digest: str  # the manifest digest the registry must end up with ("" when the engine cannot say: docker push)
    archive: Path | None = None
    engine_ref: str | None = None
    platform: str = ""

    def __post_init__(self) -> None:
        if self.archive is not None and self.engine_ref is not None:
            raise ValueError("an Image comes from its archive or from the engine, not both")


@dataclass(frozen=True)
class Index:
    digest: str
    archive: Path | None = None
    document: bytes | None = None
    platforms: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.archive is not None and self.document is not None:
            raise ValueError("an Index comes from its archive or from its document, not both")


Artifact = Image | Index


def in_registry(artifact: Artifact) -> bool:
    """Nothing to upload: the registry has the artifact's digest already."""
    if isinstance(artifact, Image):
        return artifact.archive is None and artifact.engine_ref is None
    return artifact.archive is None and artifact.document is None


@dataclass(frozen=True)
class Published:
    digest: str  # the registry's
    added: tuple[str, ...]  # tags this run created or moved
    pushed: tuple[str, ...]  # every reference of the publication (repository:tag)
    signed: tuple[str, ...] = ()  # the signature and attestation references written (repository:sha256-….sig)

    @property
    def tags(self) -> tuple[str, ...]:
        """Every tag of the publication (a reference's tag follows its last colon: a port comes before a /)."""
        return tuple(ref.rsplit(":", 1)[1] for ref in self.pushed)


# publish()'s signing step (flows/unit/signpublished.py makes them of a release/signer.Signer): called once the
# registry holds the artifact by digest and before any tag points at it, signs the digest (and attaches what
# it attests); returns the references it wrote.
SignStep = Callable[[RegistryClient, ImageRef, str], tuple[str, ...]]


__all__ = ["Artifact", "Image", "Index", "Published", "SignStep", "in_registry"]
