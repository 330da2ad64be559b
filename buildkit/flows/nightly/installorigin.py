"""Which buildkit is running, as a CI runner can install it (issue 47, item 3): the git URL and commit that
`buildkit ci github` pins in the workflow's `pip install "git+URL@COMMIT"`.

Where it is read, first found first:

1. the checkout the running code is imported from (an editable install, or a checkout on PYTHONPATH): its HEAD;
2. pip's record of the install (PEP 610 direct_url.json): a git URL and the commit it resolved (`vcs_info`);
3. the origin the wheel recorded when it was built from a checkout (`buildkit/_origin.json`, written by
   scripts/hatch_origin.py: `make dist`, or `pip install /path/to/checkout`).

A runner reaches a network URL, never a folder of this machine: a checkout's (or a `git+file:` install's)
commit is installed from a remote of that repository whose remote-tracking branches hold the commit (the
branch's upstream first, then origin, then the others); with none, `ci github` is refused, saying so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import buildkit
from buildkit.core.errors import ConfigError, SourceError
from buildkit.core.giturls import local_path, loopback_host
from buildkit.core.urlcreds import clean_url, redact_url
from buildkit.source.gitcmd import Git, GitFailed

DISTRIBUTION = "llama-buildkit"
ORIGIN_FILE = "_origin.json"  # in the installed package, beside __init__.py
COMMIT = re.compile(r"[0-9a-f]{40}")
FIX = "pass --buildkit-repo URL --buildkit-ref COMMIT (or --install SPEC)"


@dataclass(frozen=True)
class Remote:
    name: str
    url: str  # without credentials
    has_commit: bool  # one of its remote-tracking branches holds the commit


@dataclass(frozen=True)
class Checkout:
    """A git checkout's facts: the commit to install, and where a runner could get it."""
    where: str  # words for messages: "the checkout /src/buildkit", "the wheel's recorded origin (...)"
    commit: str
    remotes: tuple[Remote, ...]
    dirty: bool = False


@dataclass(frozen=True)
class Origin:
    url: str  # a git URL a runner reaches (network, no credentials)
    commit: str
    how: str  # what said so, for the notes
    notes: tuple[str, ...] = ()

    @property
    def spec(self) -> str:
        return f"{self.url if self.url.startswith('git+') else 'git+' + self.url}@{self.commit}"


def checkout_facts(folder: Path, commit: str = "") -> Checkout | None:
    """The facts of the git checkout whose top is folder (None when folder is no checkout's top); commit: the one
    to look for on the remotes (default: HEAD)."""
    git = Git()

    def run(*args: str) -> str:
        return git.run("-C", str(folder), *args, what=args[0], timeout=30)

    try:
        top = Path(run("rev-parse", "--show-toplevel"))
        if top.resolve() != folder.resolve():
            return None
        head = run("rev-parse", "HEAD")
        commit = commit or head
        dirty = commit == head and bool(run("status", "--porcelain", "--untracked-files=no"))
        try:
            upstream = run("rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}").split("/", 1)[0]
        except GitFailed:
            upstream = ""
        holding = {ref.split("/")[2] for ref in run("for-each-ref", "--contains", commit, "--format=%(refname)",
                                                    "refs/remotes/").split() if ref.count("/") >= 3}
        names = run("remote").split()
        remotes = []
        for name in sorted(names, key=lambda n: (n != upstream, n != "origin", n)):
            raw = run("remote", "get-url", name)
            try:
                remotes.append(Remote(name, clean_url(raw), name in holding))
            except SourceError:  # a URL git may take but no runner's pip would: named, never chosen
                remotes.append(Remote(name, redact_url(raw), False))
    except (GitFailed, OSError):
        return None
    return Checkout(f"the checkout {folder}", commit, tuple(remotes), dirty)


def reachable(checkout: Checkout) -> Origin:
    """The checkout's commit from the first remote a runner reaches that holds it; ConfigError otherwise."""
    for remote in checkout.remotes:
        if remote.has_commit and local_path(remote.url) is None:
            notes = (f"{checkout.where} has uncommitted changes: the workflow installs commit "
                     f"{checkout.commit[:12]} without them",) if checkout.dirty else ()
            return Origin(remote.url, checkout.commit, f"{checkout.where}, remote {remote.name}", notes)
    if not checkout.remotes:
        why = "has no remote"
    else:
        said = [f"{r.name} {redact_url(r.url)}: " + ("a folder on this machine" if local_path(r.url) is not None
                                                     else "no branch holds it")
                for r in checkout.remotes]
        why = "is on no remote a runner can reach (" + "; ".join(said) + ")"
    raise ConfigError(f"this buildkit is commit {checkout.commit[:12]} of {checkout.where}, which {why}: a runner "
                      f"cannot install it; push the commit, or {FIX}")


def _own_checkout() -> Path | None:
    top = Path(buildkit.__file__).resolve().parent.parent
    return top if (top / ".git").exists() and (top / "pyproject.toml").is_file() else None


def _direct_url() -> dict[str, Any] | None:
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
        data = json.loads(text) if text else None
    except (metadata.PackageNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _recorded() -> Checkout | None:
    """The origin the wheel recorded at its build (scripts/hatch_origin.py)."""
    try:
        data = json.loads((Path(buildkit.__file__).parent / ORIGIN_FILE).read_text())
        remotes = tuple(Remote(str(r["name"]), clean_url(str(r["url"])), bool(r["has_commit"]))
                        for r in data.get("remotes") or [])
        commit = str(data["commit"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, SourceError):
        return None
    if not COMMIT.fullmatch(commit):
        return None
    where = f"the wheel's recorded origin (built from {data.get('built_from') or 'a checkout'})"
    return Checkout(where, commit, remotes, bool(data.get("dirty")))


def _running() -> Checkout | Origin:
    """The first source of the order above that says which buildkit runs; ConfigError when none does."""
    own = _own_checkout()
    facts = checkout_facts(own) if own is not None else None
    if facts is not None:
        return facts
    direct = _direct_url()
    vcs = (direct or {}).get("vcs_info") or {}
    if direct and vcs.get("vcs") == "git" and COMMIT.fullmatch(str(vcs.get("commit_id", ""))):
        url, commit = str(direct.get("url", "")), str(vcs["commit_id"])
        folder = local_path(url)
        if folder is None:
            return Origin(clean_url(url), commit, "pip's record of the install (direct_url.json)")
        there = checkout_facts(folder, commit) if folder.is_dir() else None
        return Checkout(f"git+{url}, a folder on this machine it was installed from" + ("" if there else " (gone)"),
                        commit, there.remotes if there else ())
    recorded = _recorded()
    if recorded is not None:
        return recorded
    raise ConfigError(f"cannot tell which commit this buildkit is (no checkout, no git URL in pip's record, no origin "
                      f"recorded in its wheel); {FIX}")


def running_origin() -> Origin:
    """Where a runner installs the running buildkit from; ConfigError (one line, what to pass) when nowhere."""
    found = _running()
    return reachable(found) if isinstance(found, Checkout) else found


def install_spec(repo: str | None = None, ref: str | None = None) -> tuple[str, tuple[str, ...]]:
    """What the runner's `pip install` gets, and notes for the user: git+REPO@REF as given (REF defaults to the
    running commit), else the running buildkit's origin (running_origin)."""
    if repo:
        if local_path(repo) is not None:
            raise ConfigError(f"--buildkit-repo {repo} is a folder on this machine: a runner cannot reach it; give "
                              "the URL it is pushed to")
        origin = Origin(clean_url(repo), ref or _running().commit, "--buildkit-repo")
    else:
        origin = running_origin()
        if ref:
            origin = Origin(origin.url, ref, origin.how + ", at --buildkit-ref", origin.notes)
    notes = list(origin.notes)
    host = loopback_host(origin.url)
    if host:
        notes.append(f"the workflow installs buildkit from {redact_url(origin.url)}: {host} is this machine's "
                     "loopback address, which only a runner on this machine reaches")
    return origin.spec, tuple(notes)
