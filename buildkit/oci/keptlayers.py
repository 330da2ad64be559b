"""An image's layers applied into a folder, with the lower layers' result kept between calls.

Verify reads every build's image from its layers (oci/rootfs.py), and most of those layers are the
runtime base's (the OS, its packages, for CUDA the runtime libraries): the same bytes every build.
`apply_kept` applies all but the image's top `fresh` layers once, keeps the resulting folder under
kept_dir, named by the digests of those layers and the filter's name, and later copies it with hard
links before applying the top layers. A layer is content-addressed, so the same digests always give
the same files. Hard links are safe: applying a layer removes a path before it writes one, and only
folders (made anew in each copy) are ever changed in place.

The newest KEEP prefixes stay; older ones are removed when a new one is kept, as are the work
folders (verify's temporary roots among them, which live here so that the links reach) that a killed
run left a day ago or more.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from buildkit.core.treewalk import remove_tree, walk
from buildkit.oci.rootfs import Applied, apply_layers, apply_more

if TYPE_CHECKING:
    from buildkit.oci.ocilayout import Image

KEEP = 4
_STATE = "applied.json"


def apply_kept(image: Image, root: Path, include: Callable[[str], bool], include_name: str,
               kept_dir: Path, fresh: int) -> Applied:
    """apply_layers(image, root, include), the layers below the top `fresh` ones from kept_dir when
    they were applied before (see the module's docstring)."""
    split = max(len(image.layers) - fresh, 0)
    lower, top = image.layers[:split], image.layers[split:]
    if not lower:
        return apply_layers(image, root, include)
    key = hashlib.sha256("\n".join([include_name, *(d.digest for d in lower)]).encode()).hexdigest()[:32]
    kept = kept_dir / key
    try:
        applied = _copied(kept, root) if (kept / _STATE).is_file() else None
    except (OSError, ValueError, KeyError):
        applied = None  # a kept folder half removed or written by another process: apply the layers instead
        remove_tree(root, ignore_errors=True)
    if applied is None:
        applied = apply_layers(image, root, include, layers=lower)
        _keep(applied, kept)
    apply_more(image, applied, top, include)
    return applied


def _copied(kept: Path, root: Path) -> Applied:
    """kept's tree linked into root (absent or empty), with the origins and skips recorded beside it."""
    state = json.loads((kept / _STATE).read_text())
    _link_tree(kept / "root", root)
    os.utime(kept)  # most recently used
    return Applied(root=root, origin=dict(state["origin"]), skipped=set(state["skipped"]))


def _keep(applied: Applied, kept: Path) -> None:
    """Keep a copy (hard links) of applied under kept; a failure to keep it is not an error."""
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{kept.name}.tmp-", dir=kept.parent))
        try:
            _link_tree(applied.root, work / "root")
            # work is scratch, renamed into place whole: its files need no whole-file writes
            (work / _STATE).write_text(json.dumps({"origin": applied.origin, "skipped": sorted(applied.skipped)}))
            os.rename(work, kept)
        except OSError:
            remove_tree(work, ignore_errors=True)  # (another process kept the same prefix first)
            return
        _forget_older(kept.parent)
    except OSError:
        return


def _forget_older(kept_dir: Path) -> None:
    """All but the KEEP most recently used prefixes go, and work folders a killed run left (a day old)."""
    folders = [p for p in kept_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    folders.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    stale = [p for p in kept_dir.iterdir() if p.name.startswith(".") and p.stat().st_mtime < time.time() - 86400]
    for old in folders[KEEP:] + stale:
        remove_tree(old, ignore_errors=True)


def _link_tree(src: Path, dest: Path) -> None:
    """dest (absent or empty) made like src: folders made with src's modes, files hard-linked,
    symlinks made again."""
    dest.mkdir(parents=True, exist_ok=True)
    for here, dirs, files in walk(src):  # symlinks, to folders too, are among the files
        there = dest / here.relative_to(src)
        for name in dirs:
            (there / name).mkdir(mode=0o700)
            os.chmod(there / name, os.stat(here / name).st_mode & 0o7777)
        for name in files:
            path = here / name
            if path.is_symlink():
                os.symlink(os.readlink(path), there / name)
            else:
                os.link(path, there / name)
