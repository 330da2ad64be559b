"""A fault-injecting HTTP proxy on 127.0.0.1 in front of a real llama-server, for bench's error tests.

Every POST is forwarded to the upstream server and its answer streamed back line by line, except
for the requests named in `faults` (1-based count of POSTs), which get one fault:

* ``slow``: wait `delay` seconds before answering (past the client's time-out);
* ``invalid_json``: the 5th `data:` line of the stream is replaced by broken JSON;
* ``http500``: answer HTTP 500 with an OpenAI-style error body, nothing forwarded;
* ``cut``: close the connection after the 5th `data:` line (a server that dies mid-stream);
* ``down_after``: forward the whole answer, but stop listening before its final `data: [DONE]`,
  so the server is gone (connection refused) for every later request.

GET requests (/health) are forwarded as they are.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

FAULTS = ("slow", "invalid_json", "http500", "cut", "down_after")


class _ProxyServer(ThreadingHTTPServer):
    """The listening server, carrying the FaultProxy its handlers answer for."""

    def __init__(self, proxy: FaultProxy) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.proxy = proxy


class _Handler(BaseHTTPRequestHandler):
    server: _ProxyServer
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes: no chunking to get wrong

    def log_message(self, *args) -> None:  # quiet
        pass

    def _upstream(self, method: str, body: bytes | None):
        up = urlsplit(self.server.proxy.upstream)
        assert up.hostname, f"the upstream {self.server.proxy.upstream!r} names no host"
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=120)
        headers = {"Content-Type": self.headers.get("Content-Type", "application/json")} if body is not None else {}
        conn.request(method, self.path, body=body, headers=headers)
        return conn, conn.getresponse()

    def do_GET(self) -> None:
        conn, resp = self._upstream("GET", None)
        data = resp.read()
        conn.close()
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.getheader("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        proxy = self.server.proxy
        number, fault = proxy.next_fault()
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            if fault == "http500":
                data = json.dumps({"error": {"code": 500, "type": "server_error",
                                             "message": "injected failure: the model crashed"}}).encode()
                self.send_response(500)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if fault == "slow":
                time.sleep(proxy.delay)
            conn, resp = self._upstream("POST", body)
            self.send_response(resp.status)
            self.send_header("Content-Type", resp.getheader("Content-Type", "text/event-stream"))
            self.end_headers()
            data_lines = 0
            while True:
                line = resp.readline()
                if not line:
                    break
                if line.startswith(b"data:"):
                    data_lines += 1
                    if fault == "invalid_json" and data_lines == 5:
                        line = b'data: {"choices": [{"index": 0, "delta": {"content": "tru\n'
                    if fault == "cut" and data_lines == 5:
                        break
                    if fault == "down_after" and line.strip() == b"data: [DONE]":
                        proxy.stop_listening()
                self.wfile.write(line)
                self.wfile.flush()
            conn.close()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its time-out): fine


class FaultProxy:
    def __init__(self, upstream: str, faults: dict[int, str] | None = None, delay: float = 5.0):
        for fault in (faults or {}).values():
            assert fault in FAULTS, fault
        self.upstream = upstream
        self.faults = dict(faults or {})
        self.delay = delay
        self.posts = 0
        self._lock = threading.Lock()
        self._server = _ProxyServer(self)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._listening = True

    def next_fault(self) -> tuple[int, str]:
        with self._lock:
            self.posts += 1
            return self.posts, self.faults.get(self.posts, "pass")

    def stop_listening(self) -> None:
        """Close the listening socket now: later connections are refused."""
        with self._lock:
            if not self._listening:
                return
            self._listening = False
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_listening()
