"""Image references (`[registry/]repository[:tag][@digest]`), normalised the way Docker does (pure).

* No registry means Docker Hub: `busybox` is `docker.io/library/busybox`; `index.docker.io` is
  another name for `docker.io`.
* The first path component is a registry only when it contains `.` or `:`, is `localhost`, or has
  upper-case letters (repositories are lower case); so `localhost:5000/app` and `ghcr.io/o/r` name
  registries while `user/app` is the Docker Hub repository `user/app`.
* A `:` after the last `/` starts the tag (`host:5000/app` has no tag, `host:5000/app:5000` has);
  `@sha256:<64 hex>` pins a digest, with or without a tag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from buildkit.core.errors import RegistryError

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
DOCKER_HUB_CREDENTIAL_KEY = "https://index.docker.io/v1/"
_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
PATH_COMPONENT = re.compile(rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*")
REPOSITORY = re.compile(rf"{PATH_COMPONENT.pattern}(?:/{PATH_COMPONENT.pattern})*")
TAG = re.compile(r"[\w][\w.-]{0,127}")
DIGEST = re.compile(r"(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})")
_HOST_LABEL = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
REGISTRY = re.compile(rf"(?:{_HOST_LABEL}(?:\.{_HOST_LABEL})*|\[[0-9a-fA-F:.]+\])(?::[0-9]{{1,5}})?")
MAX_NAME_LENGTH = 255


@dataclass(frozen=True)
class ImageRef:
    registry: str  # host[:port] as written, docker.io for Docker Hub
    repository: str  # path below the registry, library/x for official Docker Hub images
    tag: str | None
    digest: str | None  # sha256:<hex>

    @property
    def name(self) -> str:
        """registry/repository, without tag or digest."""
        return f"{self.registry}/{self.repository}"

    @property
    def reference(self) -> str:
        """What to ask the registry for: the digest if pinned, else the tag, else `latest`."""
        return self.digest or self.tag or "latest"

    @property
    def api_host(self) -> str:
        """host[:port] that serves the registry API (Docker Hub's is registry-1.docker.io)."""
        return registry_api_host(self.registry)

    @property
    def credential_key(self) -> str:
        """The key Docker stores the login under: Docker Hub's URL or host[:port]."""
        return registry_credential_key(self.registry)

    def with_tag(self, tag: str) -> ImageRef:
        if not TAG.fullmatch(tag):
            raise RegistryError(f"invalid tag {tag!r}: up to 128 of letters, digits, '_', '.' and '-', "
                                "not starting with '.' or '-'")
        return replace(self, tag=tag, digest=None)

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def is_docker_hub(host: str) -> bool:
    return host.lower() in _HUB_ALIASES


def registry_api_host(registry: str) -> str:
    return DOCKER_HUB_API if is_docker_hub(registry) else registry


def registry_credential_key(registry: str) -> str:
    return DOCKER_HUB_CREDENTIAL_KEY if is_docker_hub(registry) else registry


def _bad(text: str, why: str) -> RegistryError:
    return RegistryError(f"invalid image reference {text!r}: {why}")


def parse_image_ref(text: str) -> ImageRef:
    """Parse and normalise an image reference; RegistryError (one line) when it is malformed."""
    if not isinstance(text, str) or not text.strip():
        raise _bad(str(text), "it is empty")
    if text != text.strip() or any(c.isspace() for c in text):
        raise _bad(text, "it contains white space")
    rest, digest = text, None
    if "@" in rest:
        rest, _, digest = rest.partition("@")
        if not DIGEST.fullmatch(digest):
            raise _bad(text, "the digest must be sha256: followed by 64 lower-case hex digits")
    tag = None
    colon = rest.rfind(":")
    if colon > rest.rfind("/"):  # a ':' after the last '/' separates the tag (else it is a port)
        rest, tag = rest[:colon], rest[colon + 1:]
        if not TAG.fullmatch(tag):
            raise _bad(text, f"tag {tag!r} must be 1-128 letters, digits, '_', '.' or '-', "
                             "not starting with '.' or '-'")
    if not rest:
        raise _bad(text, "the repository name is missing")
    slash = rest.find("/")
    first = rest[:slash] if slash >= 0 else ""
    if slash >= 0 and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        registry, repository = first, rest[slash + 1:]
        if not REGISTRY.fullmatch(registry):
            raise _bad(text, f"{registry!r} is not a valid registry host[:port]")
    else:
        registry, repository = DOCKER_HUB, rest
    if is_docker_hub(registry) and registry != "registry-1.docker.io":
        registry = DOCKER_HUB
    if not repository:
        raise _bad(text, "the repository name is missing")
    if repository != repository.lower():
        raise _bad(text, "repository names must be lower case")
    if not REPOSITORY.fullmatch(repository):
        raise _bad(text, f"repository {repository!r} must be '/'-separated components of a-z, 0-9 "
                         "joined by '.', '_', '__' or '-'")
    if registry == DOCKER_HUB and "/" not in repository:
        repository = f"library/{repository}"
    if len(f"{registry}/{repository}") > MAX_NAME_LENGTH:
        raise _bad(text, f"the name is longer than {MAX_NAME_LENGTH} characters")
    return ImageRef(registry=registry, repository=repository, tag=tag, digest=digest)
