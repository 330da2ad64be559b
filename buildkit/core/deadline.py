"""Deadlines for a whole network request, not for each read.

A socket time-out bounds one read; a server that sends a byte a second (or its headers, then nothing
but keep-alive bytes) never trips it. `Deadline` is a timer that, when it fires, shuts down the
sockets of the request: the read blocked in another thread returns at once, and the caller, seeing
`deadline.expired`, reports "no complete answer within N s". Used by the registry client (through
`TrackingAdapter`, which knows every connection its pools open) and by bench's HTTP client.

`Budget` is the overall deadline of a command's requests: the time spent in them adds up, and each
request gets at most what is left.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.poolmanager import PoolManager


def shut(sock: socket.socket | None) -> None:
    """Shut a socket down for both directions (the plain socket call, also for an SSL socket)."""
    if sock is None:
        return
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except (OSError, ValueError, TypeError):
        pass


class Deadline:
    """Calls cut() once, `seconds` after the with-block starts, unless the block ended first."""

    def __init__(self, seconds: float, cut: Callable[[], None]) -> None:
        self.seconds = seconds
        self.expired = False
        self._cut = cut
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._start: float | None = None

    def _fire(self) -> None:
        self.expired = True
        self._cut()

    @property
    def reached(self) -> bool:
        """The deadline fired, or its time has passed: a socket time-out of the same length can end the
        request a moment before the timer does (a busy machine), and then it too had no complete answer
        within the deadline."""
        return self.expired or (self._start is not None and time.monotonic() - self._start >= self.seconds)

    def __enter__(self) -> Deadline:
        self._start = time.monotonic()
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


class Budget:
    """An overall deadline for one command's requests of one kind: the time spent inside `spending()`
    blocks (requests, retries and the waits between them) adds up to at most `seconds`. What the
    command does between its requests (a build between two registry calls) does not count."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds = float(seconds)
        self.what = what  # e.g. "this command's registry requests (LLAMA_BUILDKIT_REGISTRY_DEADLINE)"
        self.spent = 0.0

    def left(self) -> float:
        return self.seconds - self.spent

    def passed(self) -> str:
        return f"the overall deadline of {self.seconds:g} s for {self.what} passed"

    @contextmanager
    def spending(self) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.spent += time.monotonic() - start


def _tracking(pool_cls: type[HTTPConnectionPool],
              conns: weakref.WeakSet[HTTPConnection]) -> type[HTTPConnectionPool]:
    class Tracking(pool_cls):  # type: ignore[misc, valid-type]  # a base class chosen at run time
        def _new_conn(self) -> HTTPConnection:
            conn: HTTPConnection = super()._new_conn()
            conns.add(conn)
            return conn
    return Tracking


class TrackingAdapter(HTTPAdapter):
    """requests' adapter whose open connections can all be cut (shut down) from another thread. A client
    using it sends one request at a time (RegistryClient does), so cutting them all cuts that request."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._conns: weakref.WeakSet[HTTPConnection] = weakref.WeakSet()
        super().__init__(*args, **kwargs)

    def _track(self, manager: PoolManager) -> None:
        manager.pool_classes_by_scheme = {"http": _tracking(HTTPConnectionPool, self._conns),
                                          "https": _tracking(HTTPSConnectionPool, self._conns)}

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self._track(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:  # Any: as requests declares it
        fresh = proxy not in self.proxy_manager
        manager = super().proxy_manager_for(proxy, **kwargs)
        if fresh:
            self._track(manager)
        return manager

    def cut(self) -> None:
        for conn in list(self._conns):
            shut(getattr(conn, "sock", None))


def say_waiting(line: str) -> None:
    """One line on stderr about a long wait (what it waits for, and for how long at most)."""
    try:
        print(f"buildkit: {line}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
