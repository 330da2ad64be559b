"""Where a registry request may follow a redirect, and what goes with it (pure): credentials and tokens
stay with the origin they were meant for.

requests follows redirects by itself, and on a 307 or 308 it sends a POST's body again wherever the
Location points: the refresh token of an OAuth2 grant went to any host a token service named, also from
https to plain http. So the registry client asks for no redirect to be followed (allow_redirects=False)
and follows them here, one hop at a time:

* to the same origin (scheme, host and port): as asked, credentials and all;
* to another origin: without credentials (no Authorization header, no Basic auth); a request whose body
  holds a secret (a token grant's form: a refresh token or a password) is not followed there at all;
* from https to plain http: never, unless the new host is loopback (the client's rule for any secret);
* 301 and 302 of a POST, and 303 of anything but a HEAD, become a GET without a body; 307 and 308 keep
  the method and the body;
* at most MAX_REDIRECTS hops, and only to an http or https URL.

A request that reached another origin carries no credentials from then on, also if a later hop comes
back. (A registry's blob GET redirected to its storage is the legitimate case: it is followed, bare.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from buildkit.oci.registryhttp import is_loopback

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) URL, the port spelt out; None for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


@dataclass(frozen=True)
class Hop:
    """The next request of a followed redirect."""
    method: str
    url: str
    same_origin: bool  # as the request that was redirected: its credentials may go along
    keep_body: bool

    def carry(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The request's keyword arguments for this hop: the query is in the new URL; credentials only to
        the same origin; the body only where the method keeps it."""
        out = {k: v for k, v in kwargs.items() if k != "params"}
        if not self.same_origin:
            out.pop("auth", None)
            out["headers"] = {k: v for k, v in (out.get("headers") or {}).items() if k.lower() != "authorization"}
        if not self.keep_body:
            out.pop("data", None)
            out.pop("json", None)
        return out


def next_hop(method: str, url: str, location: str, status: int, *, secret_body: bool, hops: int) -> Hop | str:
    """Where the redirect `status` to `location` of `method url` takes the request, or why it is not
    followed (a line for the error message). hops: how many were followed already."""
    if hops >= MAX_REDIRECTS:
        return f"more than {MAX_REDIRECTS} redirects"
    target = urljoin(url, location.strip())
    new, old = origin(target), origin(url)
    shown = f"{new[0]}://{new[1]}:{new[2]}" if new else repr(location[:200])
    if new is None or old is None:
        return f"a redirect to {shown}, which is not an http or https URL"
    if old[0] == "https" and new[0] == "http" and not is_loopback(new[1]):
        return f"a redirect from https to plain http ({shown}); refusing to follow it"
    same = new == old
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        method, keep_body = "GET", False
    else:
        keep_body = True
    if not same and keep_body and secret_body:
        return (f"a redirect ({status}) to another origin, {shown}, with the request's credentials in its body; "
                "they go only to the registry and the token service it names, so it is not followed")
    return Hop(method=method, url=target, same_origin=same, keep_body=keep_body)
