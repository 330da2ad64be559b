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
  server that trickles or stalls has its sockets shut down when the deadline passes (deadline.py),
  and what arrived before is never taken for the answer. `deadline` bounds all of the client's
  requests together (retries and their waits included), blob bytes aside; `transfer_timeout` all of
  its blob bytes together. client_for takes them from LLAMA_BUILDKIT_REGISTRY_TIMEOUT (30 s),
  LLAMA_BUILDKIT_REGISTRY_DEADLINE (600 s) and LLAMA_BUILDKIT_REGISTRY_TRANSFER_DEADLINE (3600 s).
  A retry says on stderr what it waits for.
* Answers: a manifest counts only when it matches the digest it was asked by, or the
  Docker-Content-Digest it came with; a PUT only with 201 Created and the digest that was sent. Every
  body is read raw within its limit (4 MiB; a blob its declared size), never decoded beyond it.
* Errors: every failure is one RegistryError line naming the host, the operation and the status;
  AuthError when credentials are missing or rejected. Secrets never reach a message or a log.

This module holds the client's connection, retrying transport and manifests/tags; its auth is
registryauth.py, its blob transfers registryblobs.py, its referrers API registryreferrers.py, the stateless
pieces registryhttp.py.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import urljoin, urlsplit

import requests

from buildkit import __version__
from buildkit.core.deadline import Budget, Deadline, TrackingAdapter, say_waiting
from buildkit.core.errors import AuthError, RegistryError
from buildkit.oci.credentials import Credentials, lookup_credentials
from buildkit.oci.imageref import DIGEST, is_docker_hub, registry_api_host, registry_credential_key
from buildkit.oci.registryauth import Challenge, RegistryAuth, parse_www_authenticate
from buildkit.oci.redirects import MAX_REDIRECTS, REDIRECT_STATUSES, next_hop
from buildkit.oci.registryblobs import BlobTransfers
from buildkit.oci.registryreferrers import ReferrersAPI
from buildkit.oci.digest import MAX_DOCUMENT
from buildkit.oci.registryhttp import (DEADLINE, DEADLINE_ENV, RETRY_STATUSES, TIMEOUT, TRANSFER_DEADLINE,
                                       TRANSFER_DEADLINE_ENV, BadBody, ca_for, certs_dir, check_reference, check_repo,
                                       deadlines_from, describe_connection_error, is_loopback, matches, not_created,
                                       one_line, read_body, ref_text, retry_after, sha256_digest, status_text)

log = logging.getLogger("buildkit.registry")

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_TYPES = (OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST)
ACCEPT_MANIFESTS = ", ".join(MANIFEST_TYPES)
MAX_PAGES = 10_000
_HTTP_ON_HTTPS = "client sent an http request to an https server"


@dataclass(frozen=True)
class ManifestInfo:
    digest: str  # sha256:...
    media_type: str
    size: int


class RegistryClient(RegistryAuth, BlobTransfers, ReferrersAPI):
    """Manifests and tags of one registry. Use as a context manager, or call close()."""

    def __init__(self, registry_host: str, *, credentials: Credentials | None = None,
                 timeout: float = TIMEOUT, retries: int = 5, backoff: float = 0.5, max_wait: float = 30.0,
                 deadline: float = DEADLINE, transfer_timeout: float = TRANSFER_DEADLINE) -> None:
        if not registry_host or "/" in registry_host or any(c.isspace() for c in registry_host):
            raise RegistryError(f"invalid registry host {registry_host!r}: expected host[:port]")
        self.host = registry_host  # as the user named it (docker.io for Docker Hub)
        self.api_host = registry_api_host(registry_host)
        self.credentials = credentials
        self.timeout = float(timeout)
        self.transfer_timeout = max(float(transfer_timeout), self.timeout)
        self._requests = Budget(deadline, f"this command's registry requests ({DEADLINE_ENV})")
        self._transfers = Budget(self.transfer_timeout, f"this command's blob transfers ({TRANSFER_DEADLINE_ENV})")
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
        self._verify = ca_for(self.api_host)
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
        return RegistryError(f"registry {self.host}: {op} failed: {one_line(what, 600)}")  # printable: core/printable

    def _proxies(self, url: str) -> dict[str, str]:
        if self.loopback:
            return {}
        return requests.utils.get_environ_proxies(url)

    def _may_send_secret(self, url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme == "https" or (parts.scheme == "http" and is_loopback(parts.netloc))

    def _send(self, method: str, url: str, op: str, *, secret_body: bool = False, **kwargs: Any) -> requests.Response:
        """_send_once, and the redirects of its answers followed here, hop by hop (oci/redirects.py):
        credentials and tokens never go to another origin, and never from https to plain http."""
        for hops in range(MAX_REDIRECTS + 1):
            resp = self._send_once(method, url, op, **kwargs)
            if resp.status_code not in REDIRECT_STATUSES or not resp.headers.get("Location"):
                return resp
            location, status = resp.headers["Location"], resp.status_code
            resp.close()
            hop = next_hop(method, url, location, status, secret_body=secret_body and "data" in kwargs, hops=hops)
            if isinstance(hop, str):
                raise self._fail(op, hop)
            method, url, kwargs = hop.method, hop.url, hop.carry(kwargs)
        raise AssertionError("unreachable")

    def _send_once(self, method: str, url: str, op: str, **kwargs: Any) -> requests.Response:
        """One request with retries on 429/5xx and connection failures; SSL errors pass through.
        The whole request (the body too, unless stream=True) ends within self.timeout, an upload within
        what is left of self._transfers; every other request and wait within what is left of
        self._requests. An answer cut at its deadline is a failure, never the answer. A body is read raw
        within max_body bytes (registryhttp.iter_body: no gzip bomb), over it is the failure."""
        stream = kwargs.pop("stream", False)
        max_body = kwargs.pop("max_body", MAX_DOCUMENT)
        netloc = urlsplit(url).netloc
        verify = self._verify if netloc == self.api_host else ca_for(netloc)
        body = kwargs.get("data")
        upload = body is not None and hasattr(body, "read")  # a streamed download's body: download_blob
        budget = self._transfers if upload else self._requests
        timed_out = 0
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            if upload and body is not None and hasattr(body, "seek"):  # every attempt sends the file from its start
                body.seek(0)
            own = budget.seconds if upload else self.timeout
            limit = min(own, budget.left())
            if limit <= 0:
                raise self._fail(op, budget.passed())
            try:
                with budget.spending(), Deadline(limit, self._adapter.cut) as deadline:
                    resp = self._session.request(method, url, timeout=min(self.timeout, limit), verify=verify,
                                                 proxies=self._proxies(url), stream=True, allow_redirects=False,
                                                 **kwargs)
                    if not stream and method != "HEAD":  # a HEAD's Content-Length is the GET's (a layer's size)
                        read_body(resp, max_body)
                    if deadline.expired:  # what arrived before the cut (a status line) is not the answer
                        resp.close()
                        raise requests.ConnectionError("cut at the deadline")
            except BadBody as exc:
                raise self._fail(op, str(exc)) from None
            except requests.exceptions.SSLError:
                if deadline.reached:
                    raise self._fail(op, f"no complete answer within {limit:g} s") from None
                raise
            except (requests.ConnectionError, requests.Timeout,
                    requests.exceptions.ChunkedEncodingError) as exc:
                if deadline.reached and limit < own:
                    raise self._fail(op, budget.passed()) from None
                expired = deadline.reached or isinstance(exc, requests.Timeout)
                why = f"no complete answer within {limit:g} s" if deadline.reached \
                    else describe_connection_error(exc, self.timeout)
                timed_out += expired
                if last or timed_out > 1:
                    tries = f" (after {attempt + 1} attempts)" if attempt else ""
                    raise self._fail(op, why + tries) from None
                self._wait(budget, op, why, min(self.backoff * 2 ** attempt, self.max_wait), attempt,
                           say=expired)
                continue
            log.debug("registry %s: %s %s -> %s", self.host, method, urlsplit(url).path, resp.status_code)
            if resp.status_code in RETRY_STATUSES and not last:
                wait = self.backoff * 2 ** attempt
                hinted = retry_after(resp)
                if hinted is not None:
                    wait = max(wait, hinted)
                why = status_text(resp)
                resp.close()
                self._wait(budget, op, why, min(wait, self.max_wait), attempt)
                continue
            return resp
        raise AssertionError("unreachable")

    def _wait(self, budget: Budget, op: str, why: str, wait: float, attempt: int, say: bool = False) -> None:
        """Sleep before attempt + 2, within the budget; a long wait (or one after a time-out) says so on stderr."""
        if wait >= budget.left():
            raise self._fail(op, f"{why}; trying again would pass the overall deadline of {budget.seconds:g} s "
                                 f"for {budget.what}")
        if say or wait >= 2:
            say_waiting(f"registry {self.host}: {op}: {why}; trying again in {wait:.1f} s "
                        f"(attempt {attempt + 2} of at most {self.retries + 1})")
        log.info("registry %s: %s: %s; retrying in %.1f s", self.host, op, why, wait)
        with budget.spending():
            time.sleep(wait)

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
                reason = one_line(text.rsplit("certificate verify failed:", 1)[-1].strip(" ')\"(")) \
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
            raise self._fail(op, status_text(resp))
        resp.close()
        return scheme

    # ------------------------------------------------------------------ API

    def ping(self) -> None:
        """Reach the registry (decides http/https and learns how it authenticates)."""
        self._base()

    def head_manifest(self, repo: str, reference: str) -> ManifestInfo | None:
        """Digest, media type and size of a manifest; None when the registry does not have it."""
        check_repo(repo)
        check_reference(reference)
        op = f"head manifest {ref_text(repo, reference)}"
        with self._request("HEAD", f"/v2/{repo}/manifests/{reference}", op, f"repository:{repo}:pull",
                           headers={"Accept": ACCEPT_MANIFESTS}) as resp:
            if resp.status_code == 404:
                return None
            if resp.status_code != 200:
                raise self._fail(op, status_text(resp))
            digest = resp.headers.get("Docker-Content-Digest", "")
            media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
            size = resp.headers.get("Content-Length", "")
        if not DIGEST.fullmatch(digest) or not size.isdigit() or not int(size):  # GET checks what it gets
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
        check_repo(repo)
        check_reference(reference)
        op = f"get manifest {ref_text(repo, reference)}"
        with self._request("GET", f"/v2/{repo}/manifests/{reference}", op, f"repository:{repo}:pull",
                           headers={"Accept": ACCEPT_MANIFESTS}) as resp:
            if resp.status_code == 404 and missing_ok:
                return None
            if resp.status_code != 200:
                raise self._fail(op, status_text(resp))
            body = resp.content
            media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
            header_digest = resp.headers.get("Docker-Content-Digest", "")
        computed = sha256_digest(body)
        # what it was asked by, else what it came with: a manifest nothing vouches for (an answer cut
        # in its headers: an empty body) is not taken
        expected = reference if DIGEST.fullmatch(reference) else header_digest
        if not DIGEST.fullmatch(expected):
            raise self._fail(op, "the answer has no Docker-Content-Digest to check the manifest against "
                                 "(cut off?)")
        if not body or not matches(body, expected):
            against = "the digest asked for" if expected == reference else "its Docker-Content-Digest"
            raise self._fail(op, f"the manifest received ({len(body)} bytes) does not match {against} {expected}")
        if media_type not in MANIFEST_TYPES:
            try:
                declared = json.loads(body).get("mediaType")
            except (ValueError, AttributeError):
                declared = None
            if isinstance(declared, str) and declared:
                media_type = declared
        return body, media_type, computed

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        """Store a manifest under a tag (or its digest); returns its digest. With the manifest already in the
        repository this adds a tag without moving any blob: how a moving tag (`latest`) is pointed anew."""
        check_repo(repo)
        check_reference(reference)
        return self._put_manifest(repo, reference, body, media_type, f"put manifest {ref_text(repo, reference)}")[0]

    def _put_manifest(self, repo: str, reference: str, body: bytes, media_type: str, op: str,
                      header: str = "") -> tuple[str, str]:
        """PUT a manifest (reference checked by the caller): (its digest, recomputed; the answer's `header` or "")."""
        with self._request("PUT", f"/v2/{repo}/manifests/{reference}", op, f"repository:{repo}:pull,push",
                           data=body, headers={"Content-Type": media_type}) as resp:
            if resp.status_code != 201:
                raise self._fail(op, not_created(resp))
            digest = resp.headers.get("Docker-Content-Digest", "")
            answer = resp.headers.get(header, "") if header else ""
        if digest != (computed := sha256_digest(body)):
            raise self._fail(op, f"the registry acknowledged digest {digest or '(none)'}, not {computed}")
        return computed, answer

    def list_tags(self, repo: str, page_size: int = 100) -> list[str]:
        """Every tag of repo, following `Link: <...>; rel="next"` pages; [] for an unknown repository."""
        check_repo(repo)
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
                    raise self._fail(op, status_text(resp))
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


def client_for(registry: str, env: Mapping[str, str] | None = None, **kwargs: Any) -> RegistryClient:
    """A client for registry (host[:port] or docker.io) with the credentials `docker login` stored."""
    creds = lookup_credentials(registry_credential_key(registry), env)
    return RegistryClient(registry, credentials=creds, **{**deadlines_from(os.environ if env is None else env),
                                                          **kwargs})


__all__ = ["ACCEPT_MANIFESTS", "AuthError", "ManifestInfo", "RegistryClient", "RegistryError", "client_for",
           "is_docker_hub", "is_loopback", "parse_www_authenticate"]
