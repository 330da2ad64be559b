"""Credentials in a source URL: taken out before the URL goes anywhere, given to git only through its
environment (see gitcmd.py and docs/threat-model.md). No GitPython here: nightly imports it cheaply."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

from buildkit.core.errors import SourceError

USER_ENV = "LLAMA_BUILDKIT_GIT_USERNAME"
SECRET_ENV = "LLAMA_BUILDKIT_GIT_PASSWORD"
_HTTP = ("http", "https")
# The helper is a shell function: printf and test are builtins, so the secret never becomes argv.
_HELPER = ('!f() { test "$1" = get || exit 0; '
           f'printf "username=%s\\npassword=%s\\n" "${USER_ENV}" "${SECRET_ENV}"; }}; f')


@dataclass(frozen=True)
class UrlAuth:
    """Credentials taken out of a source URL, for git's credential mechanism only."""
    scope: str  # scheme://host[:port] they are for
    username: str
    secret: str

    def __repr__(self) -> str:
        return f"UrlAuth(scope={self.scope!r}, username=<hidden>, secret=<hidden>)"

    __str__ = __repr__

    def env(self) -> dict[str, str]:
        """GIT_CONFIG_* entries: no helper of the user's, ours for this host; the values beside them."""
        entries = [("credential.helper", ""), (f"credential.{self.scope}.helper", _HELPER)]
        env = {"GIT_CONFIG_COUNT": str(len(entries)), USER_ENV: self.username, SECRET_ENV: self.secret}
        for i, (key, value) in enumerate(entries):
            env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
        return env


def split_credentials(url: str) -> tuple[str, UrlAuth | None]:
    """(the URL without user info, the credentials it carried). http(s): user and password (or a
    token alone) become UrlAuth. ssh keeps its user name (not a secret) and refuses a password; git://
    has no authentication, so user info there is dropped. A path or host:path is returned as it is."""
    if "://" not in url:
        return url, None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port that is no number)
    except ValueError:
        raise SourceError(f"source URL {redact_url(url)!r} is not a valid URL") from None
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, has_pw, password = userinfo.partition(":")
    scheme = parts.scheme.lower()
    if scheme in _HTTP:
        clean = urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
        scope = f"{scheme}://{hostport}"
        if not user and not password:
            return clean, None
        return clean, UrlAuth(scope=scope, username=unquote(user), secret=unquote(password))
    if has_pw:
        raise SourceError(f"source URL {redact_url(url)!r} carries a password; {scheme}:// cannot use one "
                          f"(use an ssh key, or an https URL)")
    if scheme in ("ssh", "git+ssh", "ssh+git"):
        return url, None
    return urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment)), None


def redact_url(text: str) -> str:
    """url with any password (for http(s): the whole user info) replaced by ***; never raises."""
    if "://" not in text:
        return text
    scheme, _, rest = text.partition("://")
    netloc, slash, tail = rest.partition("/")
    if "@" not in netloc:
        return text
    userinfo, _, hostport = netloc.rpartition("@")
    if scheme.lower() in _HTTP or ":" in userinfo:
        return f"{scheme}://***@{hostport}{slash}{tail}"
    return text


_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/\s@]*@)")


def redact_text(text: str) -> str:
    """Every scheme://user:secret@ in text (a message, a line of output) as scheme://***@."""
    return _USERINFO.sub(lambda m: m.group(1) + "***@" if m.group(1).lower().startswith("http")
                         or ":" in m.group(2) else m.group(0), text)


def clean_url(url: str) -> str:
    """url without credentials (what labels, the lock, messages and mirror keys see)."""
    return split_credentials(url)[0]


