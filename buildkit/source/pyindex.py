"""A small client of a Python package index: what files a project has, with their sha256, without pip.

Reads the index pip is configured with (PIP_INDEX_URL / PIP_EXTRA_INDEX_URL, else the index-url and
extra-index-url of pip's config files; PIP_CONFIG_FILE=os.devnull reads none; default PyPI), every one
of them, as pip does. A page is asked for as PEP 691 JSON (``Accept: application/vnd.pypi.simple.v1+json``)
and read as PEP 503 HTML when that is what comes back (the hash then sits in the link's fragment);
``file://`` indexes (a local mirror folder) are read from disk. PEP 658/714 ``core-metadata`` gives a
wheel's METADATA alone.

Each request has a deadline for the whole answer (core/deadline.py; a page's is LLAMA_BUILDKIT_INDEX_DEADLINE,
default 60 s, a file's that plus a second per MiB) and a bound on its size; a file is
written whole (temporary file, then rename) and only when its sha256 is the one the index names.
Answers are cached under ``<cache>/pyindex``: a project page for PAGE_FRESH seconds (and as the last
known answer when the index cannot be reached), METADATA by the wheel's sha256 for good.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

import requests

from buildkit.core.deadline import Deadline, TrackingAdapter
from buildkit.core.errors import ConfigError, CudaRootError
from buildkit.core.urlcreds import split_credentials

PYPI = "https://pypi.org/simple"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
PAGE_LIMIT = 32 << 20  # bytes of one project page
METADATA_LIMIT = 4 << 20
FILE_LIMIT = 8 << 30  # a wheel whose size the index does not give
PAGE_DEADLINE = 60.0  # seconds for a whole page or METADATA answer (LLAMA_BUILDKIT_INDEX_DEADLINE)
DEADLINE_ENV = "LLAMA_BUILDKIT_INDEX_DEADLINE"
PAGE_FRESH = 600.0  # seconds a cached page is used without asking again


class IndexUnreachable(CudaRootError):
    """No answer from the package index (offline, refused, timed out, or an error status)."""


@dataclass(frozen=True)
class IndexFile:
    """One file of a project as an index lists it."""

    filename: str
    url: str
    sha256: str  # "" when the index gives none
    size: int | None
    yanked: bool
    metadata: bool  # the index serves <url>.metadata (PEP 658/714)
    metadata_sha256: str = ""


def index_urls(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """pip's index and extra indexes: the environment first, then pip's config files, then PyPI."""
    env = os.environ if env is None else env
    conf = _pip_config(env)
    if env.get("PIP_NO_INDEX", "").lower() in ("1", "true", "yes", "on") or conf.get("no-index", "").lower() in (
            "1", "true", "yes", "on"):
        return ()
    main = env.get("PIP_INDEX_URL") or conf.get("index-url") or PYPI
    extra = env.get("PIP_EXTRA_INDEX_URL") or conf.get("extra-index-url") or ""
    urls = [main, *extra.split()]
    return tuple(dict.fromkeys(u.rstrip("/") for u in urls if u))


_KEYS = ("index-url", "extra-index-url", "no-index", "cert")


def _pip_config(env: Mapping[str, str]) -> dict[str, str]:
    """_KEYS of pip's config files ([global], then [download]); later files win."""
    given = env.get("PIP_CONFIG_FILE")
    if given == os.devnull:
        return {}
    home = Path(env.get("HOME") or Path.home())
    dirs = (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
    files = [Path(d) / "pip" / "pip.conf" for d in reversed(dirs) if d] + [Path("/etc/pip.conf")]
    files += [home / ".pip" / "pip.conf", Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf"]
    files += [Path(given)] if given else []
    out: dict[str, str] = {}
    for path in files:
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue
        for section in ("global", "download"):
            if parser.has_section(section):
                out.update({k: v for k, v in parser.items(section) if k in _KEYS})
    return out


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append(dict(attrs))


def _metadata_field(value: object) -> tuple[bool, str]:
    """A PEP 658/714 metadata field (JSON: bool or {"sha256": ..}; HTML: "true" or "sha256=..")."""
    if isinstance(value, dict):
        return True, str(value.get("sha256", ""))
    if isinstance(value, str):
        return value.lower() != "false", value.partition("=")[2] if value.startswith("sha256=") else ""
    return bool(value), ""


def parse_page(body: bytes, content_type: str, page_url: str) -> list[IndexFile]:
    """The files of a PEP 691 JSON or PEP 503 HTML project page, URLs made absolute."""
    files: list[IndexFile] = []
    if content_type.split(";")[0].strip() == JSON_TYPE:
        try:
            doc = json.loads(body)
            entries = doc["files"]
        except (ValueError, KeyError, TypeError) as e:
            raise IndexUnreachable(f"{page_url} is not a PEP 691 project page ({e})") from None
        for f in entries if isinstance(entries, list) else []:
            if not isinstance(f, dict) or not isinstance(f.get("filename"), str) or not isinstance(f.get("url"), str):
                continue
            hashes = f.get("hashes")
            hashes = hashes if isinstance(hashes, dict) else {}
            meta = f.get("core-metadata", f.get("data-dist-info-metadata", False))
            has, meta_sha = _metadata_field(meta)
            size = f.get("size")
            files.append(IndexFile(f["filename"], urljoin(page_url, f["url"]), str(hashes.get("sha256", "")),
                                   size if isinstance(size, int) else None, bool(f.get("yanked")), has, meta_sha))
        return files
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    for a in parser.links:
        href = a.get("href")
        if not href:
            continue
        url, fragment = urldefrag(urljoin(page_url, href))
        name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
        sha = fragment.partition("=")[2] if fragment.startswith("sha256=") else ""
        has, meta_sha = _metadata_field(a.get("data-core-metadata") or a.get("data-dist-info-metadata") or "false")
        files.append(IndexFile(name, url, sha, None, "data-yanked" in a, has, meta_sha))
    return files


class PackageIndex:
    """The configured indexes of one command, with a cache folder for their answers."""

    def __init__(self, cache: Path, urls: tuple[str, ...] | None = None, env: Mapping[str, str] | None = None) -> None:
        given = index_urls(env) if urls is None else urls
        split = [split_credentials(u) for u in given]  # credentials never reach a URL we record or print
        self.urls = tuple(u for u, _ in split)
        self._auth = {a.scope: (a.username, a.secret) for _, a in split if a is not None}
        self.cache = Path(cache) / "pyindex"
        self.notes: list[str] = []  # lines for the user: a stale page used because an index could not be reached
        self.deadline = _deadline((os.environ if env is None else env).get(DEADLINE_ENV, ""))
        self._adapter = TrackingAdapter()
        self._session = requests.Session()
        self._session.mount("http://", self._adapter)
        self._session.mount("https://", self._adapter)
        cert = (os.environ.get("PIP_CERT") or _pip_config(os.environ).get("cert"))
        if cert and not os.environ.get("REQUESTS_CA_BUNDLE"):
            self._session.verify = cert

    def _auth_for(self, url: str) -> tuple[str, str] | None:
        """The credentials pip's index URL carried, for that index's own scheme://host[:port] only."""
        parts = urlsplit(url)
        return self._auth.get(f"{parts.scheme.lower()}://{parts.netloc}")

    def describe(self) -> str:
        return ", ".join(self.urls) or "no index (pip's no-index is set)"

    # ------------------------------------------------------------------ pages

    def files(self, project: str) -> list[IndexFile]:
        """Every file of `project` on the configured indexes (the first index's entry of a name wins).
        IndexUnreachable when no index answered and no earlier answer is cached; a project that no
        index has is an empty list."""
        seen: dict[str, IndexFile] = {}
        failures: list[str] = []
        for base in self.urls:
            try:
                got = self._page(base, project)
            except IndexUnreachable as e:
                failures.append(str(e))
                continue
            for f in got:
                seen.setdefault(f.filename, f)
        if failures and len(failures) == len(self.urls):
            raise IndexUnreachable("; ".join(failures))
        return list(seen.values())

    def _page(self, base: str, project: str) -> list[IndexFile]:
        url = f"{base}/{project}/"
        key = hashlib.sha256(url.encode()).hexdigest()[:32]
        cached = self.cache / "pages" / f"{key}.json"
        try:
            record = json.loads(cached.read_text())
            if time.time() - float(record["time"]) < PAGE_FRESH:
                return [IndexFile(**f) for f in record["files"]]
        except (OSError, ValueError, KeyError, TypeError):
            record = None
        try:
            if url.startswith("file:"):
                files = self._file_page(url)
            else:
                body, ctype, final = self._get(url, PAGE_LIMIT, accept=ACCEPT, missing_ok=True)
                files = [] if body is None else parse_page(body, ctype, final)
        except IndexUnreachable as e:
            if record is None:
                raise
            when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(record["time"]))
            self.notes.append(f"{e}; used its answer of {when}")
            return [IndexFile(**f) for f in record["files"]]
        _save(cached, json.dumps({"url": url, "time": time.time(), "files": [f.__dict__ for f in files]}).encode())
        return files

    @staticmethod
    def _file_page(url: str) -> list[IndexFile]:
        folder = Path(unquote(urlsplit(url).path))
        for candidate in (folder / "index.html", folder):
            if candidate.is_file():
                try:
                    return parse_page(candidate.read_bytes()[:PAGE_LIMIT], "text/html", candidate.as_uri())
                except OSError as e:
                    raise IndexUnreachable(f"cannot read {candidate}: {e.strerror or e}") from None
        return []

    # ------------------------------------------------------------------ files

    def metadata(self, f: IndexFile) -> str | None:
        """The METADATA of a wheel the index serves it for (PEP 658), else None; cached by the wheel's sha256."""
        if not f.metadata:
            return None
        cached = self.cache / "metadata" / f"{f.sha256 or hashlib.sha256(f.url.encode()).hexdigest()}.METADATA"
        if cached.is_file():
            return cached.read_text("utf-8", "replace")
        body = self._read(f.url + ".metadata", METADATA_LIMIT)
        if f.metadata_sha256 and hashlib.sha256(body).hexdigest() != f.metadata_sha256:
            raise CudaRootError(f"the METADATA of {f.filename} from the package index does not match its sha256")
        _save(cached, body)
        return body.decode("utf-8", "replace")

    def download(self, f: IndexFile, dest_dir: Path) -> Path:
        """dest_dir/<filename>, downloaded unless it is there with the index's sha256; checked before use."""
        if not f.sha256:
            raise CudaRootError(f"the package index gives no sha256 for {f.filename}: refusing a file it cannot check")
        dest = Path(dest_dir) / f.filename
        if dest.is_file() and file_sha256(dest) == f.sha256:
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{f.filename}.", dir=dest.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                digest = self._stream(f, out)
            if digest != f.sha256:
                raise CudaRootError(f"{f.filename} from {f.url} has sha256 {digest}, not the index's {f.sha256}")
            os.chmod(tmp, 0o644)
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return dest

    def _stream(self, f: IndexFile, out: BinaryIO) -> str:
        h = hashlib.sha256()
        limit = f.size if f.size is not None else FILE_LIMIT
        if f.url.startswith("file:"):
            try:
                with open(unquote(urlsplit(f.url).path), "rb") as src:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        h.update(block)
                        out.write(block)
            except OSError as e:
                raise IndexUnreachable(f"cannot read {f.url}: {e.strerror or e}") from None
            return h.hexdigest()
        deadline = Deadline(self.deadline + limit / (1 << 20), self._adapter.cut)  # at least 1 MiB/s
        got = 0
        try:
            with deadline, self._session.get(f.url, stream=True, timeout=(15, self.deadline),
                                             auth=self._auth_for(f.url)) as resp:
                if resp.status_code != 200:
                    raise IndexUnreachable(f"{f.url} answered {resp.status_code}")
                for chunk in resp.iter_content(1 << 20):
                    got += len(chunk)
                    if got > limit:
                        raise CudaRootError(f"{f.url} sent more than the {limit} bytes the index gives for it")
                    h.update(chunk)
                    out.write(chunk)
            if deadline.reached:  # a cut answer: its bytes are not the file (the sha256 check would say so too)
                raise IndexUnreachable(f"cannot download {f.url} (no complete answer within its deadline)")
        except requests.RequestException as e:
            late = " (no complete answer within its deadline)" if deadline.reached else ""
            raise IndexUnreachable(f"cannot download {f.url}{late}: {type(e).__name__}") from None
        return h.hexdigest()

    def _read(self, url: str, limit: int) -> bytes:
        if url.startswith("file:"):
            try:
                return Path(unquote(urlsplit(url).path)).read_bytes()[:limit]
            except OSError as e:
                raise IndexUnreachable(f"cannot read {url}: {e.strerror or e}") from None
        body, _, _ = self._get(url, limit)
        assert body is not None
        return body

    def _get(self, url: str, limit: int, *, accept: str = "*/*",
             missing_ok: bool = False) -> tuple[bytes | None, str, str]:
        """(body, content type, final URL) of one GET within self.deadline and `limit` bytes."""
        deadline = Deadline(self.deadline, self._adapter.cut)
        try:
            with deadline, self._session.get(url, headers={"Accept": accept}, stream=True, auth=self._auth_for(url),
                                             timeout=(min(15.0, self.deadline), self.deadline)) as resp:
                if resp.status_code == 404 and missing_ok:
                    return None, "", url
                if resp.status_code != 200:
                    raise IndexUnreachable(f"{url} answered {resp.status_code} {resp.reason}")
                chunks, got = [], 0
                for chunk in resp.iter_content(1 << 16):
                    got += len(chunk)
                    if got > limit:
                        raise IndexUnreachable(f"{url} sent more than {limit} bytes")
                    chunks.append(chunk)
            if deadline.reached:  # what arrived before the cut is never the answer
                raise IndexUnreachable(f"cannot reach {url} (no complete answer within its deadline)")
            return b"".join(chunks), resp.headers.get("Content-Type", ""), resp.url
        except requests.RequestException as e:
            late = " (no complete answer within its deadline)" if deadline.reached else ""
            raise IndexUnreachable(f"cannot reach {url}{late}: {type(e).__name__}") from None


def _deadline(text: str) -> float:
    if not text.strip():
        return PAGE_DEADLINE
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ConfigError(f"{DEADLINE_ENV} must be a number of seconds above 0, got {text!r}")
    return value


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _save(path: Path, data: bytes) -> None:
    """Write a cache file whole (temporary file beside it, then rename); a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except OSError:
        pass
