"""Registry credentials from Docker's own client configuration (what `docker login` wrote).

The file is `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`. For a registry, the first
source that has credentials wins:

1. `credHelpers[host]`: a credential helper for this registry only;
2. `credsStore`: the default credential helper;
3. `auths[host]`: `auth` (base64 of `user:password`), or `username` + `password`, or `identitytoken`.

Helpers speak Docker's credential-helper protocol: `docker-credential-<name> get`, the server URL
on stdin, `{"ServerURL", "Username", "Secret"}` on stdout; the user name `<token>` marks an
identity (refresh) token. Docker Hub is stored under `https://index.docker.io/v1/`; entries for
`index.docker.io`, `docker.io` and `registry-1.docker.io` count as Docker Hub too. `auths` keys
written as URLs (`https://host:port/...`) match their host[:port].

A secret is never shown: not in repr(), not in messages.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from buildkit.core import children
from buildkit.core.boundedread import MiB, read_regular
from buildkit.core.errors import RegistryError
from buildkit.oci.imageref import DOCKER_HUB_CREDENTIAL_KEY, is_docker_hub

HELPER_PREFIX = "docker-credential-"
TOKEN_USERNAME = "<token>"
HELPER_TIMEOUT = 60.0


@dataclass(frozen=True)
class Credentials:
    username: str
    secret: str  # password, access token or identity token
    identity_token: bool  # secret is an OAuth2 refresh token for the registry's token service
    source: str = field(default="", compare=False)  # where they came from, for messages

    def __repr__(self) -> str:
        kind = "identity token" if self.identity_token else "password"
        src = f", source={self.source!r}" if self.source else ""
        return f"Credentials(username={self.username!r}, secret=<{kind} hidden>{src})"

    __str__ = __repr__

    def describe(self) -> str:
        """`USER (from SOURCE)`, for messages."""
        return f"{self.username} (from {self.source})" if self.source else self.username


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """The Docker client configuration file that would be read."""
    env = os.environ if env is None else env
    if env.get("DOCKER_CONFIG"):
        return Path(env["DOCKER_CONFIG"]) / "config.json"
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".docker" / "config.json"


def _display(path: Path, env: Mapping[str, str]) -> str:
    home = env.get("HOME") or str(Path.home())
    try:
        return "~/" + path.relative_to(home).as_posix()
    except ValueError:
        return str(path)


def server_hostname(key: str) -> str:
    """`https://host:port/v1/` -> `host:port` (what Docker's ConvertToHostname does)."""
    text = key.strip()
    for scheme in ("https://", "http://"):
        if text.lower().startswith(scheme):
            text = text[len(scheme):]
            break
    return text.split("/", 1)[0]


def _matches(key: str, host: str, hub: bool) -> bool:
    other = server_hostname(key)
    return is_docker_hub(other) if hub else other == host


def _find(table: Mapping[str, Any], registry_key: str, host: str, hub: bool) -> tuple[str, Any] | None:
    if registry_key in table:
        return registry_key, table[registry_key]
    for key, value in table.items():
        if isinstance(key, str) and _matches(key, host, hub):
            return key, value
    return None


def _read_config(path: Path, shown: str) -> dict[str, Any] | None:
    try:
        text = read_regular(path, 16 * MiB).decode("utf-8")  # a FIFO or device: refused, not waited on
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise RegistryError(f"{shown} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise RegistryError(f"cannot read {shown}: {exc.strerror or exc}") from None
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RegistryError(f"{shown} is not valid JSON (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise RegistryError(f"{shown} is not valid JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise RegistryError(f"{shown} must hold a JSON object")
    return data


def run_helper(name: str, server_url: str, env: Mapping[str, str] | None = None,
               origin: str = "", timeout: float = HELPER_TIMEOUT) -> Credentials | None:
    """`docker-credential-NAME get` for server_url; None when the helper has nothing for it."""
    env = os.environ if env is None else env
    program = HELPER_PREFIX + name
    where = f" (named by {origin})" if origin else ""
    exe = shutil.which(program, path=env.get("PATH", os.defpath))
    if exe is None:
        raise RegistryError(f"credential helper {program}{where} is not on PATH; install it, "
                            f"or remove it from the configuration and run `docker login` again")
    # Its own process group: a helper that hangs is stopped with every process it started, and what
    # one that answered left running in its group is stopped too (core/children.py).
    # Nothing it prints (stdout carries the secret) is ever put into a message.
    try:
        proc = children.start([exe, "get"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=dict(env))
    except OSError as exc:
        raise RegistryError(f"cannot run credential helper {program}: {exc.strerror or exc}") from None
    try:
        out, err = proc.communicate(server_url, timeout=timeout)
    except subprocess.TimeoutExpired:
        children.stop(proc, grace=0)  # a helper has nothing to clean up: SIGKILL at once
        raise RegistryError(f"credential helper {program}{where} did not answer within {timeout:g} s; "
                            f"it was stopped") from None
    except BaseException:
        children.stop(proc, grace=0)
        raise
    children.finish(proc)
    out = out.strip()
    if proc.returncode != 0:
        if "credentials not found" in (out + "\n" + err).lower():
            return None
        raise RegistryError(f"credential helper {program} failed for {server_url} (exit code {proc.returncode}; "
                            f"its output is not shown, it may hold a secret)")
    try:
        data = json.loads(out)
    except json.JSONDecodeError:
        raise RegistryError(f"credential helper {program} answered something that is not JSON") from None
    if not isinstance(data, dict):
        raise RegistryError(f"credential helper {program} answered something that is not a JSON object")
    for key in ("Username", "Secret"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise RegistryError(f"credential helper {program}: {key} must be a string, "
                                f"got {type(data[key]).__name__}")
    username, secret = str(data.get("Username") or ""), str(data.get("Secret") or "")
    if not secret:
        return None
    token = username == TOKEN_USERNAME
    return Credentials(username=username, secret=secret, identity_token=token,
                       source=f"credential helper {program}")


def _from_auths(entry: Any, key: str, shown: str) -> Credentials | None:
    if not isinstance(entry, dict):
        return None
    source = f"{shown} auths[{key!r}]"
    username = str(entry.get("username") or "")
    password = str(entry.get("password") or "")
    if entry.get("auth"):
        try:
            decoded = base64.b64decode(str(entry["auth"]), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            raise RegistryError(f"{source}: 'auth' is not base64 of user:password; "
                                f"run `docker login {server_hostname(key)}` again") from None
        user, sep, pw = decoded.partition(":")
        if not sep:
            raise RegistryError(f"{source}: 'auth' does not decode to user:password; "
                                f"run `docker login {server_hostname(key)}` again")
        username, password = user or username, pw
    token = str(entry.get("identitytoken") or "")
    if token:
        return Credentials(username=username or TOKEN_USERNAME, secret=token, identity_token=True, source=source)
    if password:
        return Credentials(username=username, secret=password, identity_token=False, source=source)
    return None


def lookup_credentials(registry_key: str, env: Mapping[str, str] | None = None) -> Credentials | None:
    """Credentials for a registry (`host[:port]`, or Docker Hub's key); None when there are none."""
    env = os.environ if env is None else env
    host = server_hostname(registry_key)
    hub = is_docker_hub(host) or registry_key.rstrip("/") == DOCKER_HUB_CREDENTIAL_KEY.rstrip("/")
    key = DOCKER_HUB_CREDENTIAL_KEY if hub else host
    path = config_path(env)
    shown = _display(path, env)
    config = _read_config(path, shown)
    if config is None:
        return None

    helpers = config.get("credHelpers") or {}
    if isinstance(helpers, dict):
        found = _find(helpers, key, host, hub)
        if found and found[1]:
            creds = run_helper(str(found[1]), key, env, f"{shown} credHelpers[{found[0]!r}]")
            if creds is not None:
                return creds

    store = config.get("credsStore")
    if isinstance(store, str) and store:
        creds = run_helper(store, key, env, f"{shown} credsStore")
        if creds is not None:
            return creds

    auths = config.get("auths") or {}
    if isinstance(auths, dict):
        found = _find(auths, key, host, hub)
        if found:
            return _from_auths(found[1], found[0], shown)
    return None
