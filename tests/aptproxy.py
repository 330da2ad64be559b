"""An HTTP proxy for the apt steps of a build on the second engine (tests/second_engine.py), whose RUN steps have
no route out: it listens on that engine's own bridge address and passes apt's plain-http GETs to the machine's
Debian mirror (the host apt uses; no other host), so a build there fetches its packages as apt does here.

    with AptProxy(engine.bridge_address, mirror_host) as proxy:
        proxy.url  # http://10.231.N.1:PORT, given to the build as HTTP_PROXY (docker's client config "proxies")

Only GET and HEAD of http://<mirror host>/... are passed on; anything else is answered 403. Bounded: each answer
streams through, the proxy stops with the test.
"""

from __future__ import annotations

import http.client
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import urlsplit


class AptProxy:
    def __init__(self, address: str, mirror_host: str) -> None:
        self.mirror_host = mirror_host
        self.requests = 0
        self._server = ThreadingHTTPServer((address, 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://{address}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _pass(self) -> None:
                url = urlsplit(self.path)
                if url.scheme != "http" or url.hostname != proxy.mirror_host or url.port not in (None, 80):
                    self.send_error(403, "only the Debian mirror")
                    return
                proxy.requests += 1
                upstream = http.client.HTTPConnection(proxy.mirror_host, 80, timeout=60)
                try:
                    path = url.path + (f"?{url.query}" if url.query else "")
                    headers = {k: v for k, v in self.headers.items() if k.lower() in ("range", "if-modified-since",
                                                                                       "if-range", "accept")}
                    upstream.request(self.command, path, headers=headers)
                    answer = upstream.getresponse()
                    self.send_response(answer.status)
                    for key, value in answer.getheaders():
                        if key.lower() not in ("connection", "transfer-encoding", "keep-alive"):
                            self.send_header(key, value)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    if self.command == "GET":
                        shutil.copyfileobj(answer, self.wfile, 1 << 16)
                finally:
                    upstream.close()
                self.close_connection = True

            do_GET = _pass
            do_HEAD = _pass

        return Handler

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
