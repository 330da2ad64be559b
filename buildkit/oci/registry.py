"""A small client for the registry HTTP API v2 (manifests and tags), the way Docker talks to it.

* Transport: https with certificate verification. A CA for one registry is read from Docker's own
  place, `/etc/docker/certs.d/<host[:port]>/ca.crt` (with `client.cert`/`client.key` for mutual
  TLS), so the engine and buildkit share one configuration; `$LLAMA_BUILDKIT_DOCKER_CERTS_D`
  moves that root. A loopback registry (127.0.0.0/8, localhost, ::1) that speaks plain http is
  used over http, as Docker does; any other host must speak https.
* Auth: on 401 the `WWW-Authenticate` challenge decides. `Basic` sends the credentials;
  `Bearer realm=...,service=...,scope=...` gets a token from the realm (with the user's password,
  or by the OAuth2 refresh-token grant for an identity token), cached per scope. Credentials only
  travel over https, or plain http to a loopback host.
* Retries: 429, 500, 502, 503, 504 and connection failures are retried with exponential backoff,
  honouring `Retry-After`; both count and each wait are bounded. 401, 403 and 404 never are. A
  request that got no complete answer within its deadline is tried once more, not more.
* Deadlines: `timeout` bounds each whole request (connect, headers and body), not each read: a
  server that trickles or stalls has its sockets shut down when the deadline passes (deadline.py).
  Streamed blob transfers get `transfer_timeout`. A retry says on stderr what it waits for.
* Errors: every failure is one RegistryError line naming the host, the operation and the status;
  AuthError when credentials are missing or rejected. Secrets never reach a message or a log.
"""

from __future__ import annotations

import email.utils
import hashlib
import ipaddress
import json
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self
from urllib.parse import urljoin, urlsplit

import requests

from buildkit import __version__
from buildkit.oci.credentials import Credentials
from buildkit.core.deadline import Deadline, TrackingAdapter, say_waiting
from buildkit.core.errors import AuthError, RegistryError
from buildkit.oci.imageref import DIGEST, REPOSITORY, TAG, is_docker_hub, registry_api_host

log = logging.getLogger("buildkit.registry")

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_TYPES = (OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST)
ACCEPT_MANIFESTS = ", ".join(MANIFEST_TYPES)

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
CERTS_D_ENV = "LLAMA_BUILDKIT_DOCKER_CERTS_D"
DEFAULT_CERTS_D = "/etc/docker/certs.d"
TOKEN_CLIENT_ID = "llama-buildkit"
MAX_PAGES = 10_000
_HTTP_ON_HTTPS = "client sent an http request to an https server"


@dataclass(frozen=True)
class ManifestInfo:
    digest: str  # sha256:...
    media_type: str
    size: int


@dataclass(frozen=True)
class Challenge:
    scheme: str  # "basic" or "bearer", lower case
    params: Mapping[str, str]


_CHALLENGE_PARAM = re.compile(r'\s*([A-Za-z0-9_-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?')


def parse_www_authenticate(header: str) -> Challenge | None:
    """The first Basic or Bearer challenge of a WWW-Authenticate header."""
    text = (header or "").strip()
    match = re.match(r"(?i)(basic|bearer)\b", text)
    if not match:
        return None
    params: dict[str, str] = {}
    pos = match.end()
    while pos < len(text):
        m = _CHALLENGE_PARAM.match(text, pos)
        if not m or m.end() == pos:
            break
        value = m.group(2) if m.group(2) is not None else m.group(3)
        params[m.group(1).lower()] = re.sub(r"\\(.)", r"\1", value)
        pos = m.end()
    return Challenge(scheme=match.group(1).lower(), params=params)


def is_loopback(host: str) -> bool:
    """host or host:port names this machine (127.0.0.0/8, ::1, localhost)."""
    name = host
    if name.startswith("["):
        name = name[1:name.find("]")] if "]" in name else name[1:]
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def certs_dir(host: str, env: Mapping[str, str] | None = None) -> Path:
    """Docker's certs.d folder for host[:port]."""
    env = os.environ if env is None else env
    return Path(env.get(CERTS_D_ENV) or DEFAULT_CERTS_D) / host


def _ca_for(host: str) -> str | bool:
    """requests' `verify` for host: its certs.d CA when there is one, else the system's CAs."""
    ca = certs_dir(host) / "ca.crt"
    return str(ca) if ca.is_file() else True


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _error_detail(resp: requests.Response) -> str:
    """`CODE: message` from a registry error body (distribution's {"errors": [...]}), if any."""
    try:
        data = resp.json()
    except ValueError:
        return ""
    errors = data.get("errors") if isinstance(data, dict) else None
    if not isinstance(errors, list):
        return ""
    parts = []
    for err in errors[:3]:
        if isinstance(err, dict):
            code, message = str(err.get("code") or ""), str(err.get("message") or "")
            parts.append(f"{code}: {message}" if code and message else code or message)
    return _one_line("; ".join(p for p in parts if p))


def _status(resp: requests.Response) -> str:
    text = f"{resp.status_code}"
    if resp.reason:
        text += f" {resp.reason}"
    detail = _error_detail(resp)
    return f"{text} ({detail})" if detail else text


def _describe_connection_error(exc: Exception, timeout: float) -> str:
    if isinstance(exc, requests.Timeout):
        return f"no answer within {timeout:g} s"
    text = str(exc)
    for needle, said in (("Connection refused", "connection refused"),
                         ("Connection reset", "connection reset by the server"),
                         ("RemoteDisconnected", "connection closed by the server without an answer"),
                         ("Connection aborted", "connection closed by the server"),
                         ("Name or service not known", "host name not found"),
                         ("Temporary failure in name resolution", "host name lookup failed"),
                         ("No route to host", "no route to host"),
                         ("Network is unreachable", "network unreachable")):
        if needle in text:
            return said
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return "connection broken while reading the answer"
    return f"connection failed ({type(exc).__name__})"


def _retry_after(resp: requests.Response) -> float | None:
    value = resp.headers.get("Retry-After", "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _check_repo(repo: str) -> None:
    if not isinstance(repo, str) or not REPOSITORY.fullmatch(repo):
        raise RegistryError(f"invalid repository name {repo!r}")


def _check_reference(reference: str) -> None:
    if not isinstance(reference, str) or not (TAG.fullmatch(reference) or DIGEST.fullmatch(reference)):
        raise RegistryError(f"invalid tag or digest {reference!r}")


def _ref_text(repo: str, reference: str) -> str:
    return f"{repo}@{reference}" if ":" in reference else f"{repo}:{reference}"


def _sha256(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


class RegistryClient:
    """Manifests and tags of one registry. Use as a context manager, or call close()."""

    def __init__(self, registry_host: str, *, credentials: Credentials | None = None, timeout: float = 30,
                 retries: int = 5, backoff: float = 0.5, max_wait: float = 30.0,
                 transfer_timeout: float = 3600.0) -> None:
        if not registry_host or "/" in registry_host or any(c.isspace() for c in registry_host):
            raise RegistryError(f"invalid registry host {registry_host!r}: expected host[:port]")
        self.host = registry_host  # as the user named it (docker.io for Docker Hub)
        self.api_host = registry_api_host(registry_host)
        self.credentials = credentials
        self.timeout = float(timeout)
        self.transfer_timeout = max(float(transfer_timeout), self.timeout)
        self.retries = max(0, int(retries))
        self.backoff = max(0.0, float(backoff))
        self.max_wait = max(0.0, float(max_wait))  # cap of any single wait, Retry-After included
        self.loopback = is_loopback(self.api_host)
        self._scheme: str | None = None
        self._basic = False  # the registry asked for Basic auth
        self._bearer: Challenge | None = None  # its token service, once known
        self._tokens: dict[str, tuple[str, float]] = {}  # scope -> (token, expiry on the monotonic clock)
        self._session = requests.Session()
        self._session.trust_env = False  # no ~/.netrc, no REQUESTS_CA_BUNDLE: auth and CAs are ours
        self._session.headers["User-Agent"] = f"llama-buildkit/{__version__}"
        self._adapter = TrackingAdapter()
        self._session.mount("https://", self._adapter)
        self._session.mount("http://", self._adapter)
        self._certs = certs_dir(self.api_host)
        self._verify = _ca_for(self.api_host)
        cert, key = self._certs / "client.cert", self._certs / "client.key"
        if cert.is_file() and key.is_file():
            self._session.cert = (str(cert), str(key))

    # ------------------------------------------------------------------ plumbing

    def __repr__(self) -> str:
        who = f", user={self.credentials.username!r}" if self.credentials else ""
        return f"RegistryClient({self.host!r}{who})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._session.close()

    def _fail(self, op: str, what: str) -> RegistryError:
        return RegistryError(f"registry {self.host}: {op} failed: {what}")

    def _proxies(self, url: str) -> dict[str, str]:
        if self.loopback:
            return {}
        return requests.utils.get_environ_proxies(url)

    def _may_send_secret(self, url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme == "https" or (parts.scheme == "http" and is_loopback(parts.netloc))

    def _send(self, method: str, url: str, op: str, **kwargs: Any) -> requests.Response:
        """One request with retries on 429/5xx and connection failures; SSL errors pass through.
        The whole request (the body too, unless stream=True) ends within self.timeout; an upload within
        self.transfer_timeout."""
        netloc = urlsplit(url).netloc
        verify = self._verify if netloc == self.api_host else _ca_for(netloc)
        timed_out = 0
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            body = kwargs.get("data")
            if hasattr(body, "seek"):  # a file being uploaded: every attempt sends it from its start
                body.seek(0)
            # an upload's body may take long; a streamed download's body gets its own deadline (download_blob)
            limit = self.transfer_timeout if body is not None and hasattr(body, "read") else self.timeout
            try:
                with Deadline(limit, self._adapter.cut) as deadline:
                    resp = self._session.request(method, url, timeout=min(self.timeout, limit), verify=verify,
                                                 proxies=self._proxies(url), **kwargs)
            except requests.exceptions.SSLError:
                if deadline.expired:
                    raise self._fail(op, f"no complete answer within {limit:g} s") from None
                raise
            except (requests.ConnectionError, requests.Timeout,
                    requests.exceptions.ChunkedEncodingError) as exc:
                expired = deadline.expired or isinstance(exc, requests.Timeout)
                why = f"no complete answer within {limit:g} s" if deadline.expired \
                    else _describe_connection_error(exc, self.timeout)
                timed_out += expired
                if last or timed_out > 1:
                    tries = f" (after {attempt + 1} attempts)" if attempt else ""
                    raise self._fail(op, why + tries) from None
                wait = min(self.backoff * 2 ** attempt, self.max_wait)
                if expired or wait >= 2:  # a long wait says what it waits for; a quick retry stays quiet
                    say_waiting(f"registry {self.host}: {op}: {why}; trying again in {wait:.1f} s "
                                f"(attempt {attempt + 2} of at most {self.retries + 1})")
                log.info("registry %s: %s: %s; retrying in %.1f s", self.host, op, why, wait)
                time.sleep(wait)
                continue
            log.debug("registry %s: %s %s -> %s", self.host, method, urlsplit(url).path, resp.status_code)
            if resp.status_code in RETRY_STATUSES and not last:
                wait = self.backoff * 2 ** attempt
                hinted = _retry_after(resp)
                if hinted is not None:
                    wait = max(wait, hinted)
                wait = min(wait, self.max_wait)
                if wait >= 2:
                    say_waiting(f"registry {self.host}: {op}: {resp.status_code}; trying again in {wait:.1f} s")
                log.info("registry %s: %s: %s; retrying in %.1f s", self.host, op, resp.status_code, wait)
                resp.close()
                time.sleep(wait)
                continue
            return resp
        raise AssertionError("unreachable")

    def _base(self) -> str:
        if self._scheme is None:
            self._scheme = self._probe()
        return f"{self._scheme}://{self.api_host}"

    def _probe(self) -> str:
        """https, or http for a loopback registry that speaks plain http; learns the auth challenge."""
        op = "connect"
        try:
            resp = self._send("GET", f"https://{self.api_host}/v2/", op)
            scheme = "https"
        except requests.exceptions.SSLError as exc:
            text = str(exc)
            if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
                reason = _one_line(text.rsplit("certificate verify failed:", 1)[-1].strip(" ')\"(")) \
                    if "certificate verify failed:" in text else "untrusted certificate"
                raise self._fail(op, f"TLS certificate not trusted ({reason}); put the registry's CA "
                                     f"certificate at {self._certs / 'ca.crt'}") from None
            if not self.loopback:
                raise self._fail(op, f"TLS handshake failed ({type(exc).__name__}); the registry must "
                                     "speak https (plain http is only used for loopback registries)") from None
            try:
                resp = self._send("GET", f"http://{self.api_host}/v2/", op)
            except requests.exceptions.SSLError:
                raise self._fail(op, "neither https nor plain http works") from None
            if resp.status_code == 400 and _HTTP_ON_HTTPS in resp.text.lower():
                raise self._fail(op, "TLS handshake failed but the server speaks https") from None
            scheme = "http"
            log.debug("registry %s: loopback registry speaks plain http", self.host)
        if resp.status_code == 401:
            self._learn(parse_www_authenticate(resp.headers.get("WWW-Authenticate", "")))
        elif resp.status_code in RETRY_STATUSES:
            raise self._fail(op, _status(resp))
        resp.close()
        return scheme

    def _learn(self, challenge: Challenge | None) -> None:
        if challenge is None:
            return
        if challenge.scheme == "basic":
            self._basic = True
        elif challenge.params.get("realm"):
            self._bearer = challenge

    # ------------------------------------------------------------------ auth

    def _who(self) -> str:
        assert self.credentials is not None
        return self.credentials.describe() if self.credentials.source else self.credentials.username

    def _rejected(self, status: int) -> AuthError:
        return AuthError(f"registry {self.host} rejected the credentials for {self._who()}: {status}")

    def _login_needed(self, op: str, status: int) -> AuthError:
        return AuthError(f"registry {self.host}: {op} needs credentials ({status}); "
                         f"run `docker login {self.host}`")

    def _valid_token(self, scope: str) -> str | None:
        token = self._tokens.get(scope)
        return token[0] if token and token[1] > time.monotonic() else None

    def _token(self, challenge: Challenge, scope: str, op: str) -> None:
        """Get a bearer token for scope from the challenge's realm and cache it."""
        realm = challenge.params.get("realm", "")
        if urlsplit(realm).scheme not in ("http", "https") or not urlsplit(realm).netloc:
            raise self._fail(op, f"the registry's token realm {realm!r} is not a URL")
        scopes = [scope]
        asked = challenge.params.get("scope")
        if asked:
            scopes += [s for s in asked.split(" ") if s and s not in scopes]
        service = challenge.params.get("service")
        creds = self.credentials
        realm_host = urlsplit(realm).netloc
        token_op = f"{op}: token from {realm_host}"
        if creds and not self._may_send_secret(realm):
            raise self._fail(op, f"the token service {realm_host} is plain http; refusing to send credentials")
        if creds and creds.identity_token:
            form = {"grant_type": "refresh_token", "refresh_token": creds.secret, "client_id": TOKEN_CLIENT_ID,
                    "scope": " ".join(scopes)}
            if service:
                form["service"] = service
            resp = self._send("POST", realm, token_op, data=form)
        else:
            params = [("service", service)] if service else []
            params += [("scope", s) for s in scopes]
            if creds:
                params.append(("account", creds.username))
            resp = self._send("GET", realm, token_op, params=params,
                              auth=(creds.username, creds.secret) if creds else None)
        with resp:
            if resp.status_code in (401, 403):
                raise self._rejected(resp.status_code) if creds else self._login_needed(op, resp.status_code)
            if resp.status_code != 200:
                raise self._fail(token_op, _status(resp))
            try:
                data = resp.json()
            except ValueError:
                raise self._fail(token_op, "the token service answered something that is not JSON") from None
        token = (data.get("token") or data.get("access_token")) if isinstance(data, dict) else None
        if not isinstance(token, str) or not token:
            raise self._fail(token_op, "the token service answered without a token")
        try:
            lifetime = float(data.get("expires_in") or 60)
        except (TypeError, ValueError):
            lifetime = 60.0
        self._tokens[scope] = (token, time.monotonic() + max(lifetime - 10, 5))

    def _request(self, method: str, path: str, op: str, scope: str, *, url: str | None = None,
                 headers: Mapping[str, str] | None = None, **kwargs: Any) -> requests.Response:
        """A registry API request with auth: answers a 401 challenge once, then gives up with AuthError."""
        fresh = False  # credentials or a token were just obtained for this request
        while True:
            target = url or self._base() + path
            if self._bearer and not fresh and self._valid_token(scope) is None:
                self._token(self._bearer, scope, op)
                fresh = True
            send_headers = dict(headers or {})
            extra = dict(kwargs)
            token = self._valid_token(scope)
            if token:
                send_headers["Authorization"] = f"Bearer {token}"
            elif self._basic and self.credentials:
                if not self._may_send_secret(target):
                    raise self._fail(op, "the registry asks for a password over plain http; refusing to send it")
                extra["auth"] = (self.credentials.username, self.credentials.secret)
            resp = self._send(method, target, op, headers=send_headers, **extra)
            if resp.status_code == 403:
                resp.close()
                if self.credentials:
                    raise AuthError(f"registry {self.host}: {op} denied to {self._who()}: 403")
                raise self._login_needed(op, 403)
            if resp.status_code != 401:
                return resp
            challenge = parse_www_authenticate(resp.headers.get("WWW-Authenticate", ""))
            resp.close()
            if challenge is None:
                raise self._fail(op, "401 without a Basic or Bearer challenge")
            if fresh or (challenge.scheme == "basic" and "auth" in extra):
                if self.credentials:
                    raise self._rejected(401)
                raise self._login_needed(op, 401)
            self._tokens.pop(scope, None)  # an expired or too narrow token: get a new one
            self._learn(challenge)
            if challenge.scheme == "basic":
                if not self.credentials:
                    raise self._login_needed(op, 401)
            else:
                self._token(challenge, scope, op)
            fresh = True

    # ------------------------------------------------------------------ API

    def ping(self) -> None:
        """Reach the registry (decides http/https and learns how it authenticates)."""
        self._base()

    def head_manifest(self, repo: str, reference: str) -> ManifestInfo | None:
        """Digest, media type and size of a manifest; None when the registry does not have it."""
        _check_repo(repo)
        _check_reference(reference)
        op = f"head manifest {_ref_text(repo, reference)}"
        with self._request("HEAD", f"/v2/{repo}/manifests/{reference}", op, f"repository:{repo}:pull",
                           headers={"Accept": ACCEPT_MANIFESTS}) as resp:
            if resp.status_code == 404:
                return None
            if resp.status_code != 200:
                raise self._fail(op, _status(resp))
            digest = resp.headers.get("Docker-Content-Digest", "")
            media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
            size = resp.headers.get("Content-Length", "")
        if not DIGEST.fullmatch(digest) or not size.isdigit():
            got = self._get_manifest(repo, reference, missing_ok=True)
            if got is None:
                return None
            body, media_type, digest = got
            return ManifestInfo(digest=digest, media_type=media_type, size=len(body))
        return ManifestInfo(digest=digest, media_type=media_type, size=int(size))

    def get_manifest(self, repo: str, reference: str) -> tuple[bytes, str, str]:
        """(body, media type, digest) of a manifest; RegistryError (404 included) when missing."""
        got = self._get_manifest(repo, reference, missing_ok=False)
        assert got is not None
        return got

    def _get_manifest(self, repo: str, reference: str, missing_ok: bool) -> tuple[bytes, str, str] | None:
        _check_repo(repo)
        _check_reference(reference)
        op = f"get manifest {_ref_text(repo, reference)}"
        with self._request("GET", f"/v2/{repo}/manifests/{reference}", op, f"repository:{repo}:pull",
                           headers={"Accept": ACCEPT_MANIFESTS}) as resp:
            if resp.status_code == 404 and missing_ok:
                return None
            if resp.status_code != 200:
                raise self._fail(op, _status(resp))
            body = resp.content
            media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
            header_digest = resp.headers.get("Docker-Content-Digest", "")
        computed = _sha256(body)
        if DIGEST.fullmatch(reference) and reference.startswith("sha256:") and reference != computed:
            raise self._fail(op, f"the manifest received has digest {computed}, not the one asked for")
        if header_digest.startswith("sha256:") and header_digest != computed:
            raise self._fail(op, f"the manifest received has digest {computed}, the registry says {header_digest}")
        if media_type not in MANIFEST_TYPES:
            try:
                declared = json.loads(body).get("mediaType")
            except (ValueError, AttributeError):
                declared = None
            if isinstance(declared, str) and declared:
                media_type = declared
        return body, media_type, computed

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        """Store a manifest under a tag (or its digest); returns its digest.

        With a manifest already in the repository this adds a tag without moving any blob: the
        way a moving tag (`latest`, `cuda13.1-sm120`) is pointed at a new image."""
        _check_repo(repo)
        _check_reference(reference)
        op = f"put manifest {_ref_text(repo, reference)}"
        with self._request("PUT", f"/v2/{repo}/manifests/{reference}", op, f"repository:{repo}:pull,push",
                           data=body, headers={"Content-Type": media_type}) as resp:
            if resp.status_code not in (200, 201, 202):
                raise self._fail(op, _status(resp))
            digest = resp.headers.get("Docker-Content-Digest", "")
        computed = _sha256(body)
        if digest and digest.startswith("sha256:") and digest != computed:
            raise self._fail(op, f"the registry stored digest {digest}, expected {computed}")
        return computed

    def get_blob(self, repo: str, digest: str, max_bytes: int = 4 << 20) -> bytes:
        """A small blob (an image config), checked against its digest."""
        _check_repo(repo)
        _check_reference(digest)
        op = f"get blob {repo}@{digest}"
        with self._request("GET", f"/v2/{repo}/blobs/{digest}", op, f"repository:{repo}:pull") as resp:
            if resp.status_code != 200:
                raise self._fail(op, _status(resp))
            body = resp.content
        if len(body) > max_bytes:
            raise self._fail(op, f"the blob is larger than {max_bytes} bytes")
        if _sha256(body) != digest:
            raise self._fail(op, f"the blob received has digest {_sha256(body)}")
        return body

    def blob_exists(self, repo: str, digest: str) -> bool:
        """Whether the repository has the blob (HEAD /v2/<repo>/blobs/<digest>)."""
        _check_repo(repo)
        _check_reference(digest)
        op = f"head blob {repo}@{digest}"
        with self._request("HEAD", f"/v2/{repo}/blobs/{digest}", op, f"repository:{repo}:pull") as resp:
            if resp.status_code == 404:
                return False
            if resp.status_code != 200:
                raise self._fail(op, _status(resp))
            return True

    def download_blob(self, repo: str, digest: str, dest: Path) -> None:
        """Stream a blob of any size into dest (written atomically), checked against its digest."""
        _check_repo(repo)
        _check_reference(digest)
        op = f"get blob {repo}@{digest}"
        tmp = dest.with_name(dest.name + ".part")
        with self._request("GET", f"/v2/{repo}/blobs/{digest}", op, f"repository:{repo}:pull", stream=True) as resp:
            if resp.status_code != 200:
                raise self._fail(op, _status(resp))
            h = hashlib.sha256()
            try:
                with Deadline(self.transfer_timeout, self._adapter.cut) as deadline, open(tmp, "wb") as fh:
                    for chunk in resp.iter_content(1 << 20):
                        h.update(chunk)
                        fh.write(chunk)
                if deadline.expired:
                    raise requests.exceptions.ChunkedEncodingError("cut at the deadline")
            except requests.RequestException as exc:
                tmp.unlink(missing_ok=True)
                why = f"no complete blob within {self.transfer_timeout:g} s" if deadline.expired \
                    else _describe_connection_error(exc, self.timeout)
                raise self._fail(op, why) from None
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
        got = "sha256:" + h.hexdigest()
        if got != digest:
            tmp.unlink(missing_ok=True)
            raise self._fail(op, f"the blob received has digest {got}")
        os.replace(tmp, dest)

    def upload_blob(self, repo: str, digest: str, data: Any, size: int) -> None:
        """Upload one blob: POST a session, then PUT the bytes monolithically with ?digest=.

        data is bytes or a binary file positioned at the start (it must be seekable for a retry)."""
        _check_repo(repo)
        _check_reference(digest)
        op = f"upload blob {repo}@{digest[:19]}"
        scope = f"repository:{repo}:pull,push"
        with self._request("POST", f"/v2/{repo}/blobs/uploads/", op, scope,
                           headers={"Content-Length": "0"}) as resp:
            if resp.status_code == 201:  # the registry mounted or already had it
                return
            if resp.status_code != 202 or not resp.headers.get("Location"):
                raise self._fail(op, _status(resp))
            location = urljoin(resp.url, resp.headers["Location"])
        if urlsplit(location).netloc != urlsplit(self._base()).netloc:
            raise self._fail(op, f"the upload location {urlsplit(location).netloc} is another host")
        sep = "&" if urlsplit(location).query else "?"
        start = data.tell() if hasattr(data, "tell") else None
        body = data
        if start is not None and hasattr(data, "seek"):
            body = _SizedReader(data, size)
        with self._request("PUT", "", op, scope, url=f"{location}{sep}digest={digest}", data=body,
                           headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)}) as resp:
            if resp.status_code not in (201, 204):
                raise self._fail(op, _status(resp))
            stored = resp.headers.get("Docker-Content-Digest", "")
        if stored and stored != digest:
            raise self._fail(op, f"the registry stored digest {stored}, expected {digest}")

    def list_tags(self, repo: str, page_size: int = 100) -> list[str]:
        """Every tag of repo, following `Link: <...>; rel="next"` pages; [] for an unknown repository."""
        _check_repo(repo)
        op = f"list tags {repo}"
        scope = f"repository:{repo}:pull"
        tags: list[str] = []
        url = None
        seen: set[str] = set()
        params: dict[str, Any] | None = {"n": int(page_size)}
        for _ in range(MAX_PAGES):
            with self._request("GET", f"/v2/{repo}/tags/list", op, scope, url=url, params=params) as resp:
                if resp.status_code == 404:
                    return tags
                if resp.status_code != 200:
                    raise self._fail(op, _status(resp))
                try:
                    data = resp.json()
                except ValueError:
                    raise self._fail(op, "the answer is not JSON") from None
                page = data.get("tags") if isinstance(data, dict) else None
                tags.extend(t for t in (page or []) if isinstance(t, str))
                nxt = resp.links.get("next", {}).get("url")
                base = resp.url
            if not nxt:
                return tags
            url = urljoin(base, nxt)
            if urlsplit(url).netloc != urlsplit(base).netloc or url in seen:
                raise self._fail(op, f"the next-page link {nxt!r} leaves the registry or loops")
            seen.add(url)
            params = None
        raise self._fail(op, f"more than {MAX_PAGES} pages of tags")


class _SizedReader:
    """A file of known size for requests (sent with Content-Length, not chunked); rewound on a retry."""

    def __init__(self, fh: Any, size: int) -> None:
        self.fh, self.size, self.start = fh, size, fh.tell()
        self.len = size

    def read(self, n: int = -1) -> bytes:
        return self.fh.read(n)

    def __len__(self) -> int:
        return self.size

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.fh.seek(self.start + offset if whence == 0 else offset, whence)

    def tell(self) -> int:
        return self.fh.tell() - self.start


def client_for(registry: str, env: Mapping[str, str] | None = None, **kwargs: Any) -> RegistryClient:
    """A client for registry (host[:port] or docker.io) with the credentials `docker login` stored."""
    from buildkit.oci.credentials import lookup_credentials
    from buildkit.oci.imageref import registry_credential_key

    creds = lookup_credentials(registry_credential_key(registry), env)
    return RegistryClient(registry, credentials=creds, **kwargs)


__all__ = ["ACCEPT_MANIFESTS", "AuthError", "ManifestInfo", "RegistryClient", "RegistryError", "client_for",
           "is_docker_hub", "is_loopback", "parse_www_authenticate"]
