"""pytest fixtures for tests that need the Docker engine and the local base images.

Load them from conftest.py with ``pytest_plugins = ["tests.fixtures_docker"]`` (or import the
fixture names). Without an engine the tests are skipped, except under CI (``CI`` or
``LLAMA_BUILDKIT_CI`` set to true/1/yes; .ci/run sets the latter), where a missing engine, or an
engine without the containerd image store where a test needs it, is a failure: CI must exercise
the real thing.

Fixtures (all session-scoped):

* ``docker_engine`` -> :class:`DockerEngine` (server version, buildx version).
* ``debian_base_image`` -> ``"buildkit-test/debian:bookworm"`` (made by debootstrap if missing).
* ``busybox_image`` -> ``"buildkit-test/busybox:latest"`` (made from busybox-static if missing).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:  # mypy reads tests/ as the import root (pyproject.toml: mypy_path)
    import images
else:
    try:
        from tests import images
    except ImportError:  # tests/ on sys.path rather than the project root
        import images

_ENGINE_HINT = "start one with: sudo bash scripts/install-engine.sh"


def in_ci(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return any(env.get(name, "").strip().lower() in ("1", "true", "yes") for name in ("CI", "LLAMA_BUILDKIT_CI"))


def unavailable(reason: str) -> NoReturn:
    """Skip locally, fail under CI."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


def need_containerd_store(store: str | None = None) -> None:
    """Reproducible digests need the containerd image store: skip without it locally, fail under CI.
    `store` is the engine's image store (default: asked of the engine)."""
    if store is None:
        from buildkit.engine.current import get_engine
        from buildkit.engine.buildx import image_store

        store = image_store(get_engine())
    if store != "containerd":
        unavailable(f"reproducible digests need the containerd image store, the engine has {store!r} (see README)")


@dataclass(frozen=True)
class DockerEngine:
    server_version: str
    buildx_version: str


def _probe_engine() -> DockerEngine | str:
    if shutil.which("docker") is None:
        return f"no docker CLI on PATH; {_ENGINE_HINT}"
    try:
        info = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                              capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return f"docker engine did not answer within 30 s; {_ENGINE_HINT}"
    if info.returncode != 0 or not info.stdout.strip():
        last = (info.stderr.strip().splitlines() or ["no answer"])[-1]
        return f"docker engine not reachable ({last}); {_ENGINE_HINT}"
    bx = subprocess.run(["docker", "buildx", "version"], capture_output=True, text=True, timeout=30)
    if bx.returncode != 0:
        return f"docker buildx plugin missing; {_ENGINE_HINT}"
    parts = bx.stdout.split()
    return DockerEngine(server_version=info.stdout.strip(),
                        buildx_version=parts[1] if len(parts) > 1 else bx.stdout.strip())


@pytest.fixture(scope="session")
def docker_engine() -> DockerEngine:
    engine = _probe_engine()
    if isinstance(engine, str):
        unavailable(engine)
    return engine


@pytest.fixture(scope="session")
def debian_base_image(docker_engine: DockerEngine) -> str:
    try:
        return images.ensure_debian_image()
    except (images.ImageError, subprocess.CalledProcessError, OSError) as e:
        unavailable(f"cannot make {images.DEBIAN_IMAGE}: {e}")
        raise  # unreachable


@pytest.fixture(scope="session")
def trixie_multiarch_base_image(docker_engine: DockerEngine) -> str:
    """Debian 13 for linux/amd64 and linux/arm64: GCC 14, which arm64's SME CPU variants need."""
    try:
        return images.ensure_multiarch_image(images.TRIXIE_MULTIARCH_IMAGE, suite="trixie")
    except (images.ImageError, subprocess.CalledProcessError, OSError) as e:
        unavailable(f"cannot make {images.TRIXIE_MULTIARCH_IMAGE}: {e}")
        raise  # unreachable


@pytest.fixture(scope="session")
def multiarch_base_image(debian_base_image: str) -> str:
    """One local image for linux/amd64 and linux/arm64 (cross builds use both halves)."""
    try:
        return images.ensure_multiarch_image()
    except (images.ImageError, subprocess.CalledProcessError, OSError) as e:
        unavailable(f"cannot make {images.MULTIARCH_IMAGE}: {e}")
        raise  # unreachable


@pytest.fixture(scope="session")
def busybox_image(docker_engine: DockerEngine) -> str:
    try:
        return images.ensure_busybox_image()
    except (images.ImageError, subprocess.CalledProcessError, OSError) as e:
        unavailable(f"cannot make {images.BUSYBOX_IMAGE}: {e}")
        raise  # unreachable
