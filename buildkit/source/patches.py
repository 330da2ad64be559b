"""The patch queue: which patches, in what order, their combined hash, and applying them all or none.

Order: the `series` file of the folder if there is one (UTF-8; blank lines and `#` comments ignored),
else the `*.patch` files by name. Every patch is a file inside the folder: an entry that leaves it
(`../x.patch`, an absolute path, a symlink whose target is outside), a dangling symlink or a patch that
cannot be read is a PatchError before any work. The hash covers each patch's path relative to the
folder (its name, in a flat folder) and its bytes, in order.

Applying: the tree has no .git. All patches are concatenated into one stream and given to a single
`git apply --check`, which applies them cumulatively in memory (a later patch sees the earlier ones'
result); only if that passes does `git apply` write anything. So a failing queue leaves the tree as
it was. (`git apply p1 p2` with separate files would not do: it checks and writes one file at a time.)
To name the culprit, growing prefixes of the queue are checked until one fails.

`git apply` is run with GIT_CEILING_DIRECTORIES set to the tree's parent, so it never discovers an
enclosing repository (inside one it would rewrite paths relative to that repository's root and
consult its index and attributes); it then behaves as a plain `patch -p1` replacement.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from buildkit.core.boundedread import MiB, read_regular
from buildkit.core.errors import PatchError
from buildkit.source.gitcmd import Git

PATCH_LIMIT = 64 * MiB  # a series file or one patch (core/boundedread.py: regular files only, this much at most)
_HASH_DOMAIN = b"buildkit-patch-queue-v1\n"
_FAILED_AT = re.compile(r"^error: patch failed: (?P<path>.+):(?P<line>\d+)$", re.MULTILINE)
_PATH_ERROR = re.compile(r"^error: (?P<path>.+?): (?P<why>No such file or directory|does not exist in index|"
                         r"already exists in working directory|does not match index|wrong type|"
                         r"patch does not apply)$", re.MULTILINE)


@dataclass(frozen=True)
class PatchQueue:
    directory: Path
    files: tuple[Path, ...]
    sha256: str
    names: tuple[str, ...]  # each patch's path relative to the folder, as the hash covers it
    digests: tuple[str, ...] = ()  # each patch file's own sha256 (hex), in the same order (the provenance's)


def load_patch_queue(directory: Path | None, *, required: bool = False) -> PatchQueue:
    """The queue in directory (series order, else by name). None, or a folder that does not exist when
    it is not required (the default source.patch_dir), is an empty queue; PatchError otherwise."""
    if directory is None or not (required or Path(directory).exists()):
        return PatchQueue(directory=Path(directory or "."), files=(), sha256=_queue_hash((), ())[0], names=())
    directory = Path(directory)
    if not directory.is_dir():
        what = "does not exist" if not directory.exists() else "is not a folder"
        raise PatchError(f"the patch folder {directory} {what}; point --patches (source.patch_dir) at the patch "
                         f"queue")
    series = directory / "series"
    if series.is_file():
        entries = _series(series)
    else:
        entries = [(p.name, str(directory)) for p in sorted(directory.glob("*.patch"))]
    files = tuple(_inside(directory, entry, where) for entry, where in entries)
    names = tuple(posixpath.normpath(entry) for entry, _ in entries)
    sha256, digests = _queue_hash(files, names)
    return PatchQueue(directory=directory, files=files, sha256=sha256, names=names, digests=digests)


def apply_patches(queue: PatchQueue, tree_dir: Path) -> None:
    """Apply every patch of queue to tree_dir, or none of them (PatchError naming the patch and file)."""
    if not queue.files:
        return
    texts = [_patch_text(path) for path in queue.files]
    if _git_apply(tree_dir, b"".join(texts), "--check") is None:
        error = _git_apply(tree_dir, b"".join(texts))
        if error is not None:  # checked fine, failed writing (disk full, permissions)
            last = error.strip().splitlines()[-1] if error.strip() else "git apply failed"
            raise PatchError(f"applying the patch queue {queue.directory} to {tree_dir} failed: {last}")
        return
    for count in range(1, len(texts) + 1):
        error = _git_apply(tree_dir, b"".join(texts[:count]), "--check")
        if error is not None:
            # If the culprit does not even parse, its own --stat error has line numbers within it.
            error = _git_apply(tree_dir, texts[count - 1], "--stat") or error
            raise PatchError(_describe(queue.names[count - 1], error))
    raise PatchError(f"the patch queue {queue.directory} does not apply to {tree_dir}")  # not reached


def _series(series: Path) -> list[tuple[str, str]]:
    """(entry, where it is named) for each patch the series file lists."""
    try:
        text = read_regular(series, PATCH_LIMIT).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchError(f"{series}: not UTF-8 text (byte {exc.start}); write the series file as UTF-8") from None
    except OSError as exc:
        raise PatchError(f"{series}: cannot read it: {exc.strerror or exc}") from None
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        name = line.strip()
        if name and not name.startswith("#"):
            entries.append((name, f"{series}, line {number}"))
    return entries


def _inside(directory: Path, entry: str, where: str) -> Path:
    """directory/entry, checked: a readable file whose real path is inside the folder."""
    path, rel = directory / entry, posixpath.normpath(entry)
    try:
        real, root = Path(os.path.realpath(path)), Path(os.path.realpath(directory))
    except (ValueError, OSError):  # a NUL byte, a symlink loop
        raise PatchError(f"{where}: {entry!r} is not a file name") from None
    if posixpath.isabs(rel) or rel.split("/")[0] == ".." or not real.is_relative_to(root):
        raise PatchError(f"{where}: patch {entry} is outside the patch folder {directory} (it is {real}); "
                         f"keep every patch inside the folder")
    if not real.is_file():
        if path.is_symlink() and not real.exists():
            why = f"a symlink to {os.readlink(path)}, which does not exist"
        else:
            why = "not a file" if real.exists() else "not in the folder"
        raise PatchError(f"{where}: patch {entry} is {why}; add it to {directory}, or remove it from the queue")
    return path


def _read(path: Path) -> bytes:
    try:
        return read_regular(path, PATCH_LIMIT)
    except OSError as exc:
        raise PatchError(f"patch {path}: cannot read it: {exc.strerror or exc}") from None


def _queue_hash(files: tuple[Path, ...], names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """(the queue's hash, each patch's own sha256). The queue's is over each patch's path relative to the folder
    and its bytes (for a flat folder, the name: the hash of a flat queue is the one it had when only names were
    hashed); a patch's own is over its bytes alone, as `sha256sum` gives it."""
    digest = hashlib.sha256(_HASH_DOMAIN)
    each = []
    for path, name in zip(files, names, strict=True):
        content = _read(path)
        digest.update(f"{name}\0{len(content)}\0".encode())
        digest.update(content)
        each.append(hashlib.sha256(content).hexdigest())
    return digest.hexdigest(), tuple(each)


def _patch_text(path: Path) -> bytes:
    text = _read(path)
    return text if text.endswith(b"\n") else text + b"\n"


def _git_apply(tree_dir: Path, patch: bytes, *flags: str) -> str | None:
    """Run git apply (with flags) on the patch stream in tree_dir; None if it worked, else git's stderr."""
    import tempfile

    import git

    tree_dir = Path(tree_dir).resolve()
    # No repository is involved: none above the tree is found, and an inherited GIT_DIR/GIT_WORK_TREE (a git
    # hook running buildkit) is overridden by ones that name no repository (git apply then works on cwd).
    env = {"GIT_CEILING_DIRECTORIES": str(tree_dir.parent), "GIT_DIR": str(tree_dir.parent / ".no-git-here"),
           "GIT_WORK_TREE": str(tree_dir), "GIT_INDEX_FILE": str(tree_dir.parent / ".no-git-index")}
    with tempfile.TemporaryFile() as stdin:
        stdin.write(patch)
        stdin.seek(0)
        try:
            Git(env=env).run("-C", str(tree_dir), "apply", "--whitespace=nowarn", *flags, "-", what="apply",
                             stdin=stdin)
        except git.GitCommandError as err:
            return getattr(err, "raw_stderr", "") or "git apply failed"
    return None


def _describe(patch: str, error: str) -> str:
    """One line: which patch, on which file of the tree, and why."""
    if failed := _FAILED_AT.search(error):
        where = f"{failed['path']} (the hunk at line {failed['line']} does not match)"
    elif path_error := _PATH_ERROR.search(error):
        where = f"{path_error['path']} ({path_error['why']})"
    else:
        lines = [line.removeprefix("error: ") for line in error.splitlines() if line.strip()]
        where = f"the patch itself ({lines[-1] if lines else 'git apply failed'})"
    return f"patch {patch} does not apply: it fails on {where}; refresh it against this commit"
