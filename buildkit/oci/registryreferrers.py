"""The referrers API of the registry client (mixed into RegistryClient, whose requests it makes; the spec's
rules are oci/referrers.py): whether the registry offers `GET /v2/<name>/referrers/<digest>` and what it
lists there (its pages followed), and a manifest pushed by digest with whether the registry acknowledged its
subject (the `OCI-Subject` header)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urljoin, urlsplit

import requests

from buildkit.core.errors import RegistryError
from buildkit.oci.referrers import MAX_LISTED, OCI_INDEX, SUBJECT_HEADER, Referrer, listed
from buildkit.oci.registryhttp import check_reference, check_repo, sha256_digest, status_text

MAX_PAGES = 20
# what a registry without the API answers its path with: 404 (distribution 2.8, as the spec expects), or, from
# registries that route it nowhere, 400 (an unknown digest route), 405 or 501
NO_API = frozenset({400, 404, 405, 501})


class ReferrersAPI:
    """Referrers for RegistryClient: needs its _request and _fail."""

    host: str
    _request: Callable[..., requests.Response]
    _fail: Callable[[str, str], RegistryError]
    _put_manifest: Callable[..., tuple[str, str]]

    def referrers_api(self, repo: str, digest: str) -> list[Referrer] | None:
        """What the referrers API lists for digest; None when the registry does not offer the API."""
        check_repo(repo)
        check_reference(digest)
        op = f"list referrers of {repo}@{digest}"
        found: list[Referrer] = []
        url: str | None = None
        seen: set[str] = set()
        for page in range(MAX_PAGES):
            with self._request("GET", f"/v2/{repo}/referrers/{digest}", op, f"repository:{repo}:pull", url=url,
                               headers={"Accept": OCI_INDEX}) as resp:
                if resp.status_code in NO_API and page == 0:
                    return None
                if resp.status_code != 200:
                    raise self._fail(op, status_text(resp))
                media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
                if media_type != OCI_INDEX:
                    return None  # a 200 that is not the API's answer (a catch-all page): no API
                found += listed(resp.content, f"registry {self.host}: the referrers of {repo}@{digest[:19]}")
                nxt = resp.links.get("next", {}).get("url")
                base = resp.url
            if not nxt or len(found) >= MAX_LISTED:
                return found[:MAX_LISTED]
            url = urljoin(base, nxt)
            if urlsplit(url).netloc != urlsplit(base).netloc or url in seen:
                raise self._fail(op, f"the next-page link {nxt!r} leaves the registry or loops")
            seen.add(url)
        raise self._fail(op, f"more than {MAX_PAGES} pages of referrers")

    def put_referrer(self, repo: str, body: bytes, media_type: str, subject: str) -> tuple[str, bool]:
        """Push a manifest whose subject is subject by its digest: (its digest, whether the registry said it
        processed the subject: `OCI-Subject: <subject>`)."""
        check_repo(repo)
        digest = sha256_digest(body)
        _, answer = self._put_manifest(repo, digest, body, media_type, f"put referrer {repo}@{digest}", SUBJECT_HEADER)
        return digest, answer == subject
