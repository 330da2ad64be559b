"""The source stage: a bare mirror per repository, the pinned commit fetched into it, the tree exported.

Layout, per repository URL (``<stem>`` = sanitised repo name + sha256(url)[:12]):

* ``cache_dir/git/<stem>.git``: the *content* mirror. Each commit we build is fetched into it with
  ``git fetch --depth=1 origin <sha>:refs/buildkit/<sha>`` (one snapshot; later commits come as deltas
  against the snapshots already there, since git's shallow negotiation knows what we hold). It never
  holds partial (filtered) objects, so "the commit is in the mirror" always means "its whole tree is".
* ``cache_dir/git/<stem>.history.git``: the *history* mirror, a partial clone holding commit objects
  only (``git fetch --filter=tree:0 origin <sha>``). It exists for ``build_number``: llama.cpp's
  build-info is ``git rev-list --count HEAD``, which a shallow mirror cannot answer.
* ``cache_dir/git/<stem>.lock``: ``flock``-ed around every update of the two.

Why two repositories and not ``--unshallow --filter=tree:0`` in one: that turns the content mirror into
a partial clone whose old commits lack their trees. A later request for such a commit would then find
it "present", fetch nothing, and ``git archive`` would lazily fetch trees and blobs one by one from the
promisor remote (or fail offline); fetch negotiation would also advertise commits whose trees we lack.
Keeping commits-only history in its own repository avoids all of that. Cost, measured with
``bench/fetch_bytes.py`` (200 commits, 4 MB repository, git daemon allowing filters as GitHub does):
the history fetch is ~180 bytes per commit (34 kB, ~30 ms; `rev-list --count` then takes ~10 ms), i.e.
~1-2 MB for llama.cpp's few thousand commits, and later fetches add only the new commits. A server that
does not allow filters silently sends full history instead (the price of a `git clone --mirror`, once;
later fetches are incremental).

``bytes_fetched`` is exact: git writes every pack it receives to a trace file (GIT_TRACE_PACKFILE)
whose size we read. (The growth of the objects dirs overstates small fetches several-fold: git
explodes them into loose objects or completes thin packs with local bases.)

Hostile or odd servers (see docs/threat-model.md). Every git command runs through gitcmd.py: a deadline,
its own process group, a bound on its processes, no prompts. The history mirror is never left a partial
clone: git registers the remote as a *promisor* for a filtered fetch, and a promisor repository fetches
every missing object it is asked about, one `git fetch` at a time. Over dumb HTTP (which cannot filter,
and whose object walker asks about every tree) that spawned git without end. So the promisor settings
are removed again after every fetch (and before, should an interrupted run have left them), and the
filter is only asked of servers that speak git's smart protocol: a local path, file://, git://, ssh, or
an http(s) server whose ls-remote answers in pkt-lines (a dumb one answers with a plain file). Over dumb
HTTP the history mirror receives the full history instead. Missing trees in a repository that is no
promisor are simply missing: `rev-list --count` and `log` never need them.

Credentials in a source URL (`https://user:token@host/...`) are split off first (urlcreds.split_credentials):
the URL that is recorded, shown, keyed and written to the mirror's config is the clean one; git gets
the secret through an environment-only credential helper. The mirror of a URL therefore stays the same
when its token changes.

A full SHA that the server refuses to serve directly (protocol v0 without ``allowAnySHA1InWant``) or
does not know falls back to fetching all branches and tags; a commit still missing then is unknown.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import git

from buildkit.core.errors import SourceError
from buildkit.core.filelock import file_lock
from buildkit.core.printable import printable
from buildkit.source.gitcmd import Git
from buildkit.core.urlcreds import UrlAuth, redact_text, redact_url, split_credentials
from buildkit.core.wholefile import write_whole
from buildkit.core.boundedread import read_regular

_FULL_SHA = re.compile(r"[0-9a-fA-F]{40}")
_HEXISH = re.compile(r"[0-9a-fA-F]{4,}")
_SCP_LIKE = re.compile(r"[^/]+:")  # git's rule: a colon before the first slash means host:path
_KEEP = "refs/buildkit/"
_ALL_REFS = ("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
_PROMISOR_KEYS = ("remote.origin.promisor", "remote.origin.partialclonefilter", "extensions.partialclone")
_BOILERPLATE = ("could not read from remote repository", "please make sure you have", "and the repository exists")
# Export the exact tree: ignore export-ignore / export-subst attributes the tree may carry.
_EXPORT_ATTRIBUTES = "* -export-ignore -export-subst\n"
# Extraction filter "tar": no absolute or escaping member paths, no setuid bits (Python >= 3.11.4).
_TAR_FILTER: dict[str, Any] = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
#: Folders a path of the tree may be nested in. The DFlash fork's deepest path is 6 levels; a tree of
#: 1,200 nested folders took 374 s to export (tarfile's filter resolves every member's path, one lstat per
#: level), and Python's own walkers stopped at about 1,000 levels (RecursionError).
MAX_TREE_DEPTH = 64


class TreeTooDeep(SourceError):
    """A path of the commit's tree is nested in more than MAX_TREE_DEPTH folders."""

    def __init__(self, commit: str, name: str) -> None:
        shown = "/".join(printable(name).split("/")[:3])
        super().__init__(f"the tree of {commit[:12]} has a path nested in more than {MAX_TREE_DEPTH} folders "
                         f"({shown}/...); buildkit refuses such a tree before writing it")


def check_depth(name: str, commit: str) -> None:
    """TreeTooDeep when a path of the tree (git's form, '/'-separated) is nested too deep."""
    if name.count("/") > MAX_TREE_DEPTH:
        raise TreeTooDeep(commit, name)


def _shallow(tar: tarfile.TarFile, commit: str) -> Iterator[tarfile.TarInfo]:
    """The archive's members, each checked before tarfile's filter resolves its path."""
    for member in tar:
        check_depth(member.name, commit)
        yield member


def tree_depth_checked(content: Git, commit: str) -> None:
    """Refuse the commit's tree when a path in it is nested too deep (git ls-tree, read as it comes)."""
    with content.stream("ls-tree", "-r", "-z", "--name-only", commit, what=f"list of {commit[:12]}") as out:
        rest = b""
        while chunk := out.read(1 << 16):
            *names, rest = (rest + chunk).split(b"\0")
            for name in names:
                check_depth(name.decode("utf-8", "replace"), commit)
            if rest.count(b"/") > MAX_TREE_DEPTH:
                check_depth(rest.decode("utf-8", "replace"), commit)


@dataclass(frozen=True)
class SourceInfo:
    url: str  # normalised (a local path is made absolute), without credentials
    ref: str  # as asked
    commit: str  # resolved, 40 lower-case hex
    commit_time: int  # committer epoch (SOURCE_DATE_EPOCH)
    build_number: int  # `git rev-list --count <commit>`, as llama.cpp's build-info computes it
    subject: str
    fetched: bool  # did this call fetch anything
    bytes_fetched: int  # pack bytes received from the server (GIT_TRACE_PACKFILE), 0 if nothing was fetched


def normalise_url(url: str) -> str:
    """URLs (scheme:// or host:path) stay as they are, less their credentials; a local path becomes absolute."""
    url = split_credentials(url)[0]
    if "://" in url or _SCP_LIKE.match(url):
        return url
    return str(Path(url).expanduser().resolve())


def mirror_dir(cache_dir: Path, url: str) -> Path:
    """The content mirror of url: cache_dir/git/<name>-<sha256(url)[:12]>.git."""
    url = normalise_url(url)
    tail = re.split(r"[/:]", url.rstrip("/"))[-1]
    tail = tail.removesuffix(".git")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", tail).strip("._") or "repo"
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    return Path(cache_dir).expanduser().resolve() / "git" / f"{name}-{digest}.git"


def fetch_source(url: str, ref: str, pin: str | None, cache_dir: Path) -> SourceInfo:
    """Resolve ref (branch, tag or full SHA) in url, make sure the commit is in the mirror, describe it.

    Credentials in url go to git through the environment only; SourceInfo.url is the clean URL. A git
    step or a write that fails outside the fetch's own handling (a full disk under a warm cache) is one
    SourceError line naming the mirror."""
    try:
        return _fetch_source(url, ref, pin, cache_dir)
    except git.GitCommandError as err:
        said = _git_said(err) or f"git exited {err.status}"
        raise SourceError(f"git failed in the mirror of {redact_url(url)} under {cache_dir}: {said}") from None
    except OSError as exc:
        raise SourceError(f"cannot write the mirror of {redact_url(url)} under {cache_dir}: "
                          f"{exc.strerror or exc}") from None


def _fetch_source(url: str, ref: str, pin: str | None, cache_dir: Path) -> SourceInfo:
    auth = split_credentials(url)[1]
    url = normalise_url(url)
    pin = _check_pin(pin)
    content_dir = mirror_dir(cache_dir, url)
    history_dir = content_dir.with_name(content_dir.stem + ".history.git")
    packs = content_dir.with_suffix(".packs")  # git appends every pack it receives here
    with file_lock(content_dir.with_suffix(".lock")):
        packs.unlink(missing_ok=True)
        content = _open_mirror(content_dir, url, packs, auth)
        history = _open_mirror(history_dir, url, packs, auth)
        try:
            commit = _resolve(content, url, ref)
            if pin is not None and commit != pin:
                raise SourceError(f"ref {ref} resolved to {commit} but the pin is {pin}; "
                                  f"update the pin (source.commit) or ask for the pinned commit")
            fetched = _fetch_snapshot(content, url, commit)
            fetched = _fetch_history(history, history_dir, url, commit) or fetched
            bytes_fetched = packs.stat().st_size if packs.exists() else 0
        finally:
            packs.unlink(missing_ok=True)
            _drop_promisor(history, history_dir)
        build_number = int(history.run("rev-list", "--count", commit, what="rev-list --count"))
        commit_time, subject = content.run("log", "-1", "--format=%ct%x00%s", commit).split("\0", 1)
    return SourceInfo(url=url, ref=ref, commit=commit, commit_time=int(commit_time), build_number=build_number,
                      subject=subject, fetched=fetched, bytes_fetched=bytes_fetched)


def export_tree(info: SourceInfo, cache_dir: Path, dest: Path) -> None:
    """Write the tree of info.commit into dest (absent or empty), without .git; modes and symlinks kept."""
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise SourceError(f"cannot export the source into {dest}: it exists and is not an empty folder")
    content_dir = mirror_dir(cache_dir, info.url)
    content = _git(content_dir)
    if not content_dir.is_dir() or not _has_commit(content, info.commit):
        raise SourceError(f"commit {info.commit} is not in the mirror of {info.url}; fetch it first")
    try:
        dest.mkdir(parents=True, exist_ok=True)
        with content.stream("archive", "--format=tar", info.commit, what=f"archive of {info.commit[:12]}") as out:
            with tarfile.open(fileobj=out, mode="r|") as tar:
                tar.extractall(dest, members=_shallow(tar, info.commit), **_TAR_FILTER)
    except git.GitCommandError as err:
        raise SourceError(f"cannot export {info.commit} from the mirror of {info.url}: "
                          f"{_git_said(err) or 'git archive failed'}") from None
    except tarfile.TarError as exc:
        raise SourceError(f"cannot export {info.commit} from the mirror of {info.url}: {exc}") from None
    except OSError as exc:  # a full disk, a read-only folder
        raise SourceError(f"cannot export {info.commit} into {dest}: {exc.strerror or exc}") from None


def _check_pin(pin: str | None) -> str | None:
    if pin is None:
        return None
    if not _FULL_SHA.fullmatch(pin):
        raise SourceError(f"the pin {pin!r} is not a full 40-hex commit SHA")
    return pin.lower()


def _git(git_dir: Path, auth: UrlAuth | None = None, **env: str) -> Git:
    """A git command runner bound to one bare repository (GIT_DIR, so no discovery is involved)."""
    return Git(git_dir, auth=auth, env=env)


def _open_mirror(git_dir: Path, url: str, packs: Path, auth: UrlAuth | None = None) -> Git:
    """Create the bare repository if needed, point its origin at url (clean: no credentials in the
    config on disk), have received packs traced to packs."""
    if not (git_dir / "HEAD").is_file():
        git_dir.mkdir(parents=True, exist_ok=True)
        Git(git_dir).run("init", "--bare", "--quiet", what="init")  # GIT_DIR is git_dir, whatever was inherited
    (git_dir / "info").mkdir(exist_ok=True)
    attributes = git_dir / "info" / "attributes"
    try:
        same = read_regular(attributes, 1 << 16) == _EXPORT_ATTRIBUTES.encode()
    except OSError:
        same = False
    if not same:  # written once: a warm mirror under a full disk is not written for nothing
        write_whole(attributes, _EXPORT_ATTRIBUTES)
    runner = _git(git_dir, auth, GIT_TRACE_PACKFILE=str(packs))
    runner.run("config", "remote.origin.url", url)
    _drop_promisor(runner, git_dir)
    return runner


def _drop_promisor(repo: Git, git_dir: Path) -> None:
    """Make sure git_dir is no partial clone, so nothing in it ever fetches lazily (see the docstring)."""
    try:
        text = (git_dir / "config").read_text(errors="replace").lower()
    except OSError:
        return
    if "promisor" not in text and "partialclone" not in text:
        return
    for key in _PROMISOR_KEYS:
        repo.ok("config", "--unset-all", key, what="config")


def _speaks_smart(repo: Git, git_dir: Path, url: str) -> bool:
    """Whether the server speaks git's own protocol (and so can filter). Only http(s) can be "dumb":
    a plain file server; its ls-remote exchanges no pkt-lines, which GIT_TRACE_PACKET shows."""
    scheme = urlsplit(url).scheme.lower() if "://" in url else ""
    if scheme not in ("http", "https"):
        return True
    trace = git_dir.with_suffix(".probe")
    trace.unlink(missing_ok=True)
    probe = Git(git_dir, auth=repo.auth, env={**repo.env, "GIT_TRACE_PACKET": str(trace)})
    try:
        probe.run("ls-remote", "origin", "HEAD", what=f"ls-remote of {url}")
        return trace.exists() and trace.stat().st_size > 0
    except git.GitCommandError as err:
        raise _unreachable(url, err) from None
    finally:
        trace.unlink(missing_ok=True)


def _resolve(content: Git, url: str, ref: str) -> str:
    """The 40-hex commit ref names: a full SHA as is, a branch or tag through ls-remote."""
    if _FULL_SHA.fullmatch(ref):
        return ref.lower()
    if not ref or ref.startswith("-"):
        raise SourceError(f"ref {ref!r} is not a valid branch, tag or commit SHA")
    commit = _ls_remote(content, url, ref)
    if commit:
        return commit
    if _HEXISH.fullmatch(ref):
        raise SourceError(f"ref {ref} looks like an abbreviated commit SHA and is no branch or tag of {url}; "
                          f"a full 40-hex SHA is required")
    raise SourceError(f"ref {ref} is neither a branch nor a tag of {url}")


def _ls_remote(content: Git, url: str, ref: str) -> str | None:
    """Ask the server what ref points at; tags win over branches (git's order), annotated tags peeled."""
    try:
        out = content.run("ls-remote", "origin", ref, ref + "^{}",  # the peeled entry of an annotated tag
                          what=f"ls-remote of {url}")
    except git.GitCommandError as err:
        raise _unreachable(url, err) from None
    refs = {}
    for line in out.splitlines():
        sha, _, name = line.partition("\t")
        refs[name] = sha
    exact = [ref] if ref == "HEAD" or ref.startswith("refs/") else []
    for name in [*exact, f"refs/tags/{ref}", f"refs/heads/{ref}"]:
        commit = refs.get(name + "^{}") or refs.get(name)
        if commit:
            return commit
    return None


def _fetch_snapshot(content: Git, url: str, commit: str) -> bool:
    """Fetch commit with its whole tree (depth 1) unless the mirror has it; True if it fetched."""
    if _has_commit(content, commit):
        return False
    _fetch(content, url, commit, first=("--depth=1",), fallback=())
    return True


def _fetch_history(history: Git, history_dir: Path, url: str, commit: str) -> bool:
    """Fetch the commit objects (no trees) of commit's history unless already there; True if it fetched."""
    # A keep-ref, not an object lookup (the mirror may lack the trees of what it has).
    if history.ok("show-ref", "--verify", "--quiet", _KEEP + commit, what="show-ref"):
        return False
    flags = ("--filter=tree:0",) if _speaks_smart(history, history_dir, url) else ()
    try:
        _fetch(history, url, commit, first=flags, fallback=flags)
    finally:
        _drop_promisor(history, history_dir)
    return True


def _fetch(repo: Git, url: str, commit: str, *, first: tuple[str, ...], fallback: tuple[str, ...]) -> None:
    """Fetch exactly commit into refs/buildkit/<commit>; if refused, fetch all branches and tags."""
    keep = _KEEP + commit
    what = f"fetch from {url}"
    try:
        repo.run("fetch", "--no-tags", *first, "origin", f"{commit}:{keep}", what=what)
        return
    except git.GitCommandError:
        pass  # the server refuses unadvertised SHAs, or does not have this one
    try:
        repo.run("fetch", "--no-tags", *fallback, "origin", *_ALL_REFS, what=what)
    except git.GitCommandError as err:
        raise _unreachable(url, err) from None
    if not _has_commit(repo, commit):
        raise SourceError(f"commit {commit} is not in {url} (fetched all its branches and tags); check the SHA")
    repo.run("update-ref", keep, commit)


def _has_commit(repo: Git, commit: str) -> bool:
    return repo.ok("cat-file", "-e", f"{commit}^{{commit}}", what="cat-file")


def _git_said(err: git.GitCommandError) -> str:
    """git's last meaningful stderr line (not its boilerplate), without fatal:/error: prefixes."""
    stderr = getattr(err, "raw_stderr", None) \
        or str(err.stderr or "").strip().removeprefix("stderr: '").removesuffix("'")
    lines = [re.sub(r"^(fatal|error|warning): ", "", line.strip()) for line in stderr.splitlines()]
    lines = [line for line in lines if line and not line.lower().startswith(_BOILERPLATE)]
    return redact_text(lines[-1])[:300] if lines else ""


def _unreachable(url: str, err: git.GitCommandError) -> SourceError:
    """One line naming url and --source, with git's last meaningful stderr line."""
    said = _git_said(err)
    detail = f" ({said})" if said else ""
    return SourceError(f"cannot fetch from {url}{detail}; use --source PATH_OR_URL to point at a local "
                       f"clone or a reachable mirror")
