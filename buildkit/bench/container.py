"""The server container of `bench --image`: started through the engine (engine/api.py), waited for,
and always stopped and removed, also on Ctrl-C, SIGTERM, SIGHUP (core/interrupts.py) and failures."""

from __future__ import annotations

import http.client
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from buildkit.bench.client import endpoint
from buildkit.bench.protocol import BENCH_LABEL
from buildkit.core import interrupts
from buildkit.core.deadline import Deadline, shut, say_waiting
from buildkit.core.errors import BenchError
from buildkit.engine.api import ContainerState, Engine, EngineError, Images
from buildkit.flows.serve.serving import container_spec as container_spec  # re-exported: bench's spec is serving's
from buildkit.plan.profiles import CONTAINER_PORT, ServerSpec


@dataclass(frozen=True)
class Served:
    url: str
    container_id: str
    container_name: str
    image_id: str
    startup_s: float


def _last_log_line(engine: Engine, container: str) -> str:
    lines = [ln.strip() for ln in engine.logs(container, tail=40).splitlines() if ln.strip()]
    for ln in lines:  # the first error line names the cause; the later ones say that it stopped
        low = ln.lower()
        if "error" in low or "failed" in low or "exception" in low:
            return ln
    return lines[-1] if lines else ""


def _health(url: str) -> int | None:
    ep = endpoint(url)
    conn = http.client.HTTPConnection(ep.host, ep.port, timeout=2)
    try:
        with Deadline(2, lambda: shut(conn.sock)) as deadline:  # 2 s for the whole probe
            conn.request("GET", ep.prefix + "/health")
            resp = conn.getresponse()
            resp.read(1 << 16)
        return None if deadline.expired else resp.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def _check_running(engine: Engine, container: str) -> ContainerState:
    """The container's state; BenchError with the server's own error line when it has stopped."""
    state = engine.state(container)
    if state is None or state.status in ("exited", "dead"):
        code = state.exit_code if state is not None else None
        last = _last_log_line(engine, container)
        raise BenchError(f"the server container exited (code {code}) before it was ready"
                         + (f": {last}" if last else ""))
    return state


def wait_ready(url: str, engine: Engine, container: str, timeout: float, interval: float = 0.25) -> float:
    """Seconds until /health says 200; BenchError when the container exits or time runs out."""
    start = time.monotonic()
    noticed = False
    while True:
        _check_running(engine, container)
        if _health(url) == 200:
            return time.monotonic() - start
        if not noticed and time.monotonic() - start > 10:
            say_waiting(f"waiting for the server to answer {url}/health (up to {timeout:g} s, --startup-timeout)")
            noticed = True
        if time.monotonic() - start > timeout:
            last = _last_log_line(engine, container)
            raise BenchError(f"the server did not answer {url}/health within {timeout:g}s (--startup-timeout)"
                             + (f"; last log line: {last}" if last else ""))
        time.sleep(interval)


def docker_client(engine: Engine) -> Engine:
    """The engine, once it answered (BenchError otherwise)."""
    try:
        engine.ping()
    except EngineError as exc:
        raise BenchError(str(exc)) from None
    return engine


def local_image_id(engine: Images, ref: str) -> str:
    image_id = engine.image_id(ref)
    if image_id is None:
        raise BenchError(f"image {ref} is not in the local engine (bench never pulls; build or pull it first)")
    return image_id


@contextmanager
def served(spec: ServerSpec, engine: Engine, startup_timeout: float = 300.0,
           log: Callable[[str], None] | None = None) -> Iterator[Served]:
    """Start spec's container (model read-only, port on 127.0.0.1), wait for /health, yield, then always
    stop and remove it: on success, failure, Ctrl-C, SIGTERM and SIGHUP."""
    from dataclasses import replace

    log = log or (lambda msg: None)
    engine = docker_client(engine)
    image_id = local_image_id(engine, spec.image)
    cspec = container_spec(spec)
    name = cspec.name or f"buildkit-bench-{uuid.uuid4().hex[:10]}"
    cspec = replace(cspec, name=name, labels={**cspec.labels, BENCH_LABEL: "1"})
    container = None
    with interrupts.as_exceptions():
        try:
            try:
                container = engine.start(cspec)
            except EngineError as exc:
                raise BenchError(str(exc)) from None
            state = engine.state(container)
            host_port = state.ports.get(CONTAINER_PORT) if state is not None else None
            if host_port is None:
                _check_running(engine, container)
                last = _last_log_line(engine, container)
                raise BenchError(f"the server container has no published port (status {state.status if state else '?'})"
                                 + (f": {last}" if last else ""))
            url = f"http://127.0.0.1:{host_port}"
            log(f"started container {name} ({spec.image}) on {url}")
            startup = wait_ready(url, engine, container, startup_timeout)
            log(f"server ready after {startup:.1f}s")
            yield Served(url=url, container_id=container, container_name=name, image_id=image_id,
                         startup_s=startup)
        finally:
            if container is not None:
                with interrupts.deferred():  # a signal now waits for the container to go
                    engine.stop(container, timeout=5)
                    try:
                        removed = engine.remove(container)
                    except EngineError as exc:
                        log(f"warning: could not remove container {name}: {exc}")
                    else:
                        if removed:
                            log(f"removed container {name}")
