"""doctor's engine and buildx checks: the Docker engine answers, its version and image store; the
buildx plugin's version and the builder buildkit will use (with its platforms)."""

from __future__ import annotations

from typing import Any
import json
import os
from collections.abc import Iterable

from buildkit.core.errors import BuildError
from buildkit.engine.api import EngineError, Host
from buildkit.engine.buildx import MIN_BUILDX, check_buildx
from buildkit.core.check import Check, Status
from buildkit.flows.doctor.check import version_tuple

MIN_ENGINE = (23, 0)  # BuildKit as the default builder, `docker buildx` integration


def engine_info(engine: Host) -> tuple[dict[str, Any] | None, str]:
    """(docker info as a dict, "") when the engine answers, else (None, why)."""
    try:
        return engine.info(), ""
    except EngineError as exc:
        return None, str(exc)


def check_engine(info: dict[str, Any] | None, why: str) -> Check:
    if info is None:
        where = os.environ.get("DOCKER_HOST") or "the default socket (or the current docker context)"
        return Check("engine", Status.FAILED, f"no Docker engine at {where}: {why}",
                     "start the engine (`sudo systemctl start docker`), or point DOCKER_HOST / "
                     "`docker context use` at one that runs")
    version = info.get("ServerVersion", "")
    store = "containerd" if "io.containerd.snapshotter" in json.dumps(info.get("DriverStatus")) else "classic"
    detail = f"Docker {version}, {store} image store, data root {info.get('DockerRootDir') or '?'}"
    if version_tuple(version)[:2] < MIN_ENGINE:
        return Check("engine", Status.FAILED, detail,
                     f"upgrade Docker Engine to {'.'.join(map(str, MIN_ENGINE))} or newer")
    if store == "classic":
        return Check("engine", Status.WARNED, detail + " (digests are not reproducible on the classic store)",
                     'enable the containerd image store: {"features": {"containerd-snapshotter": true}} in '
                     "/etc/docker/daemon.json, then restart dockerd")
    return Check("engine", Status.PASSED, detail)


# --------------------------------------------------------------------------- buildx

def check_buildx_and_builder(builder: str, engine: Host) -> tuple[Check, list[str]]:
    """The buildx check, and the builder's platforms (for the emulation check)."""
    try:
        version = check_buildx(engine)
    except BuildError as exc:
        return Check("buildx", Status.FAILED, str(exc), "install the docker-buildx plugin "
                     f"({'.'.join(map(str, MIN_BUILDX))} or newer): the docker-buildx package, or "
                     "https://github.com/docker/buildx/releases into ~/.docker/cli-plugins/"), []
    shown = builder or "the current builder"
    try:
        described = engine.inspect_builder(builder)
    except EngineError as exc:
        why = str(exc)
        return Check("buildx", Status.FAILED, f"buildx {'.'.join(map(str, version))}; {shown}: {why}",
                     "list the builders with `docker buildx ls`; create one with `docker buildx create --name "
                     f"{builder or 'NAME'} [--driver docker-container]`, or leave build.builder empty"), []
    fields = dict(_inspect_fields(described))
    platforms = [p.strip().rstrip("*") for p in fields.get("Platforms", "").split(",") if p.strip()]
    name = fields.get("Name", builder or "default")
    driver = fields.get("Driver", "?")
    status = fields.get("Status", "")
    detail = f"buildx {'.'.join(map(str, version))}; builder {name} (driver {driver}" + \
        (f", {status}" if status else "") + ")"
    if status and status not in ("running", "inactive"):
        return Check("buildx", Status.FAILED, detail, f"`docker buildx inspect --bootstrap {name}`, or remove and "
                     "re-create the builder"), platforms
    return Check("buildx", Status.PASSED, detail), platforms


def _inspect_fields(text: str) -> Iterable[tuple[str, str]]:
    """`docker buildx inspect` output: 'Key: value' lines (the first of each key wins)."""
    seen: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key and key not in seen and not line.startswith(" "):
            seen.add(key)
            yield key, value.strip()
