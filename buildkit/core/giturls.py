"""Git repository URLs as git reads them (pure): which name a folder on this machine, their `git+` form in a
provenance or an SBOM (SPDX's VCS locator: `git+file:///abs/path@commit` for a local fork, issue 47 item 5), and
which a machine elsewhere (a CI runner) cannot reach.

git's own rules: `scheme://...` is a URL (`file://` a local one); `[user@]host:path` with no slash before the
first colon is scp-like ssh; anything else is a path on this machine.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from buildkit.core.urlcreds import clean_url

LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


def _scp_like(url: str) -> bool:
    head, colon, _ = url.partition(":")
    return "://" not in url and bool(colon) and "/" not in head and len(head) > 1  # (one letter: a drive)


def local_path(url: str, cwd: Path | None = None) -> Path | None:
    """The folder a git URL names on this machine (file:// or a path, made absolute against cwd), else None."""
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme.lower() != "file":
            return None
        return Path(unquote(parts.path))
    if _scp_like(url):
        return None
    return Path(os.path.abspath(Path(cwd or Path.cwd()) / Path(url).expanduser()))


def loopback_host(url: str) -> str | None:
    """The host of a network URL when it is this machine's loopback (127.0.0.0/8, ::1, localhost), else None."""
    if "://" in url:
        host = urlsplit(url).hostname or ""
    elif _scp_like(url):
        host = url.partition(":")[0].rpartition("@")[2]
    else:
        return None
    if host.lower() in LOOPBACK_NAMES:
        return host
    try:
        return host if ipaddress.ip_address(host.strip("[]")).is_loopback else None
    except ValueError:
        return None


def file_url(path: Path) -> str:
    """file:///abs/path, percent-encoded where a URL needs it."""
    return "file://" + quote(str(Path(os.path.abspath(path))))


def vcs_uri(url: str, commit: str, cwd: Path | None = None) -> str:
    """git+URL@commit (SPDX's VCS locator, SLSA's resolvedDependencies uri): a local fork as
    git+file:///abs/path@commit, scp-like host:path as git+ssh://host/path, without credentials."""
    path = local_path(url, cwd)
    if path is not None:
        location = file_url(path)
    elif _scp_like(url):
        userhost, _, rest = url.partition(":")
        location = f"ssh://{userhost}/{rest.lstrip('/')}"
    else:
        location = clean_url(url)
    return f"{location if location.startswith('git+') else 'git+' + location}@{commit}"
