"""Image tag names (pure). The full semver scheme for publishing builds on these names."""

from __future__ import annotations

import re

from .archs import Arch
from .errors import ConfigError

# Docker's tag grammar: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# repository: lowercase path components, optional registry host[:port]
REPOSITORY_RE = re.compile(
    r"^(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")


def variant(arch: Arch, cuda_version: str | None) -> str:
    """cuda13.1-sm120 for a CUDA arch, cpu for the CPU image."""
    if not arch.is_cuda:
        return "cpu"
    return f"cuda{cuda_version}-sm{arch.number}"


def check_tag(tag: str) -> str:
    if not TAG_RE.match(tag):
        raise ConfigError(f"tag {tag!r} is not a valid Docker tag "
                          "(letters, digits, '_', '.', '-'; at most 128 characters; no '+')")
    return tag


def check_repository(name: str) -> str:
    if not REPOSITORY_RE.match(name):
        raise ConfigError(f"image name {name!r} is not a valid repository name "
                          "(lowercase letters, digits and separators, optionally registry/...)")
    return name


def build_tags(repository: str, variant_name: str, commit: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Tags a local build gets: <variant>, sha-<7>-<variant>, plus any extra tags asked for."""
    check_repository(repository)
    names = [variant_name, f"sha-{commit[:7]}-{variant_name}", *extra]
    seen: list[str] = []
    for name in names:
        if name not in seen:
            seen.append(check_tag(name))
    return tuple(f"{repository}:{name}" for name in seen)
