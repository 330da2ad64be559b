"""How the registry client authenticates (mixed into RegistryClient, whose state it uses): the
WWW-Authenticate challenge, Basic credentials, Bearer tokens from the realm (password or OAuth2
refresh-token grant), cached per scope, and the request that answers a 401 once."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests

from buildkit.core.errors import AuthError, RegistryError
from buildkit.oci.credentials import Credentials
from buildkit.oci.redirects import origin
from buildkit.oci.registryhttp import status_text

TOKEN_CLIENT_ID = "llama-buildkit"


def _origin(url: str) -> str:
    where = origin(url)
    return f"{where[0]}://{where[1]}:{where[2]}" if where else url


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


class RegistryAuth:
    """Auth for RegistryClient: needs its host, credentials, _basic, _bearer, _tokens, _base, _send,
    _fail and _may_send_secret."""

    # What RegistryClient sets and defines (declared for the type checker; no values here).
    host: str
    credentials: Credentials | None
    _basic: bool
    _bearer: Challenge | None
    _tokens: dict[str, tuple[str, float]]
    _base: Callable[[], str]
    _send: Callable[..., requests.Response]
    _fail: Callable[[str, str], RegistryError]
    _may_send_secret: Callable[[str], bool]

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
            resp = self._send("POST", realm, token_op, data=form, secret_body=True)
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
                raise self._fail(token_op, status_text(resp))
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
            if resp.status_code in (401, 403) and _origin(resp.url) != _origin(target):
                resp.close()  # a redirect's target asking for credentials: they stay with the registry
                raise self._fail(op, f"{resp.status_code} from {_origin(resp.url)}, where the registry redirected "
                                     "the request; credentials go only to the registry and its token service")
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
