"""The Docker engine: the docker CLI through argv lists, docker-py where a structured answer is wanted.

docker-py cannot drive BuildKit, so builds, `load`, `save` and `push` are the CLI (its credential helpers,
its buildx plugin); image lookups and containers are docker-py. One policy for docker-py's errors: it
raises DockerException subclasses (NotFound, APIError) and, when the engine cannot be reached, requests'
connection errors; `_DOCKER_ERRORS` names them all, and no other exception is caught.
"""

from __future__ import annotations

import functools
import io
import json
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildkit.core.errors import BuildError, RegistryError
from buildkit.core.interrupts import signal_of
from buildkit.engine.api import ContainerState, Engine, EngineError, Finished, ImageInfo, OutStream
from buildkit.engine.buildxmetadata import with_bake_images, with_build_images
from buildkit.engine.containercreate import create_container, run_to_end
from buildkit.engine.dockerargv import buildx_bake_argv, buildx_build_argv, docker_run_argv
from buildkit.engine.runner import engine_turn, dockerfile_images, stream_command
from buildkit.engine.specs import BuildSession, BuildSpec, ContainerSpec, RunSpec
from buildkit.plan.profiles import gpu_device_requests

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container
    from docker.models.images import Image

MIN_BUILDX = (0, 10, 0)  # --build-context, --metadata-file digests, cache mounts
CONTAINERD_SNAPSHOTTER = "io.containerd.snapshotter.v1"


def _docker_errors() -> tuple[type[BaseException], ...]:
    import docker.errors
    import requests

    return (docker.errors.DockerException, requests.RequestException, OSError)


def parse_buildx_version(text: str) -> tuple[int, int, int] | None:
    """'github.com/docker/buildx v0.13.1 abc' or '... 0.13.1+ds1 ...' -> (0, 13, 1)."""
    match = re.search(r"\bv?(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(x) for x in match.groups()) if match else None  # type: ignore[return-value]


def _last_line(text: str, default: str = "no output") -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else default


def _info(image: Image) -> ImageInfo:
    attrs = image.attrs or {}
    return ImageInfo(id=image.id or "", tags=tuple(image.tags or ()), labels=dict(image.labels or {}),
                     repo_digests=tuple(attrs.get("RepoDigests") or ()), size=attrs.get("Size"))


class DockerEngine(Engine):
    def __init__(self, docker: str = "docker") -> None:
        self.docker = docker
        self._client: DockerClient | None = None

    # ------------------------------------------------------------ docker-py
    @functools.cached_property
    def _errors(self) -> tuple[type[BaseException], ...]:
        return _docker_errors()

    def client(self) -> DockerClient:
        """A docker-py client that answered a ping; EngineError when there is no engine."""
        import docker

        if self._client is None:
            try:
                client = docker.from_env()
                client.ping()
            except self._errors as exc:
                raise EngineError(f"cannot reach the Docker engine: {exc}") from None
            self._client = client
        return self._client

    def _client_or_none(self) -> DockerClient | None:
        try:
            return self.client()
        except EngineError:
            return None

    # ------------------------------------------------------------ engine
    def ping(self) -> None:
        self.client()

    def buildx_version(self) -> tuple[int, int, int]:
        docker = self.docker
        if shutil.which(docker) is None:
            raise BuildError(f"the docker CLI ({docker!r}) is not on PATH; install Docker with the buildx plugin")
        try:
            proc = subprocess.run([docker, "buildx", "version"], capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            raise BuildError("`docker buildx version` did not answer within 60 s") from None
        text = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0:
            first = text.splitlines()[0] if text else f"exit {proc.returncode}"
            raise BuildError(f"docker buildx is not installed or does not work ({first}); "
                             f"buildx {'.'.join(map(str, MIN_BUILDX))} or newer is needed")
        version = parse_buildx_version(text)
        if version is None or version < MIN_BUILDX:
            found = ".".join(map(str, version)) if version else repr(text[:80])
            raise BuildError(f"docker buildx {found} is too old; buildx {'.'.join(map(str, MIN_BUILDX))} "
                             "or newer is needed")
        return version

    # One DockerEngine per process (current.get_engine keeps it for the life of the process): the cache is no leak.
    @functools.cache  # noqa: B019
    def image_store(self) -> str:
        try:
            proc = subprocess.run([self.docker, "info", "--format", "{{json .DriverStatus}}"],
                                  capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        if proc.returncode != 0:
            return ""
        return "containerd" if CONTAINERD_SNAPSHOTTER in proc.stdout else "classic"

    def info(self) -> dict[str, Any]:
        if shutil.which(self.docker) is None:
            raise EngineError(f"the docker CLI ({self.docker!r}) is not on PATH")
        try:
            proc = subprocess.run([self.docker, "info", "--format", "{{json .}}"], capture_output=True, text=True,
                                  timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            raise EngineError("`docker info` did not answer within 30 s") from None
        try:
            info = json.loads(proc.stdout or "null")
        except ValueError:
            info = None
        if proc.returncode != 0 or not isinstance(info, dict) or not info.get("ServerVersion"):
            raise EngineError(_last_line(proc.stderr or proc.stdout))
        return info

    def inspect_builder(self, name: str = "") -> str:
        try:
            proc = subprocess.run([self.docker, "buildx", "inspect"] + ([name] if name else []),
                                  capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            raise EngineError("timed out") from None
        if proc.returncode != 0:
            raise EngineError(_last_line(proc.stderr or proc.stdout))
        return proc.stdout

    def arch(self) -> str:
        client = self._client_or_none()
        if client is None:
            return ""
        try:
            return str(client.version().get("Arch", ""))
        except self._errors:
            return ""

    # ------------------------------------------------------------ builds
    def turn(self, exclusive: bool, stream: OutStream | None = None,
             images: frozenset[str] | None = None) -> AbstractContextManager[None]:
        return engine_turn(exclusive, stream, images)

    def build(self, spec: BuildSpec, session: BuildSession, on_line: Callable[[str], None], *,
              stream: OutStream, tty: bool = False) -> Finished:
        return with_build_images(stream_command(self.build_command(spec, session), on_line, stream=stream,
                                 exclusive=spec.no_cache, images=dockerfile_images(spec.dockerfile), tty=tty), session)

    def bake(self, bake_file: Path, names: Sequence[str], session: BuildSession, on_line: Callable[[str], None], *,
             stream: OutStream, exclusive: bool = False, write_lock: threading.Lock | None = None) -> Finished:
        return with_bake_images(stream_command(buildx_bake_argv(self.docker, bake_file, names, session), on_line,
                                stream=stream, exclusive=exclusive, write_lock=write_lock), session, names)

    def build_command(self, spec: BuildSpec, session: BuildSession) -> list[str]:
        return buildx_build_argv(self.docker, spec, session)

    # ------------------------------------------------------------ images
    def image(self, ref: str) -> ImageInfo | None:
        client = self._client_or_none()
        if client is None:
            return None
        try:
            return _info(client.images.get(ref))
        except self._errors:
            return None

    def inspect_id(self, ref: str) -> str | None:
        """`docker image inspect` through the CLI (no docker-py import: cheap for a yes/no)."""
        try:
            proc = subprocess.run([self.docker, "image", "inspect", "--format", "{{.Id}}", ref],
                                  capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    def images_with_label(self, key: str, value: str) -> list[ImageInfo]:
        client = self._client_or_none()
        if client is None:
            return []
        try:
            return [_info(i) for i in client.images.list(filters={"label": f"{key}={value}"})]
        except self._errors:
            return []

    def load(self, archive: Path, tags: Sequence[str], *, stream: OutStream | None = None) -> None:
        stream = sys.stderr if stream is None else stream
        proc = subprocess.run([self.docker, "load", "--input", str(archive)], capture_output=True, text=True)
        stream.write(proc.stdout)
        if proc.returncode != 0:
            raise BuildError(f"docker load of the built image failed: "
                             f"{_last_line(proc.stderr, f'exit {proc.returncode}')}")
        for tag in tags:
            if self.inspect_id(tag) is None:
                raise BuildError(f"docker load of {archive} did not create the tag {tag}")

    def tag(self, ref: str, new: str) -> None:
        proc = subprocess.run([self.docker, "tag", ref, new], capture_output=True, text=True)
        if proc.returncode != 0:
            raise EngineError(f"docker tag {ref} {new} failed: {_last_line(proc.stderr)}")

    def untag(self, tags: Sequence[str]) -> None:
        client = self._client_or_none()
        if client is None:
            return
        for tag in tags:
            try:
                client.images.remove(tag, noprune=False)
            except self._errors:
                pass  # cleanup: a tag already gone (or an engine that went away) leaves nothing to do

    def push(self, ref: str, *, stream: OutStream | None = None) -> None:
        stream = sys.stderr if stream is None else stream
        proc = subprocess.run([self.docker, "push", ref], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        stream.write(proc.stdout)
        if proc.returncode != 0:
            raise RegistryError(f"docker push {ref} failed: {_last_line(proc.stdout)}")

    def save(self, ref: str, dest: Path) -> Path:
        try:
            proc = subprocess.run([self.docker, "save", "--output", str(dest), ref], capture_output=True,
                                  text=True, timeout=3600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EngineError(f"docker save {ref} failed: {exc}") from None
        if proc.returncode != 0:
            raise EngineError(f"docker save {ref} failed: {_last_line(proc.stderr)}")
        return dest

    # ------------------------------------------------------------ containers
    def run_command(self, spec: RunSpec) -> list[str]:
        return docker_run_argv(self.docker, spec)

    def attach(self, spec: RunSpec) -> int:
        if shutil.which(self.docker) is None:
            raise EngineError(f"the docker CLI ({self.docker!r}) is not on PATH; use --print and run the "
                              "command elsewhere")
        argv = self.run_command(spec)
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to docker run, which stops it
        try:
            proc = subprocess.Popen(argv, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            try:
                return proc.wait()
            except KeyboardInterrupt as exc:  # SIGTERM or SIGHUP to buildkit alone (core/interrupts.py):
                proc.send_signal(signal_of(exc))  # docker run passes it on to the container
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                raise
        finally:
            signal.signal(signal.SIGINT, old)

    def run(self, image: str, entrypoint: Sequence[str], args: Sequence[str] = (), *,
            timeout: float = 120, env: Mapping[str, str] | None = None, gpus: str = "") -> tuple[int, str]:
        devices = self.create_kwargs(ContainerSpec(image, gpus=gpus)).get("device_requests")  # None: no GPU
        return run_to_end(self.client(), image, list(entrypoint), list(args), timeout=timeout, env=dict(env or {}),
                          device_requests=devices)

    def copy_out(self, image: str, path: str, dest: Path) -> None:
        client = self.client()
        container = create_container(client, image, entrypoint=["/bin/true"])
        try:
            chunks, _ = container.get_archive(path)
            data = io.BytesIO(b"".join(chunks))
        finally:
            container.remove(force=True)
        with tarfile.open(fileobj=data) as tar:
            tar.extractall(dest, filter="data")

    @staticmethod
    def create_kwargs(spec: ContainerSpec) -> dict[str, Any]:
        """docker-py's containers.create() keyword arguments for spec (detached, not auto-removed)."""
        import docker.types

        kwargs: dict[str, Any] = {
            "image": spec.image, "command": list(spec.command), "detach": True,
            "ports": {f"{inside}/tcp": (bind, port) if bind else port for inside, (bind, port) in spec.ports.items()},
            # a list of mounts, not a volumes dict: the same file may be both model and draft
            "mounts": [docker.types.Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
                       for m in spec.mounts],
            "labels": dict(spec.labels),
        }
        if spec.name:
            kwargs["name"] = spec.name
        requests = gpu_device_requests(spec.gpus)
        if requests:
            kwargs["device_requests"] = [docker.types.DeviceRequest(
                driver=r["Driver"], count=r["Count"], device_ids=r["DeviceIDs"], capabilities=r["Capabilities"],
                options=r["Options"]) for r in requests]
        return kwargs

    def start(self, spec: ContainerSpec) -> str:
        kwargs = self.create_kwargs(spec)
        client = self.client()
        container = None
        try:
            container = create_container(client, **kwargs)
            container.start()
        except self._errors as exc:
            if container is not None:
                self.remove(container.id)
            raise EngineError(f"cannot start a container of {spec.image}: "
                              f"{getattr(exc, 'explanation', None) or exc}") from None
        return str(container.id)

    def _container(self, container: str) -> Container | None:
        client = self._client_or_none()
        if client is None:
            return None
        try:
            return client.containers.get(container)
        except self._errors:
            return None

    def state(self, container: str) -> ContainerState | None:
        found = self._container(container)
        if found is None:
            return None
        ports: dict[int, int] = {}
        for key, bindings in (found.ports or {}).items():
            if not bindings:  # an exposed port that is not published
                continue
            try:
                ports[int(key.split("/", 1)[0])] = int(bindings[0]["HostPort"])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
        return ContainerState(status=found.status, exit_code=found.attrs.get("State", {}).get("ExitCode"),
                              ports=ports)

    def logs(self, container: str, tail: int = 40) -> str:
        found = self._container(container)
        if found is None:
            return ""
        try:
            return bytes(found.logs(tail=tail)).decode("utf-8", "replace")
        except self._errors:  # the container may be gone
            return ""

    def stop(self, container: str, timeout: int = 5) -> None:
        found = self._container(container)
        if found is None:
            return
        try:
            found.stop(timeout=timeout)
        except self._errors:
            pass  # stopped (or going) already: remove() follows

    def remove(self, container: str) -> bool:
        import docker.errors

        found = self._container(container)
        if found is None:
            return False
        try:
            found.remove(force=True)
        except docker.errors.NotFound:
            return False
        except self._errors as exc:
            raise EngineError(f"{getattr(exc, 'explanation', None) or exc}") from None
        return True
