"""Which engine answers: `get_engine()` (the CLI asks once per command; the Docker engine by default, made once
per process) and `use_engine(engine)` (tests' FakeEngine, a second engine). Apart from api.py, the interface,
so that the interface does not import its implementation: no circle, and no import inside a function (issue 49).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from buildkit.engine.api import Engine
from buildkit.engine.dockerengine import DockerEngine

_current: list[Engine] = []
_default: list[Engine] = []


def get_engine() -> Engine:
    """The engine in use (use_engine), else the Docker engine driven through the `docker` CLI."""
    if _current:
        return _current[-1]
    if not _default:
        _default.append(DockerEngine())
    return _default[0]


@contextmanager
def use_engine(engine: Engine) -> Iterator[Engine]:
    """Every get_engine() in the block answers engine."""
    _current.append(engine)
    try:
        yield engine
    finally:
        _current.remove(engine)
