"""The container that serves a ServerSpec (plan/profiles.py), as the engine's spec: detached for
`buildkit bench --image`, on the user's terminal for `buildkit run` (whose `--print` shows the command
the engine makes of it)."""

from __future__ import annotations

from dataclasses import fields

from buildkit.engine.specs import ContainerSpec, Mount
from buildkit.engine.specs import RunSpec
from buildkit.plan.profiles import CONTAINER_PORT, ServerSpec, server_command


def container_spec(spec: ServerSpec) -> ContainerSpec:
    """The container that serves spec: the model read-only, the port published on spec.bind (any free
    host port unless spec.host_port)."""
    port = spec.host_port if spec.host_port else None
    return ContainerSpec(image=spec.image, command=tuple(server_command(spec)), name=spec.name,
                         labels=dict(spec.labels), ports={CONTAINER_PORT: (spec.bind, port)},
                         mounts=tuple(Mount(source=str(host), target=inside) for host, inside in spec.mounts()),
                         gpus=spec.gpus)


def run_spec(spec: ServerSpec, *, detach: bool = False) -> RunSpec:
    """The same container for `buildkit run`: removed when it stops, in the foreground unless detach."""
    container = container_spec(spec)
    values = {f.name: getattr(container, f.name) for f in fields(container)}
    return RunSpec(**values, detach=detach, remove=True)
