"""Credentials and tokens stay home across redirects (issue 39, class 2), against real servers on loopback.

A registry (Basic or Bearer auth) and its token service, both small HTTP servers on 127.0.0.1, answer
with a redirect (301, 302, 303, 307, 308) to another origin: a recording server on another port. Every
grant of the token service (anonymous, the password's Basic GET, the OAuth2 refresh-token POST) and every
kind of registry request (manifest GET and HEAD, tag list, blob GET, HEAD and download, upload start) is
redirected there, and the recorder must have received no credential of any kind: no Authorization header,
no password, no refresh token, no bearer token, in the headers, the query or the body. The refresh-token
grant is the one that failed before: requests sent its form again on a 307 or 308, wherever it pointed.
A redirect to the same origin is still followed with the credentials (a registry may move a path).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from buildkit.core.errors import BuildkitError
from buildkit.oci.credentials import Credentials
from buildkit.oci.registry import RegistryClient

USER, PASSWORD = "alice", "pa55-word-not-for-elsewhere"
REFRESH = "refresh-token-that-stays-home"
GOOD_TOKEN = "bearer-token-for-the-registry-only"
SECRETS = (PASSWORD, REFRESH, GOOD_TOKEN, base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode())
STATUSES = (301, 302, 303, 307, 308)
MANIFEST = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                  "digest": "sha256:" + "0" * 64, "size": 2}, "layers": []}).encode()
MANIFEST_DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()


class Server:
    """One HTTP server on 127.0.0.1 answering every request with `answer(handler, body) -> (status, headers,
    body)`; it records each request it gets (method, path with query, headers, body)."""

    def __init__(self, answer: Callable[[BaseHTTPRequestHandler, bytes], tuple[int, dict[str, str], bytes]]):
        self.answer = answer
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                server.seen.append((self.command, self.path, dict(self.headers.items()), body))
                status, headers, out = server.answer(self, body)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(out)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self.host = self.url.split("//", 1)[1]
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def leaked(self) -> list[str]:
        """What of the secrets reached this server, and where."""
        found = []
        for method, path, headers, body in self.seen:
            if any(k.lower() == "authorization" for k in headers):
                found.append(f"{method} {path}: an Authorization header")
            text = urllib.parse.unquote_plus(path) + " " + json.dumps(headers) + " " + \
                urllib.parse.unquote_plus(body.decode(errors="replace"))
            found += [f"{method} {path}: {s!r}" for s in SECRETS if s in text]
        return found


def _json(status: int, data: dict, **headers: str) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json", **headers}, json.dumps(data).encode()


@pytest.fixture
def recorder() -> Iterator[Server]:
    """Another origin: answers everything with a token of its own and a manifest-looking 200."""
    server = Server(lambda h, body: _json(200, {"token": "foreign", "access_token": "foreign"}))
    yield server
    server.close()


def _registry(auth: str, redirect: Callable[[str], tuple[int, str] | None], realm: str = "") -> Server:
    """A registry speaking `auth` ("basic" or "bearer" with `realm`): /v2/ and every other path need the
    credentials; an authorised request is answered with redirect(path), or a manifest when that is None."""

    def answer(h: BaseHTTPRequestHandler, body: bytes) -> tuple[int, dict[str, str], bytes]:
        got = h.headers.get("Authorization", "")
        ok = got == f"Bearer {GOOD_TOKEN}" if auth == "bearer" else \
            got == "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if not ok:
            challenge = f'Bearer realm="{realm}",service="test"' if auth == "bearer" else 'Basic realm="test"'
            return _json(401, {"errors": [{"code": "UNAUTHORIZED"}]}, **{"WWW-Authenticate": challenge})
        if h.path == "/v2/":
            return _json(200, {})
        where = redirect(h.path)
        if where:
            return where[0], {"Location": where[1]}, b""
        return 200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json",
                     "Docker-Content-Digest": MANIFEST_DIGEST}, MANIFEST

    return Server(answer)


def _token_service(redirect: Callable[[str], tuple[int, str] | None]) -> Server:
    """A token service that redirects (redirect(path) not None) or grants GOOD_TOKEN to the right grant."""

    def answer(h: BaseHTTPRequestHandler, body: bytes) -> tuple[int, dict[str, str], bytes]:
        where = redirect(h.path)
        if where:
            return where[0], {"Location": where[1]}, b""
        form = urllib.parse.parse_qs(body.decode())
        basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if form.get("refresh_token") == [REFRESH] or h.headers.get("Authorization") == basic:
            return _json(200, {"token": GOOD_TOKEN, "access_token": GOOD_TOKEN, "expires_in": 300})
        return _json(401, {"error": "invalid_grant"})

    return Server(answer)


def _credentials(grant: str) -> Credentials | None:
    return {"anonymous": None, "password": Credentials(USER, PASSWORD, False),
            "refresh": Credentials(USER, REFRESH, True)}[grant]


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("grant", ["anonymous", "password", "refresh"])
def test_a_token_service_redirecting_elsewhere_gets_no_credential_through(recorder, grant, status):
    tokens = _token_service(lambda path: (status, recorder.url + path))
    registry = _registry("bearer", lambda path: None, realm=tokens.url + "/token")
    try:
        with RegistryClient(registry.host, credentials=_credentials(grant), retries=0) as client, \
                pytest.raises(BuildkitError) as failed:
            client.get_manifest("team/model", "latest")
        assert "\n" not in str(failed.value)
        assert recorder.leaked() == []
        assert tokens.seen, "the token service was asked"
        if grant == "refresh" and status in (307, 308):  # the body would go along: not followed at all
            assert recorder.seen == [] and "not followed" in str(failed.value)
    finally:
        tokens.close()
        registry.close()


KINDS: dict[str, Callable[[RegistryClient], object]] = {
    "manifest GET": lambda c: c.get_manifest("team/model", "latest"),
    "manifest HEAD": lambda c: c.head_manifest("team/model", "latest"),
    "tag list": lambda c: c.list_tags("team/model"),
    "blob GET": lambda c: c.get_blob("team/model", "sha256:" + "1" * 64, max_bytes=100),
    "blob HEAD": lambda c: c.blob_exists("team/model", "sha256:" + "1" * 64),
    "upload start": lambda c: c.upload_blob("team/model", "sha256:" + "2" * 64, b"xy", 2),
}


@pytest.mark.parametrize("status", (302, 307))
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("auth", ["basic", "bearer"])
def test_a_registry_request_redirected_elsewhere_goes_there_bare(recorder, tmp_path: Path, auth, kind, status):
    tokens = _token_service(lambda path: None)
    registry = _registry(auth, lambda path: (status, recorder.url + path), realm=tokens.url + "/token")
    try:
        with RegistryClient(registry.host, credentials=Credentials(USER, PASSWORD, False), retries=0) as client:
            try:
                KINDS[kind](client)
            except BuildkitError as exc:
                assert "\n" not in str(exc)
        assert recorder.leaked() == []
        assert registry.seen and any(p != "/v2/" for _, p, _, _ in registry.seen)
    finally:
        tokens.close()
        registry.close()


def test_a_redirect_target_asking_for_credentials_gets_none(tmp_path: Path):
    """The registry redirects to another origin, which answers 401 naming a token realm of its own: the
    client's password must not go to that realm (it did: the challenge was taken as the registry's)."""
    trap = Server(lambda h, body: _json(
        401, {}, **{"WWW-Authenticate": f'Bearer realm="http://{h.headers.get("Host")}/token",service="x"'}))
    registry = _registry("basic", lambda path: (307, trap.url + path))
    try:
        with RegistryClient(registry.host, credentials=Credentials(USER, PASSWORD, False), retries=0) as client, \
                pytest.raises(BuildkitError) as failed:
            client.get_manifest("team/model", "latest")
        assert trap.leaked() == []
        assert "credentials go only to the registry" in str(failed.value)
    finally:
        trap.close()
        registry.close()


@pytest.mark.parametrize("grant", ["password", "refresh"])
def test_redirects_within_the_same_origin_keep_the_credentials(grant):
    moved = {"/token": "/token/v2"}
    tokens = _token_service(lambda path: (307, moved[path]) if path in moved else None)
    registry = _registry("bearer" if grant == "refresh" else "basic",
                         lambda path: (301, "/v2/team/model/manifests/new") if path.endswith("/old") else None,
                         realm=tokens.url + "/token")
    try:
        with RegistryClient(registry.host, credentials=_credentials(grant), retries=0) as client:
            body, _media, digest = client.get_manifest("team/model", "old")
        assert body == MANIFEST and digest == MANIFEST_DIGEST
        assert [p for _, p, _, _ in registry.seen if "manifests" in p][-2:] == ["/v2/team/model/manifests/old",
                                                                               "/v2/team/model/manifests/new"]
    finally:
        tokens.close()
        registry.close()
