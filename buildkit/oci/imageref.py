"""Image references (`[registry/]repository[:tag][@digest]`), normalised the way Docker does (pure).

* No registry means Docker Hub: `busybox` is `docker.io/library/busybox`; `index.docker.io` is
  another name for `docker.io`.
* The first path component is a registry only when it contains `.` or `:`, is `localhost`, or has
  upper-case letters (repositories are lower case); so `localhost:5000/app` and `ghcr.io/o/r` name
  registries while `user/app` is the Docker Hub repository `user/app`.
* A `:` after the last `/` starts the tag (`host:5000/app` has no tag, `host:5000/app:5000` has);
  `@sha256:<64 hex>` pins a digest, with or without a tag.

This is buildkit's one grammar of references: the plan (image.name, base images), the tag
scheme, publish, promote and the registry client all check and split references here.
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
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # Docker's [\w][\w.-]{0,127}, ASCII \w
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
        if not is_tag(tag):
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


class InvalidReference(RegistryError):
    """A malformed reference; `why` is the reason alone, for callers that word their own error."""

    def __init__(self, text: str, why: str):
        super().__init__(f"invalid image reference {text!r}: {why}")
        self.text, self.why = text, why


def split_reference(text: str) -> tuple[str, str | None, str | None]:
    """(name, tag, digest) as written, nothing checked: a ':' after the last '/' starts the tag,
    '@' the digest. `127.0.0.1:5000/n/t:x` is (`127.0.0.1:5000/n/t`, `x`, None)."""
    rest, digest = text, None
    if "@" in rest:
        rest, _, digest = rest.partition("@")
    colon = rest.rfind(":")
    if colon > rest.rfind("/"):  # a ':' after the last '/' separates the tag (else it is a port)
        return rest[:colon], rest[colon + 1:], digest
    return rest, None, digest


def tag_of(text: str) -> str | None:
    """The tag of a reference as written (None when it has none)."""
    return split_reference(text)[1]


def name_of(text: str) -> str:
    """A reference as written without its tag and digest: `host:5000/app:t` -> `host:5000/app`."""
    return split_reference(text)[0]


def is_tag(text: str) -> bool:
    """Docker's tag grammar: 1-128 of ASCII letters, digits, '_', '.' and '-', not starting with '.' or '-'."""
    return isinstance(text, str) and TAG.fullmatch(text) is not None


def _registry_part(name: str) -> str | None:
    """The registry a name (no tag, no digest) starts with, None when it names none (Docker Hub)."""
    slash = name.find("/")
    first = name[:slash] if slash >= 0 else ""
    if slash >= 0 and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        return first
    return None


def names_registry(text: str) -> bool:
    """Whether a reference names its registry (`localhost:5000/app`, `ghcr.io/o/r`), not Docker Hub by default."""
    return _registry_part(name_of(text)) is not None


def parse_repository(text: str) -> ImageRef:
    """Parse `[registry/]repository` with neither tag nor digest (what image.name holds)."""
    ref = parse_image_ref(text)
    if ref.tag is not None or ref.digest is not None:
        raise InvalidReference(text, "a repository name has no tag or digest "
                                     "(image.name is [registry/]repository)")
    return ref


def parse_image_ref(text: str) -> ImageRef:
    """Parse and normalise an image reference; RegistryError (one line) when it is malformed."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidReference(str(text), "it is empty")
    if text != text.strip() or any(c.isspace() for c in text):
        raise InvalidReference(text, "it contains white space")
    rest, tag, digest = split_reference(text)
    if digest is not None and not DIGEST.fullmatch(digest):
        raise InvalidReference(text, "the digest must be sha256: followed by 64 lower-case hex digits")
    if tag is not None and not is_tag(tag):
        raise InvalidReference(text, f"tag {tag!r} must be 1-128 letters, digits, '_', '.' or '-', "
                                     "not starting with '.' or '-'")
    if not rest:
        raise InvalidReference(text, "the repository name is missing")
    registry = _registry_part(rest)
    if registry is not None:
        repository = rest[len(registry) + 1:]
        if not REGISTRY.fullmatch(registry):
            raise InvalidReference(text, f"{registry!r} is not a valid registry host[:port]")
    else:
        registry, repository = DOCKER_HUB, rest
    if is_docker_hub(registry) and registry != "registry-1.docker.io":
        registry = DOCKER_HUB
    if not repository:
        raise InvalidReference(text, "the repository name is missing")
    if repository != repository.lower():
        raise InvalidReference(text, "repository names must be lower case")
    if not REPOSITORY.fullmatch(repository):
        raise InvalidReference(text, f"repository {repository!r} must be '/'-separated components of a-z, 0-9 "
                                     "joined by '.', '_', '__' or '-'")
    if registry == DOCKER_HUB and "/" not in repository:
        repository = f"library/{repository}"
    if len(f"{registry}/{repository}") > MAX_NAME_LENGTH:
        raise InvalidReference(text, f"the name is longer than {MAX_NAME_LENGTH} characters")
    return ImageRef(registry=registry, repository=repository, tag=tag, digest=digest)
