"""The workload checks' servers through the engine (bench/servers.py's `Servers`): each one a container of the
image, as `buildkit bench --image` starts it (bench/container.py: the models read-only, the port on 127.0.0.1,
--gpus as asked), stopped and removed when the check is done with it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from buildkit.bench.container import served
from buildkit.engine.api import Engine
from buildkit.plan.profiles import make_spec


@dataclass(frozen=True)
class ContainerServers:
    image: str
    model: Path
    model_draft: Path | None
    gpus: str
    engine: Engine
    startup_timeout: float = 300.0
    log: Callable[[str], None] = lambda msg: None

    @contextmanager
    def serve(self, label: str, args: Sequence[str], draft: bool) -> Iterator[str]:
        spec = make_spec(image=self.image, model=self.model, model_draft=self.model_draft if draft else None,
                         extra_args=tuple(args), gpus=self.gpus, host_port=None, use_profile_port=False,
                         bind="127.0.0.1")
        self.log(f"{label}: starting {self.image}")
        with served(spec, self.engine, self.startup_timeout, log=self.log) as server:
            yield server.url
