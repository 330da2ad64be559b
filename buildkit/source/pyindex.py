"""A small client of a Python package index: what files a project has, with their sha256, without pip.

Reads the index pip is configured with (PIP_INDEX_URL / PIP_EXTRA_INDEX_URL, else the index-url and
extra-index-url of pip's config files; PIP_CONFIG_FILE=os.devnull reads none; default PyPI), every one
of them, as pip does. A page is asked for as PEP 691 JSON (``Accept: application/vnd.pypi.simple.v1+json``)
and read as PEP 503 HTML when that is what comes back (the hash then sits in the link's fragment);
``file://`` indexes (a local mirror folder) are read from disk. PEP 658/714 ``core-metadata`` gives a
wheel's METADATA alone.

What a page says is checked before it is used (source/indexpage.py: hashes are 64 hex digits, file names
plain wheel names, URLs http(s), file: only from a file: index configured here) and again where a file is
opened or named (`_checked`); a file: URL is read as a regular file within its limit, never a FIFO or device.

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
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

import requests

from buildkit.core.boundedread import read_regular
from buildkit.core.deadline import Deadline, TrackingAdapter
from buildkit.core.errors import ConfigError, CudaRootError
from buildkit.core.printable import printable
from buildkit.core.urlcreds import split_credentials
from buildkit.core.wholefile import kind_of
from buildkit.source.indexpage import (JSON_TYPE, SHA256, IndexFile, IndexRefused, IndexUnreachable, checked,
                                       parse_page, plain_wheel_name, url_allowed)

PYPI = "https://pypi.org/simple"
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
PAGE_LIMIT = 32 << 20  # bytes of one project page
METADATA_LIMIT = 4 << 20
FILE_LIMIT = 8 << 30  # a wheel whose size the index does not give
PAGE_DEADLINE = 60.0  # seconds for a whole page or METADATA answer (LLAMA_BUILDKIT_INDEX_DEADLINE)
DEADLINE_ENV = "LLAMA_BUILDKIT_INDEX_DEADLINE"
PAGE_FRESH = 600.0  # seconds a cached page is used without asking again


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


__all__ = ["IndexFile", "IndexRefused", "IndexUnreachable", "PackageIndex", "file_sha256", "index_urls", "parse_page"]


class PackageIndex:
    """The configured indexes of one command, with a cache folder for their answers."""

    def __init__(self, cache: Path, urls: tuple[str, ...] | None = None, env: Mapping[str, str] | None = None) -> None:
        given = index_urls(env) if urls is None else urls
        split = [split_credentials(u) for u in given]  # credentials never reach a URL we record or print
        self.urls = tuple(u for u, _ in split)
        self._local = any(u.lower().startswith("file:") for u in self.urls)  # file: URLs may be opened
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
            kept = [checked(IndexFile(**f), str(record["url"])) for f in record["files"]]  # a cache is read back too
            if time.time() - float(record["time"]) < PAGE_FRESH:
                return kept
        except (OSError, ValueError, KeyError, TypeError, RecursionError, IndexRefused):
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
            return kept
        _save(cached, json.dumps({"url": url, "time": time.time(), "files": [f.__dict__ for f in files]}).encode())
        return files

    @staticmethod
    def _file_page(url: str) -> list[IndexFile]:
        """A project page of a file: index (a folder the user configured): its index.html, a regular file
        read within PAGE_LIMIT (a FIFO or device there is refused, not waited on)."""
        folder = Path(unquote(urlsplit(url).path))
        for candidate in (folder / "index.html", folder):
            if candidate.exists() and not candidate.is_dir():
                try:
                    return parse_page(read_regular(candidate, PAGE_LIMIT), "text/html", candidate.as_uri())
                except OSError as e:
                    raise IndexUnreachable(f"cannot read {printable(str(candidate))}: {e.strerror or e}") from None
        return []

    # ------------------------------------------------------------------ files

    def _checked(self, f: IndexFile, *, wheel: bool) -> IndexFile:
        """f again, where it comes from any caller (a page already checked it): its hashes are 64 hex digits,
        its name a plain wheel name when it becomes a file, its URL http(s) or, where a file: index is
        configured, file:."""
        bad = [what for what, value in (("sha256", f.sha256), ("METADATA sha256", f.metadata_sha256))
               if value and not SHA256.fullmatch(value)]
        if bad:
            why = f"its {bad[0]} is not 64 lowercase hex digits"
        elif wheel and not plain_wheel_name(f.filename):
            why = "its name is not a plain wheel file name"
        elif not url_allowed(f.url, self._local):
            why = "its URL is not http(s) (file: only where a file: index is configured)"
        else:
            return f
        raise IndexRefused(f"refusing {printable(f.filename)} from {printable(f.url[:200])}: {why}")

    def metadata(self, f: IndexFile) -> str | None:
        """The METADATA of a wheel the index serves it for (PEP 658), else None; cached by the wheel's sha256."""
        if not f.metadata:
            return None
        f = self._checked(f, wheel=False)
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
        f = self._checked(f, wheel=True)
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
                raise CudaRootError(f"{f.filename} from {printable(f.url)} has sha256 {digest}, "
                                    f"not the index's {f.sha256}")
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
            for block in _local_blocks(f.url, limit):
                h.update(block)
                out.write(block)
            return h.hexdigest()
        deadline = Deadline(self.deadline + limit / (1 << 20), self._adapter.cut)  # at least 1 MiB/s
        got = 0
        try:
            with deadline, self._session.get(f.url, stream=True, timeout=(15, self.deadline),
                                             auth=self._auth_for(f.url)) as resp:
                if resp.status_code != 200:
                    raise IndexUnreachable(f"{printable(f.url)} answered {resp.status_code}")
                for chunk in resp.iter_content(1 << 20):
                    got += len(chunk)
                    if got > limit:
                        raise CudaRootError(f"{printable(f.url)} sent more than the {limit} bytes the index gives "
                                            "for it")
                    h.update(chunk)
                    out.write(chunk)
            if deadline.reached:  # a cut answer: its bytes are not the file (the sha256 check would say so too)
                raise IndexUnreachable(f"cannot download {printable(f.url)} (no complete answer within its deadline)")
        except requests.RequestException as e:
            late = " (no complete answer within its deadline)" if deadline.reached else ""
            raise IndexUnreachable(f"cannot download {printable(f.url)}{late}: {type(e).__name__}") from None
        return h.hexdigest()

    def _read(self, url: str, limit: int) -> bytes:
        if url.startswith("file:"):
            return b"".join(_local_blocks(url, limit))
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


def _local_blocks(url: str, limit: int) -> Iterator[bytes]:
    """The bytes of a file: URL (of a file: index the user configured), a regular file of at most limit
    bytes, in blocks: a FIFO or device is refused at once (opened without blocking, its type checked on
    what was opened), a file over the limit is refused before its bytes and where it grows past it."""
    path = unquote(urlsplit(url).path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise IndexUnreachable(f"cannot read {printable(url)}: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as src:
        mode, size = os.fstat(fd).st_mode, os.fstat(fd).st_size
        if not stat.S_ISREG(mode):
            raise IndexRefused(f"{printable(url)} is {kind_of(mode)}, not a file; buildkit reads only regular files")
        if size > limit:
            raise IndexRefused(f"{printable(url)} is over the {limit} bytes the index gives for it")
        got = 0
        while block := src.read(1 << 20):
            got += len(block)
            if got > limit:
                raise IndexRefused(f"{printable(url)} is over the {limit} bytes the index gives for it")
            yield block


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
