"""Hostile HTTP servers on 127.0.0.1 for deadline tests. Each accepts connections and then:

* ``silent``: reads the request and never answers;
* ``stall``: sends a complete-looking status line and headers, then nothing;
* ``trickle_headers``: sends its headers one byte a second (never finishing them in a test's time);
* ``trickle_body``: sends the headers at once, then a body of one byte a second (an event stream
  whose line never ends);
* ``status_then_trickle``: sends the status line at once, then the rest of its headers one byte a
  second (a cut at the deadline leaves a status line and half a header: never an answer);
* ``answer``: sends the bytes of `answer` (a truncated or lying answer; a dict gives them per request
  method, or per request line's start, "GET /v2/team/app/blobs/") and closes the connection. An answer
  that is a `Flood` sends its head, then `size` bytes of zeros, for as long as the client reads them.

With `registry=True` a `GET /v2/` is answered as a registry answers it (200, then the connection is
closed), so a registry client's probe passes and the hostile answer reaches the operation itself.
`connections` counts the connections accepted, `sent` the bytes a Flood got into the socket (what the
client read of it, and at most the sockets' buffers more).
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Self

MODES = ("silent", "stall", "trickle_headers", "trickle_body", "status_then_trickle")  # never a whole answer
_HEADERS = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 100000\r\n"
            b"Docker-Distribution-API-Version: registry/2.0\r\n\r\n")
_STATUS_END = _HEADERS.index(b"\r\n") + 2
_V2 = (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nDocker-Distribution-API-Version: registry/2.0\r\n"
       b"Connection: close\r\n\r\n")


@dataclass(frozen=True)
class Flood:
    """An answer's head, then size bytes of zeros (a body without end, in a test's terms)."""
    head: bytes
    size: int


class HostileServer:
    def __init__(self, mode: str, interval: float = 1.0, *, answer: bytes | Flood | dict[str, bytes | Flood] = b"",
                 registry: bool = False) -> None:
        assert mode in MODES + ("answer",), mode
        self.mode, self.interval, self.answer, self.registry = mode, interval, answer, registry
        self.connections = 0
        self.sent = 0
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.host = f"127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._clients: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        """Wake the accepting thread (shutdown), wait for it to end, and only then close the socket.
        Closing first left the thread in accept() on the descriptor's number, which the next socket
        the process opened reused: the threads of ten finished servers then took the connections of
        a later test's HTTP server, whose own accept() blocked for ever (the CI hang of stop 19)."""
        self._stop.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # a blocked accept() returns (EINVAL) on Linux
        except OSError:
            pass
        self._thread.join(10)
        assert not self._thread.is_alive(), "the hostile server's accept thread did not end"
        self._sock.close()
        for client in self._clients:
            try:
                client.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            self._clients.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _pick(self, line: str) -> bytes | Flood:
        if not isinstance(self.answer, dict):
            return self.answer
        routes = sorted((k for k in self.answer if " " in k and line.startswith(k)), key=len)
        return self.answer[routes[-1]] if routes else self.answer.get(line.split(" ", 1)[0], b"")

    def _serve(self, client: socket.socket) -> None:
        try:
            client.settimeout(0.5)
            try:
                request = client.recv(65536)
            except (TimeoutError, OSError):
                request = b""
            probe = self.registry and request.startswith(b"GET /v2/ ")
            if probe or self.mode == "answer":
                line = request.split(b"\r\n", 1)[0].decode("ascii", "replace")
                answer = self._pick(line) if not probe else _V2
                if isinstance(answer, Flood):
                    client.sendall(answer.head)
                    zeros, left = bytes(1 << 16), answer.size
                    while left > 0 and not self._stop.is_set():
                        client.sendall(zeros[:min(left, len(zeros))])
                        self.sent += min(left, len(zeros))
                        left -= len(zeros)
                else:
                    client.sendall(answer)
                client.shutdown(socket.SHUT_WR)  # the end of the answer; the rest of the request is read
                while client.recv(65536):
                    pass
                return
            if self.mode == "stall":
                client.sendall(_HEADERS)
            elif self.mode == "trickle_body":
                client.sendall(_HEADERS + b"data: ")
            elif self.mode == "status_then_trickle":
                client.sendall(_HEADERS[:_STATUS_END])
            payload = {"trickle_headers": _HEADERS, "status_then_trickle": _HEADERS[_STATUS_END:]}.get(
                self.mode, b"x" * 100000)
            i = 0
            while not self._stop.is_set():
                if self.mode in ("trickle_headers", "trickle_body", "status_then_trickle"):
                    client.sendall(payload[i % len(payload):i % len(payload) + 1])
                    i += 1
                time.sleep(self.interval)
        except OSError:
            pass
