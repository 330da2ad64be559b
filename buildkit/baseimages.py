"""Digests of the base images a build starts from: the engine's copy first, else the registry.

A digest that cannot be found is recorded as "" (and the build key then only knows the
reference): a build never fails because a registry cannot be asked.
"""

from __future__ import annotations

from .errors import BuildkitError
from .lock import BaseImage


def local_digest(client, ref: str) -> str:
    """RepoDigest of a pulled image, else the local image id; "" when the engine lacks it."""
    if client is None:
        return ""
    try:
        attrs = client.images.get(ref).attrs
    except Exception:
        return ""
    repo_digests = attrs.get("RepoDigests") or []
    return repo_digests[0].split("@", 1)[1] if repo_digests else attrs.get("Id", "")


def registry_digest(ref: str) -> str:
    from .imageref import parse_image_ref
    from .registry import client_for

    try:
        image = parse_image_ref(ref)
        with client_for(image.registry, retries=1, timeout=10) as client:
            info = client.head_manifest(image.repository, image.reference)
    except BuildkitError:
        return ""
    return info.digest if info else ""


def resolve_base_images(refs: list[str], *, ask_registry: bool = True) -> tuple[BaseImage, ...]:
    try:
        import docker

        client = docker.from_env()
    except Exception:
        client = None
    out = []
    for ref in dict.fromkeys(refs):
        digest = local_digest(client, ref) or (registry_digest(ref) if ask_registry else "")
        out.append(BaseImage(ref=ref, digest=digest))
    return tuple(out)
