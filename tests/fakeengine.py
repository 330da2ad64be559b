"""An in-memory Engine for unit tests of the flows: no Docker, every call recorded.

It is the seam's second implementation (engine/api.py), not a stand-in for Docker's behaviour:
tests through it check what a flow asks of an engine (load these tags, untag after a failed
verification, hold the turn), while the engine tests check the real engine does those things.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from collections.abc import Callable, Sequence

from buildkit.core.errors import BuildError
from buildkit.engine.api import ContainerState, Engine, EngineError, Finished, ImageDigests, ImageInfo
from buildkit.engine.dockerargv import buildx_build_argv, docker_run_argv
from buildkit.engine.specs import ContainerSpec


class FakeEngine(Engine):
    def __init__(self, *, reachable: bool = True,
                 run_result: Callable[[str, Sequence[str], Sequence[str]], tuple[int, str]] | None = None,
                 bake_lines: Sequence[str] = (), bake_code: int = 0) -> None:
        self.reachable = reachable
        self.images: dict[str, ImageInfo] = {}
        self.calls: list[tuple] = []
        self.turns: list[bool] = []  # exclusive flag of every turn taken (outermost only)
        self._depth = 0
        self.run_result = run_result or (lambda image, entrypoint, args: (0, ""))
        self.bake_lines, self.bake_code = list(bake_lines), bake_code

    # engine
    def ping(self) -> None:
        if not self.reachable:
            raise EngineError("cannot reach the fake engine")

    def buildx_version(self) -> tuple[int, int, int]:
        return (0, 13, 1)

    def image_store(self) -> str:
        return "containerd"

    def info(self) -> dict:
        self.ping()
        return {"ServerVersion": "26.1.5", "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}

    def inspect_builder(self, name: str = "") -> str:
        return f"Name: {name or 'default'}\nDriver: docker\nStatus: running\nPlatforms: linux/amd64\n"

    def arch(self) -> str:
        return "amd64"

    # builds
    @contextmanager
    def turn(self, exclusive: bool, stream=None, images=None):
        if self._depth == 0:
            self.turns.append(exclusive)
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    def build(self, spec, session, on_line, *, stream, tty=False) -> Finished:
        with self.turn(spec.no_cache, stream):
            self.calls.append(("build", spec, session))
            return Finished(code=self.bake_code, seconds=1.0, tty=False)

    def bake(self, bake_file, names, session, on_line, *, stream, exclusive=False, write_lock=None) -> Finished:
        """Reports a digest per named target, as the engine's bake does (DockerEngine reads buildx's file)."""
        with self.turn(exclusive, stream):
            self.calls.append(("bake", str(bake_file), tuple(names)))
            made = {n: ImageDigests(f"sha256:{n:0>64}"[:71], "") for n in names} if self.bake_code == 0 else {}
            for line in self.bake_lines:
                stream.write(line + "\n")
                on_line(line)
            return Finished(code=self.bake_code, seconds=1.0, tty=False, images=made)

    def build_command(self, spec, session) -> list[str]:
        return buildx_build_argv("fake-docker", spec, session)

    # images
    def image(self, ref: str) -> ImageInfo | None:
        return self.images.get(ref)

    def images_with_label(self, key: str, value: str) -> list[ImageInfo]:
        return [i for i in self.images.values() if i.labels.get(key) == value]

    def load(self, archive: Path, tags: Sequence[str], *, stream=None) -> None:
        self.calls.append(("load", str(archive), tuple(tags)))
        if not Path(archive).exists():
            raise BuildError(f"docker load of the built image failed: {archive} does not exist")
        for tag in tags:
            self.images[tag] = ImageInfo(id=f"sha256:{'1' * 64}", tags=tuple(tags))

    def tag(self, ref: str, new: str) -> None:
        self.calls.append(("tag", ref, new))
        self.images[new] = self.images[ref]

    def untag(self, tags: Sequence[str]) -> None:
        self.calls.append(("untag", tuple(tags)))
        for tag in tags:
            self.images.pop(tag, None)

    def push(self, ref: str, *, stream=None) -> None:
        self.calls.append(("push", ref))

    def save(self, ref: str, dest: Path) -> Path:
        raise EngineError("the fake engine saves nothing")

    # containers
    def run(self, image, entrypoint, args=(), *, timeout=120, env=None, gpus="") -> tuple[int, str]:
        self.ping()
        self.calls.append(("run", image, tuple(entrypoint), tuple(args)))
        self.run_env = dict(env or {})
        return self.run_result(image, entrypoint, args)

    def attach(self, spec) -> int:
        self.calls.append(("attach", spec))
        return 0

    def run_command(self, spec) -> list[str]:
        return docker_run_argv("fake-docker", spec)

    def copy_out(self, image: str, path: str, dest: Path) -> None:
        self.calls.append(("copy_out", image, path))

    def start(self, spec: ContainerSpec) -> str:
        raise EngineError("the fake engine starts no containers")

    def state(self, container: str) -> ContainerState | None:
        return None

    def logs(self, container: str, tail: int = 40) -> str:
        return ""

    def stop(self, container: str, timeout: int = 5) -> None:
        pass

    def remove(self, container: str) -> bool:
        return False
