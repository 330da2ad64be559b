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

A full SHA that the server refuses to serve directly (protocol v0 without ``allowAnySHA1InWant``) or
does not know falls back to fetching all branches and tags; a commit still missing then is unknown.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import git

from .errors import SourceError

_FULL_SHA = re.compile(r"[0-9a-fA-F]{40}")
_HEXISH = re.compile(r"[0-9a-fA-F]{4,}")
_SCP_LIKE = re.compile(r"[^/]+:")  # git's rule: a colon before the first slash means host:path
_KEEP = "refs/buildkit/"
_ALL_REFS = ("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANGUAGE": "C"}
_BOILERPLATE = ("could not read from remote repository", "please make sure you have", "and the repository exists")
# Export the exact tree: ignore export-ignore / export-subst attributes the tree may carry.
_EXPORT_ATTRIBUTES = "* -export-ignore -export-subst\n"
# Extraction filter "tar": no absolute or escaping member paths, no setuid bits (Python >= 3.11.4).
_TAR_FILTER = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}


@dataclass(frozen=True)
class SourceInfo:
    url: str  # normalised: a local path is made absolute
    ref: str  # as asked
    commit: str  # resolved, 40 lower-case hex
    commit_time: int  # committer epoch (SOURCE_DATE_EPOCH)
    build_number: int  # `git rev-list --count <commit>`, as llama.cpp's build-info computes it
    subject: str
    fetched: bool  # did this call fetch anything
    bytes_fetched: int  # pack bytes received from the server (GIT_TRACE_PACKFILE), 0 if nothing was fetched


def normalise_url(url: str) -> str:
    """URLs (scheme:// or host:path) stay as they are; a local path becomes absolute."""
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
    """Resolve ref (branch, tag or full SHA) in url, make sure the commit is in the mirror, describe it."""
    url = normalise_url(url)
    pin = _check_pin(pin)
    content_dir = mirror_dir(cache_dir, url)
    history_dir = content_dir.with_name(content_dir.stem + ".history.git")
    packs = content_dir.with_suffix(".packs")  # git appends every pack it receives here
    with _locked(content_dir.with_suffix(".lock")):
        packs.unlink(missing_ok=True)
        content = _open_mirror(content_dir, url, packs)
        history = _open_mirror(history_dir, url, packs)
        try:
            commit = _resolve(content, url, ref)
            if pin is not None and commit != pin:
                raise SourceError(f"ref {ref} resolved to {commit} but the pin is {pin}; "
                                  f"update the pin (source.commit) or ask for the pinned commit")
            fetched = _fetch_snapshot(content, url, commit)
            fetched = _fetch_history(history, url, commit) or fetched
            bytes_fetched = packs.stat().st_size if packs.exists() else 0
        finally:
            packs.unlink(missing_ok=True)
        build_number = int(history.rev_list("--count", commit))
        commit_time, subject = content.log("-1", "--format=%ct%x00%s", commit).split("\0", 1)
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
    dest.mkdir(parents=True, exist_ok=True)
    proc = content.archive("--format=tar", info.commit, as_process=True)
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            tar.extractall(dest, **_TAR_FILTER)
    finally:
        proc.wait()  # raises GitCommandError if git archive failed


def _check_pin(pin: str | None) -> str | None:
    if pin is None:
        return None
    if not _FULL_SHA.fullmatch(pin):
        raise SourceError(f"the pin {pin!r} is not a full 40-hex commit SHA")
    return pin.lower()


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _git(git_dir: Path, **env: str) -> git.Git:
    """A git command runner bound to one bare repository (GIT_DIR, so no discovery is involved)."""
    runner = git.Git(str(git_dir))
    runner.update_environment(GIT_DIR=str(git_dir), **_GIT_ENV, **env)
    return runner


def _open_mirror(git_dir: Path, url: str, packs: Path) -> git.Git:
    """Create the bare repository if needed, point its origin at url, have received packs traced to packs."""
    if not (git_dir / "HEAD").is_file():
        git.Repo.init(git_dir, bare=True, mkdir=True).close()
    (git_dir / "info").mkdir(exist_ok=True)
    (git_dir / "info" / "attributes").write_text(_EXPORT_ATTRIBUTES)
    runner = _git(git_dir, GIT_TRACE_PACKFILE=str(packs))
    runner.config("remote.origin.url", url)
    return runner


def _resolve(content: git.Git, url: str, ref: str) -> str:
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


def _ls_remote(content: git.Git, url: str, ref: str) -> str | None:
    """Ask the server what ref points at; tags win over branches (git's order), annotated tags peeled."""
    try:
        out = content.ls_remote("origin", ref, ref + "^{}")  # the peeled entry of an annotated tag
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


def _fetch_snapshot(content: git.Git, url: str, commit: str) -> bool:
    """Fetch commit with its whole tree (depth 1) unless the mirror has it; True if it fetched."""
    if _has_commit(content, commit):
        return False
    _fetch(content, url, commit, first=("--depth=1",), fallback=())
    return True


def _fetch_history(history: git.Git, url: str, commit: str) -> bool:
    """Fetch the commit objects (no trees) of commit's history unless already there; True if it fetched."""
    # A keep-ref, not an object lookup: in a partial clone a lookup of a missing object fetches it lazily.
    try:
        history.show_ref("--verify", "--quiet", _KEEP + commit)
        return False
    except git.GitCommandError:
        pass
    _fetch(history, url, commit, first=("--filter=tree:0",), fallback=("--filter=tree:0",))
    return True


def _fetch(repo: git.Git, url: str, commit: str, *, first: tuple[str, ...], fallback: tuple[str, ...]) -> None:
    """Fetch exactly commit into refs/buildkit/<commit>; if refused, fetch all branches and tags."""
    keep = _KEEP + commit
    try:
        repo.fetch("--no-tags", *first, "origin", f"{commit}:{keep}")
        return
    except git.GitCommandError:
        pass  # the server refuses unadvertised SHAs, or does not have this one
    try:
        repo.fetch("--no-tags", *fallback, "origin", *_ALL_REFS)
    except git.GitCommandError as err:
        raise _unreachable(url, err) from None
    if not _has_commit(repo, commit):
        raise SourceError(f"commit {commit} is not in {url} (fetched all its branches and tags); check the SHA")
    repo.update_ref(keep, commit)


def _has_commit(repo: git.Git, commit: str) -> bool:
    try:
        repo.cat_file("-e", f"{commit}^{{commit}}")
        return True
    except git.GitCommandError:
        return False


def _unreachable(url: str, err: git.GitCommandError) -> SourceError:
    """One line naming url and --source, with git's last meaningful stderr line (not its boilerplate)."""
    stderr = str(err.stderr or "").strip().removeprefix("stderr: '").removesuffix("'")
    lines = [re.sub(r"^(fatal|error|warning): ", "", line.strip()) for line in stderr.splitlines()]
    lines = [line for line in lines if line and not line.lower().startswith(_BOILERPLATE)]
    detail = f" ({lines[-1]})" if lines else ""
    return SourceError(f"cannot fetch from {url}{detail}; use --source PATH_OR_URL to point at a local "
                       f"clone or a reachable mirror")
