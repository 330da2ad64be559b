"""An image's layers applied, in order, into a folder: the image's root file system, without an engine.

OCI layer semantics: `.wh.NAME` deletes NAME of the layers below, `.wh..wh..opq` in a folder
hides everything the layers below put in it, a later entry replaces an earlier one. Symlinks are
kept as they are (an absolute target means the image's root, not the host's); every path is
resolved inside the root, symlinks included, the way a container runtime joins paths, so no entry
can write outside it. An entry whose name or hardlink target climbs out (`..`) or is absolute
is refused: the whole extraction stops with ImageSourceError, naming the layer and the entry.

`apply_layers` records, for each file left in the root, the digest of the layer it came from.
Device nodes and FIFOs are skipped; owners are not applied (the root is for reading files out).
"""

from __future__ import annotations

import os
import posixpath
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from buildkit.core.errors import BuildkitError, ImageSourceError
from buildkit.core.treewalk import remove_tree

if TYPE_CHECKING:
    from buildkit.oci.ocilayout import Descriptor, Image

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
MAX_LINKS = 40  # symlinks followed in one path, as the kernel's limit


@dataclass
class Applied:
    root: Path
    origin: dict[str, str] = field(default_factory=dict)  # "app/lib/x.so" -> layer digest
    skipped: set[str] = field(default_factory=set)  # device nodes, FIFOs, filtered-out files


def clean_name(name: str, layer: str) -> str:
    """A member name as a relative path inside the root; refuses names that climb out."""
    raw = name
    while name.startswith("./"):
        name = name[2:]
    if name.startswith("/"):
        raise ImageSourceError(f"layer {layer[:19]}: entry {raw!r} is an absolute path; refused")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ImageSourceError(f"layer {layer[:19]}: entry {raw!r} climbs out of the root (..); refused")
    return "/".join(parts)


def secure_join(root: Path, rel: str) -> Path:
    """root/rel with every symlink on the way resolved inside root (.. stops at root), as chroot would."""
    root = Path(root)
    done: list[str] = []
    todo = [p for p in rel.split("/") if p not in ("", ".")]
    links = 0
    while todo:
        part = todo.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        here = root.joinpath(*done, part)
        if here.is_symlink():
            links += 1
            if links > MAX_LINKS:
                raise ImageSourceError(f"{rel}: too many levels of symbolic links")
            target = os.readlink(here)
            if target.startswith("/"):
                done = []
            todo = [p for p in target.split("/") if p not in ("", ".")] + todo
            continue
        done.append(part)
    return root.joinpath(*done)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        remove_tree(path)
    elif path.exists():
        path.unlink()


def _forget(origin: dict[str, str], rel: str) -> None:
    prefix = rel + "/"
    for key in [k for k in origin if k == rel or k.startswith(prefix)]:
        del origin[key]


def open_layer(fh: IO[bytes], media_type: str, digest: str) -> tarfile.TarFile:
    """A layer blob as a tar stream (gzip, uncompressed; zstd through the `zstd` program)."""
    if "zstd" in media_type:
        if shutil.which("zstd") is None:
            raise ImageSourceError(f"layer {digest[:19]} is zstd-compressed and no `zstd` program is installed")
        proc = subprocess.Popen(["zstd", "-dc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        stdin = proc.stdin
        assert stdin is not None  # a pipe

        def feed() -> None:
            try:
                shutil.copyfileobj(fh, stdin, 1 << 20)
            except (OSError, BuildkitError):  # a blob that is not what its digest says: its reader raises it again
                pass
            finally:
                stdin.close()

        threading.Thread(target=feed, daemon=True).start()
        return tarfile.open(fileobj=proc.stdout, mode="r|")
    return tarfile.open(fileobj=fh, mode="r|*")


def apply_layer(tar: tarfile.TarFile, applied: Applied, digest: str,
                include: Callable[[str], bool] = lambda rel: True) -> None:
    root = applied.root
    written: set[str] = set()  # entries of this layer: an opaque marker leaves them alone
    for member in tar:
        rel = clean_name(member.name, digest)
        if not rel:
            continue
        parent_rel, _, base = rel.rpartition("/")
        if base == OPAQUE:
            folder = secure_join(root, parent_rel)
            if folder.is_dir() and not folder.is_symlink():
                for child in folder.iterdir():
                    child_rel = f"{parent_rel}/{child.name}" if parent_rel else child.name
                    if child_rel not in written:
                        _remove(child)
                        _forget(applied.origin, child_rel)
            continue
        if base.startswith(WHITEOUT):
            gone_rel = (f"{parent_rel}/" if parent_rel else "") + base[len(WHITEOUT):]
            gone = secure_join(root, parent_rel) / base[len(WHITEOUT):]
            if gone.is_symlink() or gone.exists():
                _remove(gone)
            _forget(applied.origin, gone_rel)
            continue
        written.add(rel)
        parent = secure_join(root, parent_rel)
        target = parent / base
        if member.isdir():
            if target.is_dir() and not target.is_symlink():
                os.chmod(target, (member.mode & 0o7777) | 0o700)
                continue
            if target.is_symlink() or target.exists():
                _remove(target)
                _forget(applied.origin, rel)
            parent.mkdir(parents=True, exist_ok=True)
            target.mkdir(mode=0o700)
            os.chmod(target, (member.mode & 0o7777) | 0o700)
            continue
        if not (member.isfile() or member.issym() or member.islnk()):
            applied.skipped.add(rel)
            continue
        if (member.isfile() or member.islnk()) and not include(rel):
            applied.skipped.add(rel)
            if target.is_symlink() or target.exists():
                _remove(target)
            _forget(applied.origin, rel)
            continue
        source = None
        if member.islnk():
            link_rel = clean_name(member.linkname, digest)
            source = secure_join(root, link_rel)
            if link_rel in applied.skipped and not (source.is_symlink() or source.exists()):
                applied.skipped.add(rel)  # a link to a file left out is left out too
                continue
            if not (source.is_symlink() or source.is_file()):
                raise ImageSourceError(f"layer {digest[:19]}: hardlink {rel!r} -> {member.linkname!r}: "
                                       f"no such file in the root")
        if target.is_symlink() or target.exists():
            _remove(target)
            _forget(applied.origin, rel)
        parent.mkdir(parents=True, exist_ok=True)
        if member.issym():
            os.symlink(member.linkname, target)
        elif member.islnk():
            assert source is not None  # set above for a hardlink
            os.link(source, target, follow_symlinks=False)
        else:
            src = tar.extractfile(member)
            assert src is not None  # a regular file
            with open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            os.chmod(target, member.mode & 0o7777)
        applied.origin[rel] = digest


def apply_layers(image: Image, root: Path, include: Callable[[str], bool] = lambda rel: True,
                 layers: Iterable[Descriptor] | None = None) -> Applied:
    """Apply the image's layers (an ocilayout.Image) in order into root (created, must be empty)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise ImageSourceError(f"{root}: not empty; the image's root needs a new folder")
    applied = Applied(root=root)
    apply_more(image, applied, layers if layers is not None else image.layers, include)
    return applied


def apply_more(image: Image, applied: Applied, layers: Iterable[Descriptor],
               include: Callable[[str], bool] = lambda rel: True) -> None:
    """Apply more of the image's layers, in order, on top of what applied holds."""
    for desc in layers:
        with image.open_blob(desc.digest) as fh:
            try:
                with open_layer(fh, desc.media_type, desc.digest) as tar:
                    apply_layer(tar, applied, desc.digest, include)
            except tarfile.TarError as exc:
                raise ImageSourceError(f"layer {desc.digest[:19]}: not a readable tar ({exc})") from None


def is_under(rel: str, prefixes: Iterable[str]) -> bool:
    rel = posixpath.normpath(rel)
    return any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in prefixes)


__all__ = ["Applied", "apply_layer", "apply_layers", "clean_name", "is_under", "open_layer", "secure_join"]
