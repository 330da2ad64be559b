"""A package index's project page read (pure): PEP 691 JSON or PEP 503 HTML, every field checked before
anything can be made of it (issue 48).

What a page says becomes a file name in the cache, a cache key, a URL buildkit opens and a hash the lock
records, so each is checked where the page is read, and a page that breaks a rule is refused whole in one
line (`IndexRefused`, never taken for an unreachable index, so no cached or other index's answer stands in):

* a sha256 (the file's, or its METADATA's) is 64 lowercase hex digits (`../../x` named a path before);
* a file name is a plain name: no `/` or `\\`, no control character, not `.` or `..`, no leading dot, at
  most 255 bytes; a `.whl` name must also be a wheel name (`packaging.utils.parse_wheel_filename`) of plain
  parts (a build tag `0/../../x` parsed as one before);
* a URL is http or https; `file:` only on a page that was itself read from a `file:` index the user
  configured, never on a page that came over the network (`file:///dev/zero` was copied until the disk
  was full);
* at most MAX_FILES entries (a page within its byte limit could list millions).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from buildkit.core.errors import CudaRootError
from buildkit.core.printable import printable

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
MAX_FILES = 100_000  # entries of one project page (NVIDIA's pages list a few hundred)
SHA256 = re.compile(r"[0-9a-f]{64}")
_PLAIN_NAME = re.compile(r"[^/\\\x00-\x1f\x7f]{1,255}")
# a wheel name's parts (PEP 427, with the version's + and ! and a build tag's letters)
_WHEEL_PARTS = re.compile(r"[A-Za-z0-9_.+!]+(?:-[A-Za-z0-9_.+!]+){4,5}\.whl")
REMOTE_SCHEMES = ("http", "https")


class IndexUnreachable(CudaRootError):
    """No answer from the package index (offline, refused, timed out, or an error status)."""


class IndexRefused(CudaRootError):
    """The package index answered something buildkit does not take (a hash, name or URL that breaks a rule)."""


@dataclass(frozen=True)
class IndexFile:
    """One file of a project as an index lists it (checked: see the module's docstring)."""

    filename: str
    url: str
    sha256: str  # "" when the index gives none
    size: int | None
    yanked: bool
    metadata: bool  # the index serves <url>.metadata (PEP 658/714)
    metadata_sha256: str = ""


def plain_name(name: str) -> bool:
    """A file name that names one file of the folder it is joined to, and prints as itself."""
    return (bool(_PLAIN_NAME.fullmatch(name)) and name not in (".", "..") and not name.startswith(".")
            and name.isprintable() and len(name.encode("utf-8", "surrogatepass")) <= 255)


def plain_wheel_name(name: str) -> bool:
    """A plain file name that is a wheel's name, each of its parts plain (no path in a build tag)."""
    if not (plain_name(name) and _WHEEL_PARTS.fullmatch(name)):
        return False
    try:
        parse_wheel_filename(name)
    except InvalidWheelFilename:
        return False
    return True


def url_allowed(url: str, local: bool) -> bool:
    """An http(s) URL, or a file: one where local (a page read from a file: index the user configured)."""
    scheme = urlsplit(url).scheme.lower()
    return scheme in REMOTE_SCHEMES or (local and scheme == "file")


def checked(f: IndexFile, page: str) -> IndexFile:
    """f when every field follows the rules (see the module's docstring); IndexRefused naming the page otherwise."""
    def refuse(what: str) -> IndexRefused:
        return IndexRefused(f"the package index page {printable(page)} lists {what}; buildkit refuses the page")

    if not plain_name(f.filename) or (f.filename.endswith(".whl") and not plain_wheel_name(f.filename)):
        raise refuse(f"a file named {printable(repr(f.filename))}, which is not a plain "
                     f"{'wheel ' if f.filename.endswith('.whl') else ''}file name")
    for what, value in (("sha256", f.sha256), ("METADATA sha256", f.metadata_sha256)):
        if value and not SHA256.fullmatch(value):
            raise refuse(f"{printable(f.filename)} with the {what} {printable(repr(value[:80]))}, "
                         "which is not 64 lowercase hex digits")
    if not url_allowed(f.url, local=urlsplit(page).scheme.lower() == "file"):
        raise refuse(f"{printable(f.filename)} at {printable(f.url[:200])}: only http(s) URLs are followed "
                     "(file: only on a page of a file: index configured here)")
    return f


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append(dict(attrs))


def _metadata_field(value: object) -> tuple[bool, str]:
    """A PEP 658/714 metadata field (JSON: bool or {"sha256": ..}; HTML: "true" or "sha256=..")."""
    if isinstance(value, Mapping):
        return True, str(value.get("sha256", ""))
    if isinstance(value, str):
        return value.lower() != "false", value.partition("=")[2] if value.startswith("sha256=") else ""
    return bool(value), ""


def _size(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def parse_page(body: bytes, content_type: str, page_url: str) -> list[IndexFile]:
    """The files of a PEP 691 JSON or PEP 503 HTML project page, URLs made absolute, each checked."""
    files: list[IndexFile] = []
    if content_type.split(";")[0].strip() == JSON_TYPE:
        try:
            doc = json.loads(body)
            entries = doc["files"]
        except (ValueError, KeyError, TypeError, RecursionError) as e:
            raise IndexUnreachable(f"{printable(page_url)} is not a PEP 691 project page "
                                   f"({type(e).__name__})") from None
        for f in entries if isinstance(entries, list) else []:
            if not isinstance(f, dict) or not isinstance(f.get("filename"), str) or not isinstance(f.get("url"), str):
                continue
            hashes = f.get("hashes")
            hashes = hashes if isinstance(hashes, dict) else {}
            has, meta_sha = _metadata_field(f.get("core-metadata", f.get("data-dist-info-metadata", False)))
            files.append(IndexFile(f["filename"], urljoin(page_url, f["url"]), str(hashes.get("sha256", "")),
                                   _size(f.get("size")), bool(f.get("yanked")), has, meta_sha))
            _count(files, page_url)
    else:
        parser = _Links()
        parser.feed(body.decode("utf-8", "replace"))
        for a in parser.links:
            href = a.get("href")
            if not href:
                continue
            url, fragment = urldefrag(urljoin(page_url, href))
            name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
            if not name:
                continue  # a link to a folder, not a file
            sha = fragment.partition("=")[2] if fragment.startswith("sha256=") else ""
            has, meta_sha = _metadata_field(a.get("data-core-metadata") or a.get("data-dist-info-metadata")
                                            or "false")
            files.append(IndexFile(name, url, sha, None, "data-yanked" in a, has, meta_sha))
            _count(files, page_url)
    return [checked(f, page_url) for f in files]


def _count(files: list[IndexFile], page_url: str) -> None:
    if len(files) > MAX_FILES:
        raise IndexRefused(f"the package index page {printable(page_url)} lists more than {MAX_FILES:,} files; "
                           "buildkit refuses the page")
