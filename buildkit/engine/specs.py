"""What buildkit asks an engine to build or run, as data; only buildkit/engine/ makes a command line of it.

A `BuildSpec` is one image: what `docker buildx build` is told, or one target of a bake. A
`BuildSession` is how buildx runs (the builder, its progress display, where the digests go),
shared by every target of one bake. A `RunSpec` is a container in the foreground (`buildkit run`), a
`ContainerSpec` a detached one (the engine's Containers role), with its `Mount`s.
dockerargv.py turns them into the docker CLI's argv and bakefile.py into bake targets, so a flag
is spelt in one place and bake and build cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class ContainerSpec:
    """A detached container (not auto-removed: the caller stops and removes it)."""
    image: str
    command: tuple[str, ...] = ()
    name: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    ports: dict[int, tuple[str, int | None]] = field(default_factory=dict)  # container port -> (bind, host)
    mounts: tuple[Mount, ...] = ()
    gpus: str = ""  # docker --gpus value


@dataclass(frozen=True)
class BuildSpec:
    """One image to build.

    With oci_archive (the reproducible exporter: an OCI archive with rewritten timestamps, see
    buildx.py) the tags travel as the archive's image names and `load` means the archive is loaded
    into the engine afterwards; without it they are BuildKit's tags and `load` is --load."""
    context: Path
    dockerfile: Path
    platform: str = ""  # one, or several comma-separated, as buildx takes it
    target: str = ""
    build_args: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    # OCI annotations of the image manifest (every platform's, when several are built): registries and
    # OCI tools read these without fetching the config that holds the labels
    annotations: tuple[tuple[str, str], ...] = ()
    tags: tuple[str, ...] = ()
    named_contexts: tuple[tuple[str, str], ...] = ()
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()
    provenance: bool | None = None  # None: buildx's own default
    no_cache: bool = False
    oci_archive: Path | None = None
    outputs: tuple[str, ...] = ()  # other exporters, as buildx --output values (the ccache helpers')
    load: bool = False
    push: bool = False

    def with_tags(self, tags: Iterable[str]) -> BuildSpec:
        return replace(self, tags=tuple(tags))


@dataclass(frozen=True)
class BuildSession:
    """How buildx runs a build or a bake, as opposed to what it builds."""
    builder: str = ""  # empty: the current builder
    progress: str = "auto"
    metadata_file: Path | None = None  # where buildx writes the digests


@dataclass(frozen=True)
class RunSpec(ContainerSpec):
    """A container started on the user's terminal (`buildkit run`), or detached with detach."""
    detach: bool = False
    remove: bool = True  # removed when it stops
