"""Real git over HTTP on 127.0.0.1 for tests: "dumb" HTTP (plain files after `git update-server-info`)
and "smart" HTTP (git's own `git http-backend`, run as a CGI program per request), each optionally
behind Basic authentication.

    with serve_http(root, smart=True, auth=("user", "tok")) as server:
        url = server.url_for(repo)        # http://127.0.0.1:PORT/<repo path below root>
        server.authorized, server.rejected  # requests that carried the right / no or wrong credentials
"""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

HTTP_BACKEND = "/usr/lib/git-core/git-http-backend"


@dataclass
class HttpGitServer:
    url: str
    root: Path
    smart: bool
    auth: tuple[str, str] | list[tuple[str, str]] | None  # any of a list is accepted
    authorized: int = 0
    rejected: int = 0
    requests: list[str] = field(default_factory=list)
    stall_posts: bool = False  # hold every POST (a fetch's pack request) until release is set
    stalled: threading.Event = field(default_factory=threading.Event)  # a POST is being held
    release: threading.Event = field(default_factory=threading.Event)

    def url_for(self, repo: Path) -> str:
        return f"{self.url}/{repo.resolve().relative_to(self.root).as_posix()}"


class _Handler(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args) -> None:
        pass

    def _allowed(self) -> bool:
        state: HttpGitServer = self.server.state  # type: ignore[attr-defined]
        state.requests.append(f"{self.command} {self.path}")
        if state.auth is None:
            return True
        pairs = state.auth if isinstance(state.auth, list) else [state.auth]
        wanted = {"Basic " + base64.b64encode(f"{u}:{p}".encode()).decode() for u, p in pairs}
        if self.headers.get("Authorization") in wanted:
            state.authorized += 1
            return True
        state.rejected += 1
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="git"')
        self.send_header("Content-Length", "0")
        self.end_headers()
        return False

    def do_GET(self) -> None:
        if not self._allowed():
            return
        if self.server.state.smart:  # type: ignore[attr-defined]
            self._cgi(b"")
        else:
            super().do_GET()

    def do_HEAD(self) -> None:
        if self._allowed():
            super().do_HEAD()

    def do_POST(self) -> None:
        if not self._allowed():
            return
        state: HttpGitServer = self.server.state  # type: ignore[attr-defined]
        if not state.smart:
            self.send_error(405)
            return
        body = self._body()
        if state.stall_posts:
            state.stalled.set()
            state.release.wait(120)
        self._cgi(body)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _cgi(self, body: bytes) -> None:
        state: HttpGitServer = self.server.state  # type: ignore[attr-defined]
        parts = urlsplit(self.path)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_PROJECT_ROOT": str(state.root),
               "GIT_HTTP_EXPORT_ALL": "1", "REQUEST_METHOD": self.command, "PATH_INFO": parts.path,
               "QUERY_STRING": parts.query, "CONTENT_TYPE": self.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "127.0.0.1", "REMOTE_USER": "test",
               "GATEWAY_INTERFACE": "CGI/1.1", "SERVER_PROTOCOL": "HTTP/1.0"}
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        done = subprocess.run([HTTP_BACKEND], input=body, env=env, capture_output=True, check=False)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = done.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name.strip(), value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def prepare_dumb(repo: Path) -> None:
    """What a dumb server needs: the info/refs and objects/info/packs files."""
    subprocess.run(["git", "--git-dir", str(repo if (repo / "HEAD").is_file() else repo / ".git"),
                    "update-server-info"], check=True, capture_output=True)


@contextmanager
def serve_http(root: Path, *, smart: bool,
               auth: tuple[str, str] | list[tuple[str, str]] | None = None) -> Iterator[HttpGitServer]:
    """Serve every repository below root over HTTP on 127.0.0.1 until the block ends."""
    root = root.resolve()
    handler = lambda *a, **kw: _Handler(*a, directory=str(root), **kw)  # noqa: E731
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    state = HttpGitServer(url=f"http://127.0.0.1:{server.server_address[1]}", root=root, smart=smart, auth=auth)
    server.state = state  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
