"""The pieces of a registry request that are not the client's state (pure, but for reading certs.d):
which hosts are loopback and where their TLS files live, the deadlines the registry variables
variables set, the checks of repository names, references and digests, an answer's body read within
a limit, and the one-line texts of a failed answer or connection."""

from __future__ import annotations

import email.utils
import hashlib
import ipaddress
import math
import os
import time
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path

import requests
import urllib3

from buildkit.core.errors import ConfigError, RegistryError
from buildkit.core.printable import printable
from buildkit.oci.imageref import DIGEST, REPOSITORY, TAG

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
CERTS_D_ENV = "LLAMA_BUILDKIT_DOCKER_CERTS_D"
DEFAULT_CERTS_D = "/etc/docker/certs.d"
# Deadlines, in seconds: of each request (connect, headers, body); of all of one command's requests
# together but blob bytes (retries and their waits included); of all of its blob bytes together
TIMEOUT, DEADLINE, TRANSFER_DEADLINE = 30.0, 600.0, 3600.0
MAX_SECONDS = 1e6  # 11 days: more is a typo, and 1e308 is more than a socket's time-out can hold
TIMEOUT_ENV = "LLAMA_BUILDKIT_REGISTRY_TIMEOUT"
DEADLINE_ENV = "LLAMA_BUILDKIT_REGISTRY_DEADLINE"
TRANSFER_DEADLINE_ENV = "LLAMA_BUILDKIT_REGISTRY_TRANSFER_DEADLINE"


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


def ca_for(host: str) -> str | bool:
    """requests' `verify` for host: its certs.d CA when there is one, else the system's CAs."""
    ca = certs_dir(host) / "ca.crt"
    return str(ca) if ca.is_file() else True


def deadlines_from(env: Mapping[str, str]) -> dict[str, float]:
    """The RegistryClient deadlines that TIMEOUT_ENV, DEADLINE_ENV and TRANSFER_DEADLINE_ENV set (an unset
    one is left out)."""
    out = {}
    for argument, name in (("timeout", TIMEOUT_ENV), ("deadline", DEADLINE_ENV),
                           ("transfer_timeout", TRANSFER_DEADLINE_ENV)):
        text = env.get(name, "").strip()
        if not text:
            continue
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not 0 < value <= MAX_SECONDS:  # 1e308 would overflow a socket's time-out (issue 39)
            raise ConfigError(f"{name} must be a number of seconds above 0 and at most {MAX_SECONDS:g}, got {text!r}")
        out[argument] = value
    return out


def one_line(text: str, limit: int = 200) -> str:
    """A registry's text (an error body's message, a header) as one printable line (core/printable.py)."""
    text = " ".join(printable(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def error_detail(resp: requests.Response) -> str:
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
    return one_line("; ".join(p for p in parts if p))


def status_text(resp: requests.Response) -> str:
    text = f"{resp.status_code}"
    if resp.reason:  # the server's own words: no control sequence of it reaches the terminal
        text += f" {one_line(resp.reason, 100)}"
    detail = error_detail(resp)
    return f"{text} ({detail})" if detail else text


def not_created(resp: requests.Response) -> str:
    """The text of an answer to a PUT other than its documented 201 Created."""
    return status_text(resp) + ("" if resp.status_code >= 300 else ", not 201 Created")


def describe_connection_error(exc: Exception, timeout: float) -> str:
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


def retry_after(resp: requests.Response) -> float | None:
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


def check_repo(repo: str) -> None:
    if not isinstance(repo, str) or not REPOSITORY.fullmatch(repo):
        raise RegistryError(f"invalid repository name {repo!r}")


def check_reference(reference: str) -> None:
    if not isinstance(reference, str) or not (TAG.fullmatch(reference) or DIGEST.fullmatch(reference)):
        raise RegistryError(f"invalid tag or digest {reference!r}")


def ref_text(repo: str, reference: str) -> str:
    return f"{repo}@{reference}" if ":" in reference else f"{repo}:{reference}"


def sha256_digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def matches(body: bytes, digest: str) -> bool:
    """body has digest (sha256:... or sha512:..., DIGEST's algorithms)."""
    algorithm, _, hexdigest = digest.partition(":")
    return algorithm in ("sha256", "sha512") and hashlib.new(algorithm, body).hexdigest() == hexdigest


class BadBody(Exception):
    """An answer's body over its limit, or in an encoding that cannot be decoded within it (its text: one line)."""


def iter_body(resp: requests.Response, limit: int, chunk: int = 1 << 16) -> Iterator[bytes]:
    """The body of an answer as it arrives, never more than limit bytes (one byte over is BadBody), read as
    raw bytes: a gzip or deflate Content-Encoding is decoded here, never beyond limit + 1 bytes of output
    and from at most limit + 1 bytes of input (requests would decode a bomb whole), any other is refused.
    A connection broken or cut while reading is requests' ChunkedEncodingError or ConnectionError."""
    encoding = resp.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
        raise BadBody(f"the answer's Content-Encoding {one_line(encoding, 40)!r} is not one buildkit reads")
    declared = resp.headers.get("Content-Length", "").strip()
    if declared.isdigit() and int(declared) > limit:
        raise BadBody(f"the answer declares {int(declared)} bytes, over the limit of {limit} bytes")
    decoder = zlib.decompressobj(47) if encoding not in ("", "identity") else None  # gzip or zlib, by header
    raw = given = 0
    try:
        for data in resp.raw.stream(chunk, decode_content=False):
            raw += len(data)
            if decoder is not None:
                data = decoder.decompress(data, limit + 1 - given)
                if decoder.unconsumed_tail:
                    raw = limit + 1
            given += len(data)
            if raw > limit or given > limit:
                raise BadBody(f"the answer is larger than the limit of {limit} bytes")
            if data:
                yield data
    except zlib.error:
        raise BadBody(f"the answer's {encoding} encoding is broken") from None
    except urllib3.exceptions.ProtocolError as exc:
        raise requests.exceptions.ChunkedEncodingError(exc) from None
    except urllib3.exceptions.SSLError as exc:
        raise requests.exceptions.SSLError(exc) from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise requests.ConnectionError(exc) from None


def read_body(resp: requests.Response, limit: int) -> bytes:
    """The whole body (iter_body), kept as the answer's content (resp.content, resp.json() read it)."""
    try:
        body = b"".join(iter_body(resp, limit))
    except BaseException:
        resp.close()  # the rest is never read: the connection goes
        raise
    resp._content = body  # what requests does when it reads the body itself
    resp._content_consumed = True  # type: ignore[attr-defined]  # (typeshed leaves it out)
    return body
