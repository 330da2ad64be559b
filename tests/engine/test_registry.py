"""The registry layer: image references, Docker credentials, and the v2 API client against a real
CNCF distribution registry (plain http, TLS + htpasswd, TLS + token service), fed by the real
engine. Faults (503, Retry-After, connection resets) come from a small proxy in front of it."""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import struct
import subprocess
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

import buildkit.oci.registry as registry_module
from buildkit.oci.credentials import Credentials, config_path, lookup_credentials
from buildkit.core.errors import AuthError, RegistryError
from buildkit.oci.imageref import ImageRef, parse_image_ref
from buildkit.oci.registry import ACCEPT_MANIFESTS, MANIFEST_TYPES, RegistryClient, client_for
from buildkit.oci.registryauth import parse_www_authenticate
from buildkit.oci.registryhttp import CERTS_D_ENV, is_loopback
from registryserver import RegistryServer, head_digest

DIGEST = "sha256:" + "ab" * 32


# ====================================================================== image references


@pytest.mark.parametrize("text, registry, repository, tag, digest", [
    ("busybox", "docker.io", "library/busybox", None, None),
    ("busybox:1.36", "docker.io", "library/busybox", "1.36", None),
    ("user/app:v1", "docker.io", "user/app", "v1", None),
    ("docker.io/busybox", "docker.io", "library/busybox", None, None),
    ("index.docker.io/library/busybox:latest", "docker.io", "library/busybox", "latest", None),
    ("localhost/app", "localhost", "app", None, None),
    ("localhost:5000/app:v1", "localhost:5000", "app", "v1", None),
    ("127.0.0.1:5000/a/b/c:sha-1234567-cpu", "127.0.0.1:5000", "a/b/c", "sha-1234567-cpu", None),
    ("ghcr.io/o/r@" + DIGEST, "ghcr.io", "o/r", None, DIGEST),
    ("ghcr.io/o/r:tag@" + DIGEST, "ghcr.io", "o/r", "tag", DIGEST),
    ("[::1]:5000/x:y", "[::1]:5000", "x", "y", None),
    ("registry.example.com/team/llama-cpp", "registry.example.com", "team/llama-cpp", None, None),
    ("foo:5000", "docker.io", "library/foo", "5000", None),  # no '/': the ':' is a tag, as in Docker
    ("Registry.Example/x", "Registry.Example", "x", None, None),  # upper case: a host, not a repo
    ("a/b__c.d-e---f", "docker.io", "a/b__c.d-e---f", None, None),
])
def test_parse_image_ref(text, registry, repository, tag, digest):
    ref = parse_image_ref(text)
    assert ref == ImageRef(registry, repository, tag, digest)
    assert parse_image_ref(str(ref)) == ref  # str() is the full, canonical form


def test_image_ref_properties():
    hub = parse_image_ref("busybox")
    assert (str(hub), hub.api_host, hub.credential_key, hub.reference) == (
        "docker.io/library/busybox", "registry-1.docker.io", "https://index.docker.io/v1/", "latest")
    local = parse_image_ref("127.0.0.1:5000/x:t@" + DIGEST)
    assert (local.api_host, local.credential_key, local.reference, local.name) == (
        "127.0.0.1:5000", "127.0.0.1:5000", DIGEST, "127.0.0.1:5000/x")
    assert str(local.with_tag("u")) == "127.0.0.1:5000/x:u"


@pytest.mark.parametrize("text, why", [
    ("", "empty"),
    ("Upper", "lower case"),
    ("user/App", "lower case"),
    ("x:", "tag"),
    ("x:-bad", "tag"),
    ("x@sha256:abc", "digest"),
    ("x@md5:" + "0" * 32, "digest"),
    ("a//b", "repository"),
    ("-x", "repository"),
    ("host:port:5000/x", "registry"),
    ("localhost:5000/", "missing"),
    ("x y", "white space"),
    ("a/" + "b" * 260, "longer"),
])
def test_parse_image_ref_errors(text, why):
    with pytest.raises(RegistryError) as info:
        parse_image_ref(text)
    msg = str(info.value)
    assert msg.startswith("invalid image reference") and why in msg and "\n" not in msg


def test_helpers():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3:5000", "localhost:80", "[::1]:5000", "::1"))
    assert not any(is_loopback(h) for h in ("10.0.0.1:5000", "example.com", "[2001:db8::1]:5000", "localhost.x"))
    ch = parse_www_authenticate('Bearer realm="https://auth.example/token",service="reg",'
                                'scope="repository:a/b:pull,push"')
    assert ch and ch.scheme == "bearer" and dict(ch.params) == {
        "realm": "https://auth.example/token", "service": "reg", "scope": "repository:a/b:pull,push"}
    basic = parse_www_authenticate('Basic realm="x"')
    assert basic is not None and basic.scheme == "basic"
    assert parse_www_authenticate("Negotiate") is None
    assert ACCEPT_MANIFESTS.split(", ") == list(MANIFEST_TYPES) and len(MANIFEST_TYPES) == 4


# ====================================================================== credentials


def write_config(dirpath: Path, data: dict) -> dict[str, str]:
    dirpath.mkdir(parents=True, exist_ok=True)
    (dirpath / "config.json").write_text(json.dumps(data))
    return {"DOCKER_CONFIG": str(dirpath), "HOME": str(dirpath.parent), "PATH": os.environ.get("PATH", "")}


def write_helper(bindir: Path, name: str, table: dict[str, tuple[str, str]]) -> Path:
    """A docker-credential-NAME program speaking the real protocol, answering from table; logs its calls."""
    bindir.mkdir(parents=True, exist_ok=True)
    path = bindir / f"docker-credential-{name}"
    path.write_text(f"""#!/usr/bin/env python3
import json, sys
table = {table!r}
server = sys.stdin.read().strip()
with open({str(bindir / (name + '.calls'))!r}, "a") as log:
    log.write(" ".join(sys.argv[1:]) + " " + server + "\\n")
if sys.argv[1:] != ["get"]:
    sys.exit(1)
if server not in table:
    print("credentials not found in native keychain")
    sys.exit(1)
user, secret = table[server]
print(json.dumps({{"ServerURL": server, "Username": user, "Secret": secret}}))
""")
    path.chmod(0o755)
    return path


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_credentials_from_auths(tmp_path):
    env = write_config(tmp_path / "cfg", {"auths": {
        "127.0.0.1:5000": {"auth": b64("alice:s3cret:with:colons")},
        "https://reg.example:8443/v2/": {"username": "bob", "password": "hunter2"},
        "tok.example": {"auth": b64("carol:"), "identitytoken": "refresh-me"},
        "https://index.docker.io/v1/": {"auth": b64("hubuser:hubpw")},
    }})
    creds = lookup_credentials("127.0.0.1:5000", env)
    assert creds == Credentials("alice", "s3cret:with:colons", False)
    assert "auths['127.0.0.1:5000']" in creds.source
    assert lookup_credentials("reg.example:8443", env) == Credentials("bob", "hunter2", False)
    assert lookup_credentials("tok.example", env) == Credentials("carol", "refresh-me", True)
    for hub in ("https://index.docker.io/v1/", "docker.io", "index.docker.io", "registry-1.docker.io"):
        assert lookup_credentials(hub, env) == Credentials("hubuser", "hubpw", False)
    assert lookup_credentials("127.0.0.1:5001", env) is None
    assert lookup_credentials("reg.example", env) is None  # the port is part of the key


@pytest.mark.parametrize("key", ["docker.io", "index.docker.io", "registry-1.docker.io", "https://index.docker.io/v1"])
def test_docker_hub_aliases(tmp_path, key):
    env = write_config(tmp_path / "cfg", {"auths": {key: {"auth": b64("u:p")}}})
    assert lookup_credentials(parse_image_ref("busybox").credential_key, env) == Credentials("u", "p", False)


def test_credentials_secret_never_shown(tmp_path):
    creds = Credentials("alice", "TOPSECRET", False, source="somewhere")
    token = Credentials("<token>", "TOPSECRET", True)
    client = RegistryClient("h", credentials=creds)
    for text in (repr(creds), str(creds), repr(token), repr([creds]), f"{creds}", repr(client)):
        assert "TOPSECRET" not in text
    assert "alice" in repr(creds) and "hidden" in repr(creds)


def test_credentials_config_location_and_errors(tmp_path):
    home = tmp_path / "home"
    (home / ".docker").mkdir(parents=True)
    (home / ".docker" / "config.json").write_text(json.dumps({"auths": {"h:1": {"auth": b64("u:p")}}}))
    env = {"HOME": str(home), "PATH": ""}
    assert config_path(env) == home / ".docker" / "config.json"
    creds = lookup_credentials("h:1", env)
    assert creds == Credentials("u", "p", False) and creds.source.startswith("~/.docker/config.json")
    assert lookup_credentials("h:1", {"HOME": str(tmp_path / "nobody")}) is None  # no file at all
    (home / ".docker" / "config.json").write_text("{not json")
    with pytest.raises(RegistryError, match=r"config.json is not valid JSON \(line 1"):
        lookup_credentials("h:1", env)
    (home / ".docker" / "config.json").write_text(json.dumps({"auths": {"h:1": {"auth": "!!TOPSECRET!!"}}}))
    with pytest.raises(RegistryError) as info:
        lookup_credentials("h:1", env)
    assert "TOPSECRET" not in str(info.value) and "docker login h:1" in str(info.value)


def test_credential_helpers_order(tmp_path):
    bindir = tmp_path / "bin"
    write_helper(bindir, "test", {"reg.example:5000": ("helper-user", "helper-pw"),
                                  "https://index.docker.io/v1/": ("<token>", "hub-refresh")})
    write_helper(bindir, "store", {"reg.example:5000": ("store-user", "store-pw"),
                                   "other.example": ("store-user", "store-pw2")})
    env = write_config(tmp_path / "cfg", {
        "credHelpers": {"reg.example:5000": "test", "docker.io": "test"},
        "credsStore": "store",
        "auths": {"reg.example:5000": {}, "third.example": {"auth": b64("file-user:file-pw")}},
    })
    env["PATH"] = f"{bindir}:{env['PATH']}"
    creds = lookup_credentials("reg.example:5000", env)
    assert creds == Credentials("helper-user", "helper-pw", False)
    assert creds.source == "credential helper docker-credential-test"
    assert lookup_credentials("docker.io", env) == Credentials("<token>", "hub-refresh", True)
    assert lookup_credentials("other.example", env) == Credentials("store-user", "store-pw2", False)
    # the store has nothing for third.example ("credentials not found"): the auths entry is used
    assert lookup_credentials("third.example", env) == Credentials("file-user", "file-pw", False)
    assert lookup_credentials("nothing.example", env) is None
    calls = (bindir / "test.calls").read_text().splitlines()
    assert calls == ["get reg.example:5000", "get https://index.docker.io/v1/"]


def test_missing_credential_helper(tmp_path):
    env = write_config(tmp_path / "cfg", {"credsStore": "nosuch-helper"})
    env["PATH"] = str(tmp_path / "empty")
    with pytest.raises(RegistryError) as info:
        lookup_credentials("reg.example", env)
    assert "docker-credential-nosuch-helper" in str(info.value) and "not on PATH" in str(info.value)


# ====================================================================== the real registry


def docker(*args: str, docker_config: Path | None = None, input: str | None = None,
           check: bool = True) -> subprocess.CompletedProcess:
    argv = ["docker", *(["--config", str(docker_config)] if docker_config else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, input=input, timeout=300, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done


def push_tiny_image(base: str, ref: str, workdir: Path, docker_config: Path | None = None) -> str:
    """Build a tiny image FROM the busybox test image and push it with buildx; the pushed digest."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "hello.txt").write_text(f"pushed as {ref}\n")
    (workdir / "Dockerfile").write_text(f"FROM {base}\nCOPY hello.txt /hello.txt\n")
    meta = workdir / "metadata.json"
    docker("buildx", "build", "--push", "--provenance=false", "--sbom=false", "--metadata-file", str(meta),
           "-t", ref, str(workdir), docker_config=docker_config)
    digest = json.loads(meta.read_text())["containerimage.digest"]
    docker("image", "rm", ref, check=False)
    return digest


def docker_login(reg: RegistryServer, config_dir: Path) -> Path:
    """`docker login` into a temporary DOCKER_CONFIG (~/.docker is never touched); returns the dir."""
    config_dir.mkdir(parents=True, exist_ok=True)
    (user, password), = reg.users.items()
    docker("login", "-u", user, "--password-stdin", reg.host, docker_config=config_dir, input=password)
    return config_dir


@pytest.fixture(scope="module")
def plain_image(registry_plain, busybox_image, tmp_path_factory):
    """tiny image pushed to the plain registry as x:v1; returns its digest."""
    return push_tiny_image(busybox_image, f"{registry_plain.host}/x:v1", tmp_path_factory.mktemp("ctx"))


def _login_and_push(registry, busybox_image, tmp_path_factory):
    """docker login + push to an authenticating registry: (DOCKER_CONFIG dir, digest of app/tiny:v1)."""
    cfg = docker_login(registry, tmp_path_factory.mktemp("docker-config"))
    digest = push_tiny_image(busybox_image, f"{registry.host}/app/tiny:v1",
                             tmp_path_factory.mktemp("ctx"), docker_config=cfg)
    return cfg, digest


@pytest.fixture(scope="module")
def auth_login(registry_auth, busybox_image, tmp_path_factory):
    """The TLS/htpasswd registry, logged in and holding app/tiny:v1."""
    return _login_and_push(registry_auth, busybox_image, tmp_path_factory)


@pytest.fixture(scope="module")
def token_login(registry_token, busybox_image, tmp_path_factory):
    """The bearer-token registry, logged in and holding app/tiny:v1."""
    return _login_and_push(registry_token, busybox_image, tmp_path_factory)


def cfg_env(cfg: Path) -> dict[str, str]:
    return {**os.environ, "DOCKER_CONFIG": str(cfg)}


@pytest.mark.docker
def test_plain_registry_manifests(registry_plain, plain_image):
    with RegistryClient(registry_plain.host) as client:
        info = client.head_manifest("x", "v1")
        assert info is not None and info.digest == plain_image  # what the engine pushed
        assert info.media_type in MANIFEST_TYPES and info.size > 0
        body, media_type, digest = client.get_manifest("x", "v1")
        assert (digest, media_type, len(body)) == (info.digest, info.media_type, info.size)
        assert client.get_manifest("x", digest)[0] == body  # by digest too
        assert client.head_manifest("x", digest) == info


@pytest.mark.docker
def test_put_manifest_adds_tags_and_list_tags_paginates(registry_plain, plain_image):
    with RegistryClient(registry_plain.host) as client:
        body, media_type, digest = client.get_manifest("x", "v1")
        for tag in ("latest", "cpu", "sha-1234567-cpu", "0.1.0"):
            assert client.put_manifest("x", tag, body, media_type) == digest
        assert head_digest(client, "x", "cpu") == digest
        assert sorted(client.list_tags("x", page_size=2)) == ["0.1.0", "cpu", "latest", "sha-1234567-cpu", "v1"]
        assert sorted(client.list_tags("x")) == sorted(client.list_tags("x", page_size=1))
        # the tag is one PUT of the manifest: its blobs exist in x only, so another repository refuses it
        with pytest.raises(RegistryError) as info:
            client.put_manifest("other", "v1", body, media_type)
        msg = str(info.value)
        assert msg.startswith(f"registry {registry_plain.host}: put manifest other:v1 failed: 400")
        assert "MANIFEST_BLOB_UNKNOWN" in msg and "\n" not in msg


@pytest.mark.docker
def test_not_found(registry_plain, plain_image):
    with RegistryClient(registry_plain.host) as client:
        assert client.head_manifest("x", "no-such-tag") is None
        assert client.head_manifest("never/pushed", "v1") is None
        assert client.head_manifest("x", DIGEST) is None
        assert client.list_tags("never/pushed") == []
        with pytest.raises(RegistryError) as info:
            client.get_manifest("x", "no-such-tag")
        assert str(info.value) == (f"registry {registry_plain.host}: get manifest x:no-such-tag failed: "
                                   "404 Not Found (MANIFEST_UNKNOWN: manifest unknown)")
        with pytest.raises(RegistryError, match="invalid repository name"):
            client.head_manifest("../etc", "v1")


@pytest.mark.docker
def test_tls_basic_auth_with_docker_login_credentials(registry_auth, auth_login, caplog, monkeypatch):
    caplog.set_level(logging.DEBUG)
    monkeypatch.delenv(CERTS_D_ENV, raising=False)  # the CA comes from /etc/docker/certs.d, as for the engine
    cfg, digest = auth_login
    creds = lookup_credentials(registry_auth.host, cfg_env(cfg))
    assert creds is not None and creds.username == "alice" and not creds.identity_token
    with client_for(registry_auth.host, cfg_env(cfg)) as client:
        assert head_digest(client, "app/tiny", "v1") == digest
        body, media_type, _ = client.get_manifest("app/tiny", "v1")
        client.put_manifest("app/tiny", "moving", body, media_type)
        assert sorted(client.list_tags("app/tiny", page_size=1)) == ["moving", "v1"]
    password = registry_auth.users["alice"]
    assert password not in caplog.text


@pytest.mark.docker
def test_wrong_password(registry_auth, auth_login, caplog):
    caplog.set_level(logging.DEBUG)
    wrong = Credentials("alice", "WRONG-pw-TOPSECRET", False, source="~/.docker/config.json auths['x']")
    with RegistryClient(registry_auth.host, credentials=wrong) as client:
        with pytest.raises(AuthError) as info:
            client.head_manifest("app/tiny", "v1")
        with pytest.raises(AuthError) as put_info:  # nothing is stored with wrong credentials
            client.put_manifest("app/tiny", "should-not-exist", b"{}", MANIFEST_TYPES[1])
    for exc in (info.value, put_info.value):
        assert str(exc) == (f"registry {registry_auth.host} rejected the credentials for alice "
                            f"(from ~/.docker/config.json auths['x']): 401")
    texts = [str(info.value), repr(info.value), str(put_info.value), caplog.text]
    assert not any("TOPSECRET" in t for t in texts)
    good = Credentials("alice", registry_auth.users["alice"], False)
    with RegistryClient(registry_auth.host, credentials=good) as client:
        assert "should-not-exist" not in client.list_tags("app/tiny")


@pytest.mark.docker
def test_missing_credentials(registry_auth, registry_token, auth_login, token_login):
    for reg in (registry_auth, registry_token):
        with RegistryClient(reg.host) as client, pytest.raises(AuthError) as info:
            client.head_manifest("app/tiny", "v1")
        assert str(info.value) == (f"registry {reg.host}: head manifest app/tiny:v1 needs credentials (401); "
                                   f"run `docker login {reg.host}`")


@pytest.mark.docker
def test_credential_helper_against_registry(registry_auth, auth_login, tmp_path):
    bindir = tmp_path / "bin"
    write_helper(bindir, "test", {registry_auth.host: ("alice", registry_auth.users["alice"])})
    env = write_config(tmp_path / "cfg", {"credHelpers": {registry_auth.host: "test"}})
    env["PATH"] = f"{bindir}:{os.environ['PATH']}"
    with client_for(registry_auth.host, env) as client:
        assert client.credentials is not None
        assert client.credentials.source == "credential helper docker-credential-test"
        assert head_digest(client, "app/tiny", "v1") == auth_login[1]
    assert (bindir / "test.calls").read_text() == f"get {registry_auth.host}\n"


@pytest.mark.docker
def test_token_auth_with_identity_token(registry_token, token_login, caplog):
    caplog.set_level(logging.DEBUG)
    cfg, digest = token_login
    creds = lookup_credentials(registry_token.host, cfg_env(cfg))
    assert creds is not None and creds.identity_token  # docker login stored a refresh token
    grants_before = len(registry_token.token_server.requests)
    with RegistryClient(registry_token.host, credentials=creds) as client:
        assert head_digest(client, "app/tiny", "v1") == digest
        assert client.list_tags("app/tiny") == ["v1"]  # same scope: the cached token
        body, media_type, _ = client.get_manifest("app/tiny", "v1")
        client.put_manifest("app/tiny", "v1-copy", body, media_type)  # pull,push: a second token
    grants = registry_token.token_server.requests[grants_before:]
    assert grants == [("POST", "refresh_token"), ("POST", "refresh_token")]
    assert creds.secret not in caplog.text


@pytest.mark.docker
def test_token_auth_with_password(registry_token, token_login, caplog):
    caplog.set_level(logging.DEBUG)
    (user, password), = registry_token.users.items()
    with RegistryClient(registry_token.host, credentials=Credentials(user, password, False)) as client:
        assert head_digest(client, "app/tiny", "v1") == token_login[1]
    bad = Credentials(user, "TOPSECRET-wrong", False, source="test")
    with RegistryClient(registry_token.host, credentials=bad) as client, pytest.raises(AuthError) as info:
        client.list_tags("app/tiny")
    assert str(info.value) == f"registry {registry_token.host} rejected the credentials for {user} (from test): 401"
    assert password not in caplog.text and "TOPSECRET" not in caplog.text


@pytest.mark.docker
def test_ca_from_certs_d_root_override(registry_auth, auth_login, tmp_path, monkeypatch):
    root = tmp_path / "certs.d"
    root.mkdir()
    monkeypatch.setenv(CERTS_D_ENV, str(root))
    good = Credentials("alice", registry_auth.users["alice"], False)
    with RegistryClient(registry_auth.host, credentials=good) as client, pytest.raises(RegistryError) as info:
        client.head_manifest("app/tiny", "v1")  # no CA there: no trust, and no fallback to http
    msg = str(info.value)
    assert msg.startswith(f"registry {registry_auth.host}: connect failed: TLS certificate not trusted")
    assert str(root / registry_auth.host / "ca.crt") in msg and "\n" not in msg
    registry_auth.install_ca(root)
    with RegistryClient(registry_auth.host, credentials=good) as client:
        assert head_digest(client, "app/tiny", "v1") == auth_login[1]


# ---------------------------------------------------------------------- faults


class FaultProxy:
    """Plain-http proxy on 127.0.0.1 in front of a registry: the first faults answer requests whose
    path contains `match` with 503/429 + Retry-After, or a connection reset; the rest are forwarded."""

    def __init__(self, upstream: str, verify: str | bool = True, match: str = "/manifests/") -> None:
        self.upstream, self.verify, self.match = upstream, verify, match
        self.faults: list[tuple[str, str]] = []  # ("503", retry_after) / ("429", "") / ("reset", "")
        self.log: list[tuple[str, str, str]] = []  # (method, path, what happened)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.host = f"127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def count(self, what: str, path_part: str = "") -> int:
        return sum(1 for _, path, w in self.log if w == what and path_part in path)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def handle(self) -> None:
                try:
                    first = self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    return
                if first == b"\x16":  # a TLS ClientHello: this is plain http, hang up
                    return
                super().handle()

            def _any(self) -> None:
                fault = None
                with proxy._lock:
                    if proxy.match in self.path and proxy.faults:
                        fault = proxy.faults.pop(0)
                if fault and fault[0] == "reset":
                    proxy.log.append((self.command, self.path, "reset"))
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    self.close_connection = True
                    return
                if fault:
                    proxy.log.append((self.command, self.path, fault[0]))
                    self.send_response(int(fault[0]))
                    if fault[1]:
                        self.send_header("Retry-After", fault[1])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                resp = requests.request(self.command, proxy.upstream + self.path, headers=headers, data=body,
                                        verify=proxy.verify, allow_redirects=False, timeout=30)
                proxy.log.append((self.command, self.path, str(resp.status_code)))
                self.send_response(resp.status_code)
                for k, v in resp.headers.items():
                    if k.lower() not in ("transfer-encoding", "connection", "content-encoding", "content-length"):
                        self.send_header(k, v)
                sent = resp.headers.get("Content-Length") if self.command == "HEAD" else str(len(resp.content))
                self.send_header("Content-Length", sent or "0")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(resp.content)

            do_GET = do_HEAD = do_PUT = do_POST = _any

        return Handler


@pytest.fixture
def plain_proxy(registry_plain, plain_image):
    proxy = FaultProxy(registry_plain.url)
    yield proxy
    proxy.close()


def record_waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """From now on, the seconds the registry client waits between tries are recorded instead of slept:
    its clock is the `time` module it imports, replaced by one whose sleep only writes the figure down."""
    recorded: list[float] = []
    monkeypatch.setattr(registry_module, "time", types.SimpleNamespace(sleep=recorded.append))
    return recorded


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    return record_waits(monkeypatch)


@pytest.mark.docker
def test_retry_after_503_then_success(plain_proxy, plain_image, waits):
    plain_proxy.faults = [("503", "1"), ("429", "1")]
    with RegistryClient(plain_proxy.host, backoff=0.05) as client:
        assert head_digest(client, "x", "v1") == plain_image
    assert plain_proxy.count("503") == 1 and plain_proxy.count("429") == 1
    assert plain_proxy.count("200", "/manifests/") == 1
    assert waits == [1, 1]  # both Retry-After: 1 were honoured (backoff alone is 0.05 s, then 0.1 s)


@pytest.mark.docker
def test_retry_after_is_capped_and_resets_are_retried(plain_proxy, plain_image, waits):
    plain_proxy.faults = [("503", "3600"), ("reset", ""), ("reset", "")]
    with RegistryClient(plain_proxy.host, backoff=0.05, max_wait=0.3) as client:
        assert head_digest(client, "x", "v1") == plain_image
    assert waits == pytest.approx([0.3, 0.1, 0.2])  # Retry-After capped at max_wait, then the backoff
    assert plain_proxy.count("reset") == 2 and plain_proxy.count("200", "/manifests/") == 1


@pytest.mark.docker
def test_retries_are_bounded(plain_proxy, plain_image):
    plain_proxy.faults = [("503", "0")] * 10
    with RegistryClient(plain_proxy.host, retries=2, backoff=0.01) as client, pytest.raises(RegistryError) as info:
        client.head_manifest("x", "v1")
    assert str(info.value) == f"registry {plain_proxy.host}: head manifest x:v1 failed: 503 Service Unavailable"
    assert plain_proxy.count("503") == 3  # the first try and 2 retries


@pytest.mark.docker
def test_no_retry_on_404_and_401(plain_proxy, registry_auth, auth_login):
    with RegistryClient(plain_proxy.host, backoff=0.01) as client:
        assert client.head_manifest("x", "missing") is None
        with pytest.raises(RegistryError, match="404"):
            client.get_manifest("x", "missing")
    assert plain_proxy.count("404", "/manifests/missing") == 2  # one HEAD, one GET: no retries
    auth_proxy = FaultProxy(registry_auth.url, verify=str(registry_auth.ca_cert))
    try:
        wrong = Credentials("alice", "wrong", False)
        with RegistryClient(auth_proxy.host, credentials=wrong, backoff=0.01) as client, pytest.raises(AuthError):
            client.head_manifest("app/tiny", "v1")
        assert auth_proxy.log == [("GET", "/v2/", "401"), ("HEAD", "/v2/app/tiny/manifests/v1", "401")]
    finally:
        auth_proxy.close()


@pytest.mark.docker
def test_registry_stopped_and_restarted(tmp_path, busybox_image, monkeypatch):
    with RegistryServer(tmp_path / "reg") as reg:
        digest = push_tiny_image(busybox_image, f"{reg.host}/y:v1", tmp_path / "ctx")
        with RegistryClient(reg.host, retries=6, backoff=0.25) as client:
            client.ping()
            reg.stop()
            restart = threading.Timer(1.5, reg.start)
            restart.start()
            try:
                assert head_digest(client, "y", "v1") == digest  # waited through the outage
            finally:
                restart.join()
        reg.stop()
        waits = record_waits(monkeypatch)
        with RegistryClient(reg.host, retries=2, backoff=0.05) as client:
            with pytest.raises(RegistryError) as info:
                client.head_manifest("y", "v1")
        assert str(info.value) == f"registry {reg.host}: connect failed: connection refused (after 3 attempts)"
        assert waits == pytest.approx([0.05, 0.1])  # the backoff between the three attempts, nothing longer
