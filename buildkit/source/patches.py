"""The patch queue: which patches, in what order, their combined hash, and applying them all or none.

Order: the `series` file of the folder if there is one (blank lines and `#` comments ignored), else
the `*.patch` files by name. The hash covers each patch's name and content, in order.

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
import re
from dataclasses import dataclass
from pathlib import Path

from buildkit.core.errors import PatchError

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


def load_patch_queue(directory: Path | None) -> PatchQueue:
    """The queue in directory (series order, else by name); None or a missing folder is an empty queue."""
    if directory is None or not Path(directory).exists():
        return PatchQueue(directory=Path(directory or "."), files=(), sha256=_queue_hash(()))
    directory = Path(directory)
    if not directory.is_dir():
        raise PatchError(f"the patch queue {directory} is not a folder")
    series = directory / "series"
    files = _series(series) if series.is_file() else sorted(p for p in directory.glob("*.patch") if p.is_file())
    return PatchQueue(directory=directory, files=tuple(files), sha256=_queue_hash(files))


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
            raise PatchError(_describe(queue.files[count - 1], error))
    raise PatchError(f"the patch queue {queue.directory} does not apply to {tree_dir}")  # not reached


def _series(series: Path) -> list[Path]:
    files = []
    for number, line in enumerate(series.read_text().splitlines(), start=1):
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        path = series.parent / name
        if not path.is_file():
            raise PatchError(f"{series}, line {number}: patch {name} is not in {series.parent}")
        files.append(path)
    return files


def _queue_hash(files: tuple[Path, ...] | list[Path]) -> str:
    digest = hashlib.sha256(_HASH_DOMAIN)
    for path in files:
        content = path.read_bytes()
        digest.update(f"{path.name}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


def _patch_text(path: Path) -> bytes:
    text = path.read_bytes()
    return text if text.endswith(b"\n") else text + b"\n"


def _git_apply(tree_dir: Path, patch: bytes, *flags: str) -> str | None:
    """Run git apply (with flags) on the patch stream in tree_dir; None if it worked, else git's stderr."""
    import tempfile

    import git

    from buildkit.source.gitcmd import Git

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


def _describe(patch: Path, error: str) -> str:
    """One line: which patch, on which file of the tree, and why."""
    if failed := _FAILED_AT.search(error):
        where = f"{failed['path']} (the hunk at line {failed['line']} does not match)"
    elif path_error := _PATH_ERROR.search(error):
        where = f"{path_error['path']} ({path_error['why']})"
    else:
        lines = [line.removeprefix("error: ") for line in error.splitlines() if line.strip()]
        where = f"the patch itself ({lines[-1] if lines else 'git apply failed'})"
    return f"patch {patch.name} does not apply: it fails on {where}; refresh it against this commit"
