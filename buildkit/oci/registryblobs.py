"""Blob transfers of the registry client (mixed into RegistryClient, whose requests it makes): a small
blob read whole, a large one streamed to a file, an existence check, and a monolithic upload, each
checked against its digest. Blob bytes count against the client's transfer deadline (_transfers)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any
from urllib.parse import urljoin, urlsplit

import requests

from buildkit.core.deadline import Budget, Deadline, TrackingAdapter
from buildkit.core.errors import RegistryError
from buildkit.oci.digest import MAX_DOCUMENT, Digest
from buildkit.oci.registryhttp import (BadBody, check_reference, check_repo, describe_connection_error, iter_body,
                                       matches, not_created, sha256_digest, status_text)


class BlobTransfers:
    """Blobs for RegistryClient: needs its _request, _fail, _base, _adapter, timeout and _transfers."""

    # What RegistryClient sets and defines (declared for the type checker; no values here).
    timeout: float
    _adapter: TrackingAdapter
    _transfers: Budget
    _request: Callable[..., requests.Response]
    _fail: Callable[[str, str], RegistryError]
    _base: Callable[[], str]

    def get_blob(self, repo: str, digest: str, max_bytes: int = MAX_DOCUMENT) -> bytes:
        """A small blob (an image config) read within max_bytes (its declared size), checked against its digest."""
        check_repo(repo)
        check_reference(digest)
        op = f"get blob {repo}@{digest}"
        with self._request("GET", f"/v2/{repo}/blobs/{digest}", op, f"repository:{repo}:pull",
                           max_body=max(max_bytes, 0)) as resp:
            if resp.status_code != 200:
                raise self._fail(op, status_text(resp))
            body = resp.content
        if not matches(body, digest):
            raise self._fail(op, f"the blob received has digest {sha256_digest(body)}")
        return body

    def blob_exists(self, repo: str, digest: str) -> bool:
        """Whether the repository has the blob (HEAD /v2/<repo>/blobs/<digest>): only a 200 that names
        the digest counts, so an answer cut in its headers means "upload it", never "it is there"."""
        check_repo(repo)
        check_reference(digest)
        op = f"head blob {repo}@{digest}"
        with self._request("HEAD", f"/v2/{repo}/blobs/{digest}", op, f"repository:{repo}:pull") as resp:
            if resp.status_code == 404:
                return False
            if resp.status_code != 200:
                raise self._fail(op, status_text(resp))
            return resp.headers.get("Docker-Content-Digest") == digest

    def download_blob(self, repo: str, digest: str, dest: Path, size: int) -> None:
        """Stream a blob into dest (written atomically): never more than its declared size (one byte over
        ends the transfer), then checked against its digest."""
        check_repo(repo)
        check_reference(digest)
        op = f"get blob {repo}@{digest}"
        parsed = Digest.parse(digest, op, RegistryError)
        tmp = dest.with_name(dest.name + ".part")
        with self._request("GET", f"/v2/{repo}/blobs/{digest}", op, f"repository:{repo}:pull", stream=True) as resp:
            if resp.status_code != 200:
                raise self._fail(op, status_text(resp))
            h = parsed.hasher()
            left = self._transfers.left()
            if left <= 0:
                raise self._fail(op, self._transfers.passed())
            try:
                with self._transfers.spending(), Deadline(left, self._adapter.cut) as deadline, \
                        open(tmp, "wb") as fh:
                    for chunk in iter_body(resp, size, 1 << 20):
                        h.update(chunk)
                        fh.write(chunk)
                if deadline.expired:
                    raise requests.exceptions.ChunkedEncodingError("cut at the deadline")
            except BadBody as exc:
                tmp.unlink(missing_ok=True)
                raise self._fail(op, f"{exc} (its declared size)") from None
            except requests.RequestException as exc:
                tmp.unlink(missing_ok=True)
                why = self._transfers.passed() if deadline.expired else describe_connection_error(exc, self.timeout)
                raise self._fail(op, why) from None
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
        got = f"{parsed.algorithm}:{h.hexdigest()}"
        if got != digest:
            tmp.unlink(missing_ok=True)
            raise self._fail(op, f"the blob received has digest {got}")
        os.replace(tmp, dest)

    def upload_blob(self, repo: str, digest: str, data: Any, size: int) -> None:
        """Upload one blob: POST a session, then PUT the bytes monolithically with ?digest=.

        data is bytes or a binary file positioned at the start (it must be seekable for a retry)."""
        check_repo(repo)
        check_reference(digest)
        op = f"upload blob {repo}@{digest[:19]}"
        scope = f"repository:{repo}:pull,push"
        with self._request("POST", f"/v2/{repo}/blobs/uploads/", op, scope,
                           headers={"Content-Length": "0"}) as resp:
            if resp.status_code == 201 and resp.headers.get("Docker-Content-Digest") == digest:
                return  # the registry already had it (and names it)
            if resp.status_code != 202 or not resp.headers.get("Location"):
                raise self._fail(op, status_text(resp))
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
            if resp.status_code != 201:
                raise self._fail(op, not_created(resp))
            stored = resp.headers.get("Docker-Content-Digest", "")
        if stored != digest:
            raise self._fail(op, f"the registry acknowledged digest {stored or '(none)'}, not {digest}")


class _SizedReader:
    """A file of known size for requests (sent with Content-Length, not chunked); rewound on a retry."""

    def __init__(self, fh: IO[bytes], size: int) -> None:
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
