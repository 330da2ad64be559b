"""The seam to the container engine: everything buildkit asks of an engine, and which engine answers.

repo2docker's `ContainerEngine` idea: a small interface the flows call, one implementation per
engine. `DockerEngine` (dockerengine.py: the docker CLI, argv lists, and docker-py where a
structured answer is wanted) is the only one today; a remote engine, or the in-memory fake the
unit tests use, implements the same methods. Nothing outside buildkit/engine/ talks to Docker.

    engine = get_engine()              # the CLI, once per command (current.py; DockerEngine by default) ...
    verify_image(plan, tag, engine)    # ... and passes it down: a function names the roles it uses
    with use_engine(fake): ...         # tests, and later a remote engine

The roles (Protocols): Host (ping, buildx, info, builder, arch), Builder (turn, build, bake,
build_command), Images (image store, lookups, load, tag, untag, push, save) and Containers (run,
attach, copy_out, detached ones); Engine is all four.

The engine is asked in specs (specs.py: BuildSpec, BuildSession, RunSpec; ContainerSpec here), never
in docker argv: the engine makes its own command lines, and shows them (`build_command`,
`run_command`) for `--print`. Builds (`build`, `bake`) always hold the engine turn
(runner.engine_turn, per image a build starts from: shared for builds, exclusive for --no-cache).

Errors: a method that cannot do its job raises EngineError (a BuildkitError) with the engine's
own message; `untag` is best effort (cleanup) and never raises; the lookups (`image`,
`image_id`) answer None when the engine does not have the image or cannot be reached.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
import threading
from typing import Any, Protocol

from buildkit.core.errors import BuildkitError

from buildkit.engine.specs import BuildSession, BuildSpec, ContainerSpec, RunSpec


class OutStream(Protocol):
    """Where an engine command's output is written: a text stream (sys.stderr) or the live display's sink."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...

    def isatty(self) -> bool: ...


class EngineError(BuildkitError):
    """The engine could not do what was asked (its own message is kept)."""


@dataclass(frozen=True)
class ImageInfo:
    """What buildkit reads of an image in the engine."""
    id: str
    tags: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    repo_digests: tuple[str, ...] = ()
    size: int | None = None


@dataclass(frozen=True)
class ContainerState:
    status: str  # created, running, exited, dead, ...
    exit_code: int | None
    ports: dict[int, int]  # container port -> published host port


@dataclass(frozen=True)
class ImageDigests:
    """What a build made: its manifest digest (containerimage.digest) and its config's (the image id)."""
    manifest: str
    config: str


@dataclass(frozen=True)
class Finished:
    """How a streamed engine command ended, and, for a build or a bake that succeeded, what it made: by bake
    target ("" for a build). The engine reads buildx's metadata file; no caller does."""
    code: int
    seconds: float
    tty: bool
    images: Mapping[str, ImageDigests] = field(default_factory=dict)


class Host(Protocol):
    """The engine itself: whether it answers, its builder, what it runs on (doctor, the gate)."""

    @abc.abstractmethod
    def ping(self) -> None:
        """EngineError when the engine cannot be reached."""

    @abc.abstractmethod
    def buildx_version(self) -> tuple[int, int, int]:
        """The builder's version; EngineError when missing or unusable."""

    @abc.abstractmethod
    def info(self) -> dict[str, Any]:
        """The engine's own description (Docker: `docker info`); EngineError saying why not."""

    @abc.abstractmethod
    def inspect_builder(self, name: str = "") -> str:
        """The builder's description ('Key: value' lines of `docker buildx inspect`); EngineError."""

    @abc.abstractmethod
    def arch(self) -> str:
        """The engine machine's architecture as a platform name (amd64, arm64); "" when unknown."""


class Builder(Protocol):
    """Builds: one image (build) or several together (bake), under the engine turn."""

    @abc.abstractmethod
    def turn(self, exclusive: bool, stream: OutStream | None = None,
             images: frozenset[str] | None = None) -> AbstractContextManager[None]:
        """The engine turn (a --no-cache build runs alone, or alone with the images it starts from when
        they are given); re-entrant within one process."""

    @abc.abstractmethod
    def build(self, spec: BuildSpec, session: BuildSession, on_line: Callable[[str], None], *,
              stream: OutStream, tty: bool = False) -> Finished:
        """Build spec, holding the engine turn of its Dockerfile's images (exclusively with spec.no_cache);
        each output line goes to on_line (and, without tty, to stream). The image's digests go to
        session.metadata_file."""

    @abc.abstractmethod
    def bake(self, bake_file: Path, names: Sequence[str], session: BuildSession, on_line: Callable[[str], None], *,
             stream: OutStream, exclusive: bool = False, write_lock: threading.Lock | None = None) -> Finished:
        """Build the targets names of bake_file (bakefile.py) together, holding the engine turn; each output
        line goes to on_line and to stream (under write_lock when given)."""

    @abc.abstractmethod
    def build_command(self, spec: BuildSpec, session: BuildSession) -> list[str]:
        """The command line build() runs for spec (`buildkit build --print` shows it)."""


class Images(Protocol):
    """The engine's images: how it stores them, looked up, tagged, loaded, pushed, saved."""

    @abc.abstractmethod
    def image_store(self) -> str:
        """"containerd", "classic", or "" when it cannot be asked."""

    @abc.abstractmethod
    def image(self, ref: str) -> ImageInfo | None:
        """The image ref names (tag, id or digest reference); None when the engine lacks it."""

    def image_id(self, ref: str) -> str | None:
        info = self.image(ref)
        return info.id if info is not None else None

    def image_size(self, ref: str) -> int | None:
        info = self.image(ref)
        return info.size if info is not None else None

    @abc.abstractmethod
    def images_with_label(self, key: str, value: str) -> list[ImageInfo]:
        """Images carrying label key=value (none when the engine cannot be asked)."""

    @abc.abstractmethod
    def load(self, archive: Path, tags: Sequence[str], *, stream: OutStream | None = None) -> None:
        """Load an archive (its image names become tags) and check that every tag arrived."""

    @abc.abstractmethod
    def tag(self, ref: str, new: str) -> None:
        """Give the image ref the tag new (repository:tag)."""

    @abc.abstractmethod
    def untag(self, tags: Sequence[str]) -> None:
        """Remove these tags (an image left without tags goes); best effort, never raises."""

    @abc.abstractmethod
    def push(self, ref: str, *, stream: OutStream | None = None) -> None:
        """Push one tag with the engine's own credentials."""

    @abc.abstractmethod
    def save(self, ref: str, dest: Path) -> Path:
        """The image as an archive at dest (an OCI archive on the containerd store)."""


class Containers(Protocol):
    """Containers: a command run to its end, one in the foreground, or a detached one watched and stopped."""
    @abc.abstractmethod
    def run(self, image: str, entrypoint: Sequence[str], args: Sequence[str] = (), *,
            timeout: float = 120, env: Mapping[str, str] | None = None, gpus: str = "") -> tuple[int, str]:
        """Run a command in a fresh container without network, env added to the image's environment, with
        the GPUs gpus names (docker --gpus; empty: none); (exit code, output: stdout and stderr). Removed after."""

    @abc.abstractmethod
    def attach(self, spec: RunSpec) -> int:
        """Run spec in the foreground on the user's terminal: Ctrl-C goes to the container, not to us.
        Its exit code."""

    @abc.abstractmethod
    def run_command(self, spec: RunSpec) -> list[str]:
        """The command line attach() runs for spec (`buildkit run --print` shows it)."""

    @abc.abstractmethod
    def copy_out(self, image: str, path: str, dest: Path) -> None:
        """Copy the folder path out of the image into dest, symlinks kept."""

    @abc.abstractmethod
    def start(self, spec: ContainerSpec) -> str:
        """Create and start a container; its id."""

    @abc.abstractmethod
    def state(self, container: str) -> ContainerState | None:
        """None when the container is gone."""

    @abc.abstractmethod
    def logs(self, container: str, tail: int = 40) -> str:
        """The last lines the container printed ("" when it is gone)."""

    @abc.abstractmethod
    def stop(self, container: str, timeout: int = 5) -> None:
        """Stop it; no error when it has stopped already."""

    @abc.abstractmethod
    def remove(self, container: str) -> bool:
        """Remove it (forced); False when it was gone, EngineError when the engine refuses."""


class Engine(Host, Builder, Images, Containers, Protocol):
    """Every role at once: what DockerEngine and the tests' FakeEngine implement. A function names the
    role(s) it uses (engine: Images), so a second engine implements only those it is handed for."""
