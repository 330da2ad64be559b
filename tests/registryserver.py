"""A real registry for tests: CNCF distribution (`docker-registry serve CONFIG`) on 127.0.0.1.

    with RegistryServer(tmp_path, tls=True, htpasswd={"alice": "secret"}) as reg:
        reg.host  # "127.0.0.1:PORT"; reg.url is "https://127.0.0.1:PORT"
        reg.stop(); reg.start()  # same port, same storage: "registry went away mid-push"

Options:

* ``tls=True``: a throw-away CA and a server certificate for 127.0.0.1 and localhost, made with
  the ``openssl`` CLI; the CA is installed as ``<certs_d_root>/127.0.0.1:PORT/ca.crt``. The root
  defaults to /etc/docker/certs.d, Docker's own, so ``docker push`` trusts the registry too; what
  was created there is removed again by close().
* ``htpasswd={"user": "password"}``: Basic auth (bcrypt, ``htpasswd -Bbn``).
* ``token_auth={"user": "password"}``: Bearer auth as Docker Hub does it, with a small token
  service (:class:`TokenServer`, Python, on 127.0.0.1) that signs RS256 JWTs the registry
  verifies; it issues refresh tokens (``offline_token=true``) and answers the OAuth2
  ``refresh_token`` and ``password`` grants, so ``docker login`` stores an identity token.

Session-scoped fixtures (import them into conftest.py): ``registry_plain`` (http, no auth),
``registry_auth`` (TLS + htpasswd) and ``registry_token`` (TLS + token service); the user and
password are in ``.users``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Self

import pytest
import requests

try:
    from fixtures_docker import unavailable
    from gitserver import free_port
except ImportError:  # imported as tests.registryserver
    from tests.fixtures_docker import unavailable  # type: ignore[no-redef]
    from tests.gitserver import free_port  # type: ignore[no-redef]

if TYPE_CHECKING:
    from buildkit.oci.registry import RegistryClient

REGISTRY_BIN = "docker-registry"
DEFAULT_CERTS_D = Path("/etc/docker/certs.d")
TOKEN_SERVICE = "buildkit-test-registry"
TOKEN_ISSUER = "buildkit-test-token-service"


def _run(*argv: str, cwd: Path | None = None, input: bytes | None = None) -> bytes:
    done = subprocess.run(argv, cwd=cwd, input=input, capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def make_tls(dirpath: Path) -> tuple[Path, Path, Path]:
    """(ca.crt, server.crt, server.key): a throw-away CA and a certificate for 127.0.0.1/localhost."""
    dirpath.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _run("openssl", "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
         "-subj", "/CN=buildkit test CA", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=dirpath)
    _run("openssl", "req", "-new", *ec, "-keyout", "server.key", "-out", "server.csr",
         "-subj", "/CN=127.0.0.1", cwd=dirpath)
    (dirpath / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
    _run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
         "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "server.ext", cwd=dirpath)
    return dirpath / "ca.crt", dirpath / "server.crt", dirpath / "server.key"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def libtrust_key_id(public_der: bytes) -> str:
    """The key ID distribution gives a trusted key: base32 of sha256(SPKI DER)[:30], in groups of 4."""
    text = base64.b32encode(hashlib.sha256(public_der).digest()[:30]).decode().rstrip("=")
    return ":".join(text[i:i + 4] for i in range(0, len(text), 4))


class TokenServer:
    """A Docker-style token service on 127.0.0.1 (GET with Basic auth, POST OAuth2 grants)."""

    def __init__(self, workdir: Path, users: dict[str, str], *, lifetime: int = 300) -> None:
        self.users = dict(users)
        self.lifetime = lifetime
        self.refresh_tokens: dict[str, str] = {}
        self.requests: list[tuple[str, str]] = []  # (method, grant or "basic"/"anonymous")
        self.key = workdir / "token.key"
        self.cert = workdir / "token.crt"
        _run("openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(self.key))
        _run("openssl", "req", "-x509", "-key", str(self.key), "-out", str(self.cert), "-days", "2",
             "-subj", "/CN=buildkit test token signer")
        der = _run("openssl", "pkey", "-in", str(self.key), "-pubout", "-outform", "DER")
        self.kid = libtrust_key_id(der)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.realm = f"http://127.0.0.1:{self._server.server_address[1]}/token"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def sign(self, user: str, scopes: list[str]) -> str:
        now = int(time.time())
        access = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            if kind and name:
                access.append({"type": kind, "name": name, "actions": [a for a in actions.split(",") if a]})
        header = {"typ": "JWT", "alg": "RS256", "kid": self.kid}
        claims = {"iss": TOKEN_ISSUER, "sub": user, "aud": TOKEN_SERVICE, "exp": now + self.lifetime,
                  "nbf": now - 10, "iat": now, "jti": secrets.token_hex(8), "access": access}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        sig = _run("openssl", "dgst", "-sha256", "-sign", str(self.key), input=signing_input.encode())
        return f"{signing_input}.{_b64url(sig)}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, status: int, data: dict) -> None:
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _grant(self, user: str | None, scopes: list[str], offline: bool, key: str) -> None:
                token = server.sign(user or "", scopes if user else [])
                data = {key: token, "expires_in": server.lifetime,
                        "issued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                if offline and user:
                    refresh = secrets.token_urlsafe(24)
                    with server._lock:
                        server.refresh_tokens[refresh] = user
                    data["refresh_token"] = refresh
                self._answer(200, data)

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                scopes = [s for v in query.get("scope", []) for s in v.split(" ") if s]
                user = None
                auth = self.headers.get("Authorization", "")
                if auth.lower().startswith("basic "):
                    name, _, password = base64.b64decode(auth[6:]).decode().partition(":")
                    if server.users.get(name) != password:
                        server.requests.append(("GET", "basic-rejected"))
                        self._answer(401, {"details": "incorrect username or password"})
                        return
                    user = name
                server.requests.append(("GET", "basic" if user else "anonymous"))
                self._grant(user, scopes, query.get("offline_token", [""])[0] == "true", "token")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                grant = form.get("grant_type", [""])[0]
                scopes = [s for v in form.get("scope", []) for s in v.split(" ") if s]
                server.requests.append(("POST", grant))
                user = None
                if grant == "refresh_token":
                    with server._lock:
                        user = server.refresh_tokens.get(form.get("refresh_token", [""])[0])
                elif grant == "password":
                    name, password = form.get("username", [""])[0], form.get("password", [""])[0]
                    user = name if server.users.get(name) == password else None
                if user is None:
                    self._answer(401, {"error": "invalid_grant"})
                    return
                offline = grant == "password" and form.get("access_type", [""])[0] == "offline"
                self._grant(user, scopes, offline, "access_token")

        return Handler


class RegistryServer:
    """`docker-registry serve` on 127.0.0.1:PORT with its own storage; see the module docstring."""

    def __init__(self, workdir: Path, *, tls: bool = False, htpasswd: dict[str, str] | None = None,
                 token_auth: dict[str, str] | None = None, certs_d_root: Path | str | None = DEFAULT_CERTS_D,
                 port: int | None = None) -> None:
        if htpasswd and token_auth:
            raise ValueError("htpasswd and token_auth exclude each other")
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.scheme = "https" if tls else "http"
        self.url = f"{self.scheme}://{self.host}"
        self.users: dict[str, str] = dict(htpasswd or token_auth or {})
        self.storage = self.workdir / "storage"
        self.config_path = self.workdir / "config.yml"
        self.log_path = self.workdir / "registry.log"
        self.ca_cert: Path | None = None
        self.token_server: TokenServer | None = None
        self._installed: list[Path] = []  # created under certs.d, removed by close()
        self._proc: subprocess.Popen | None = None
        config: dict = {
            "version": "0.1",
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.storage)}, "delete": {"enabled": True},
                        "maintenance": {"uploadpurging": {"enabled": False}}},
            "http": {"addr": self.host, "secret": secrets.token_hex(16),
                     "headers": {"X-Content-Type-Options": ["nosniff"]}},
        }
        if tls:
            ca, cert, key = make_tls(self.workdir / "tls")
            self.ca_cert = ca
            config["http"]["tls"] = {"certificate": str(cert), "key": str(key)}
            if certs_d_root is not None:
                self.install_ca(Path(certs_d_root))
        if htpasswd:
            lines = [_run("htpasswd", "-Bbn", user, pw).decode().strip() for user, pw in htpasswd.items()]
            (self.workdir / "htpasswd").write_text("\n".join(lines) + "\n")
            config["auth"] = {"htpasswd": {"realm": "buildkit-test", "path": str(self.workdir / "htpasswd")}}
        if token_auth:
            self.token_server = TokenServer(self.workdir, token_auth)
            config["auth"] = {"token": {"realm": self.token_server.realm, "service": TOKEN_SERVICE,
                                        "issuer": TOKEN_ISSUER, "rootcertbundle": str(self.token_server.cert)}}
        self.config_path.write_text(json.dumps(config, indent=2))  # JSON is YAML

    def install_ca(self, root: Path) -> Path:
        """Put the CA at ROOT/127.0.0.1:PORT/ca.crt (Docker's layout); close() removes it."""
        assert self.ca_cert is not None
        missing = [p for p in (root, root / self.host) if not p.exists()]
        (root / self.host).mkdir(parents=True, exist_ok=True)
        target = root / self.host / "ca.crt"
        shutil.copyfile(self.ca_cert, target)
        self._installed += [target, *reversed(missing)]
        return target

    def start(self, timeout: float = 20.0) -> Self:
        if self._proc is not None and self._proc.poll() is None:
            return self
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
        logf = self.log_path.open("ab")
        self._proc = subprocess.Popen([shutil.which(REGISTRY_BIN) or REGISTRY_BIN, "serve", str(self.config_path)],
                                      stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=env)
        logf.close()
        deadline = time.monotonic() + timeout
        verify = str(self.ca_cert) if self.ca_cert else True
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited ({self._proc.returncode}): {self._log_tail()}")
            try:
                resp = requests.get(f"{self.url}/v2/", timeout=1, verify=verify)
                if resp.status_code in (200, 401):
                    return self
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"docker-registry did not answer on {self.url}/v2/ within {timeout} s: "
                                   f"{self._log_tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def close(self) -> None:
        self.stop()
        if self.token_server is not None:
            self.token_server.close()
            self.token_server = None
        for path in self._installed:
            try:
                path.unlink() if path.is_file() else path.rmdir()
            except OSError:
                pass
        self._installed.clear()

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return " | ".join(lines[-5:]) or "no log output"

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


def _require_tools() -> None:
    for tool in (REGISTRY_BIN, "openssl", "htpasswd"):
        if shutil.which(tool) is None:
            unavailable(f"{tool} is not installed; run: sudo bash scripts/install-engine.sh")


def _serve(tmp_path_factory: pytest.TempPathFactory, name: str, **options: object) -> Iterator[RegistryServer]:
    _require_tools()
    with RegistryServer(tmp_path_factory.mktemp(name), **options) as reg:  # type: ignore[arg-type]
        yield reg


@pytest.fixture(scope="session")
def registry_plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """Plain http, no auth (a loopback registry, as `docker run registry:2` gives)."""
    yield from _serve(tmp_path_factory, "registry-plain")


@pytest.fixture(scope="session")
def registry_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """TLS (CA in /etc/docker/certs.d) and htpasswd Basic auth; `.users` holds the one login."""
    yield from _serve(tmp_path_factory, "registry-auth", tls=True,
                      htpasswd={"alice": "pw-" + secrets.token_hex(8)})


@pytest.fixture(scope="session")
def registry_token(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """TLS and Bearer token auth through a token service; `.users` holds the one login."""
    yield from _serve(tmp_path_factory, "registry-token", tls=True,
                      token_auth={"bob": "pw-" + secrets.token_hex(8)})


def head_digest(client: RegistryClient, repository: str, reference: str) -> str:
    """The digest the registry answers a HEAD of repository:reference with; the manifest must be there (a test
    that expects none asks client.head_manifest for None)."""
    info = client.head_manifest(repository, reference)
    assert info is not None, f"{repository}:{reference}: the registry has no such manifest"
    return info.digest


def tag_digests(client: RegistryClient, repository: str) -> dict[str, str]:
    """Every tag the registry lists for repository, with the digest a HEAD of it answers."""
    return {tag: head_digest(client, repository, tag) for tag in client.list_tags(repository)}
