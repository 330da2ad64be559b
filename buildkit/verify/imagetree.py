"""An image's own files, read without starting it, and ld.so's search run inside them.

`exported` saves the image from the engine (engine.save: an OCI archive) and applies its layers
into a temporary folder (the runtime base's from the kept copy of an earlier verification,
oci/keptlayers.py; oci/rootfs.py: whiteouts, and every path, symlinks included, resolved
inside that folder, so an absolute link such as /lib -> /usr/lib means the image's /usr/lib,
never the host's). Only what the checks read is written: the files under /app and every file
whose name holds ".so" (shared libraries, the dynamic linker); symlinks are all kept.

`resolve_in_tree` is elfdeps' ld.so order (DT_RPATH of the chain when there is no DT_RUNPATH,
LD_LIBRARY_PATH, DT_RUNPATH, the system folders of the target machine) with every folder an
image path, $ORIGIN the image folder of the object, and each hit an ELF file of the object's
class and machine.
"""

from __future__ import annotations

import posixpath
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from buildkit.core.errors import ImageSourceError
from buildkit.core.wholefile import scratch_dir
from buildkit.oci.imagesource import EngineImages, open_image
from buildkit.core.paths import cache_dir
from buildkit.core.treewalk import walk
from buildkit.oci.keptlayers import apply_kept
from buildkit.oci.rootfs import is_under, secure_join
from buildkit.verify.elfdeps import ElfError, ElfInfo, Resolution, Resolved, expand_origin, read_elf


@dataclass(frozen=True)
class ImageTree:
    """The image's files under root, and its config (the OCI image config document)."""
    root: Path
    config: dict[str, Any]

    def host(self, image_path: str) -> Path:
        """Where the image's path is in root, every symlink resolved inside root."""
        return secure_join(self.root, image_path.lstrip("/"))

    def image_path(self, host: Path) -> str:
        return "/" + Path(host).relative_to(self.root).as_posix()

    @property
    def env(self) -> dict[str, str]:
        pairs = ((self.config.get("config") or {}).get("Env") or [])
        return dict(p.split("=", 1) for p in pairs if isinstance(p, str) and "=" in p)

    @property
    def ld_library_path(self) -> list[str]:
        return [p for p in self.env.get("LD_LIBRARY_PATH", "").split(":") if p]

    @property
    def architecture(self) -> str:
        return str(self.config.get("architecture", ""))

    def files(self, image_dir: str) -> list[str]:
        """Image paths of the regular files (not symlinks) under image_dir, sorted."""
        top = self.host(image_dir)
        found = []
        for folder, _, names in walk(top):
            for name in names:
                path = folder / name
                if path.is_file() and not path.is_symlink():
                    found.append(self.image_path(path))
        return sorted(found)


def wanted(rel: str) -> bool:
    """Which of the image's files the checks read (see the module's docstring)."""
    return is_under(rel, ["app"]) or ".so" in posixpath.basename(rel)


@contextmanager
def exported(engine: EngineImages, image: str, platform: str, archive: Path | None = None) -> Iterator[ImageTree]:
    """The image's files in a temporary folder, removed afterwards; ImageSourceError/EngineError when unreadable.
    archive: the build's own OCI archive of that image, read instead of a `docker save` of it."""
    with ExitStack() as stack:
        spec = f"oci:{archive}" if archive is not None and Path(archive).is_file() else f"docker:{image}"
        opened = open_image(spec, stack, platform=platform, engine=engine)
        kept = kept_dir()
        try:  # beside the kept layers, so that hard links reach them (a /tmp of its own could not)
            kept.mkdir(parents=True, exist_ok=True)
            work: Path | None = kept
        except OSError:
            work = None
        if work is not None:  # a scratch root beside the kept layers: one a killed run left is swept by the next
            tmp = stack.enter_context(scratch_dir(work, "verify-root"))
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="buildkit-verify-root-")))
        applied = apply_kept(opened, tmp / "root", wanted, WANTED, kept, fresh=built_layers(opened.config))
        yield ImageTree(root=applied.root, config=opened.config)


WANTED = "verify-wanted-1"  # names `wanted` in the kept layers' key: change it when `wanted` changes


def kept_dir() -> Path:
    """Where the runtime base's layers, applied, are kept between verifications (oci/keptlayers.py)."""
    return cache_dir() / "verify" / "layers"


def built_layers(config: dict[str, Any]) -> int:
    """How many of the image's top layers the build made from its own output: from the first that copies
    into /app (templates/_runtime.j2) up. Every layer when the history does not say (nothing is kept)."""
    history = [h for h in config.get("history") or [] if isinstance(h, dict) and not h.get("empty_layer")]
    layers = len((config.get("rootfs") or {}).get("diff_ids") or [])
    if len(history) != layers:
        return layers
    for i, entry in enumerate(history):
        words = str(entry.get("created_by", "")).split("#", 1)[0].split()
        if words[:1] == ["COPY"] and len(words) > 2 and words[-1].startswith("/app/"):  # its destination
            return layers - i
    return layers


def _candidate(tree: ImageTree, folder: str, name: str, want: ElfInfo) -> tuple[Path, str] | None:
    """(host file, image path as opened) of folder/name when it is an ELF file like want."""
    opened = posixpath.join(folder, name)
    try:
        host = tree.host(opened)
    except ImageSourceError:  # a symlink loop: ld.so finds nothing there either
        return None
    if not host.is_file():
        return None
    try:
        info = read_elf(host)
    except ElfError:
        return None
    return (host, opened) if info.compatible(want) else None


def resolve_in_tree(tree: ImageTree, roots: list[str], ld_library_path: list[str],
                    system_dirs: tuple[str, ...]) -> Resolution:
    """Every library the roots (image paths of ELF files) need, directly or not, found in the image.

    Each Resolved's path is the image path ld.so would open (None: missing), needed_by the
    image path of the first object that needs it."""
    result = Resolution()
    queue: list[tuple[ElfInfo, str, tuple[str, ...]]] = []
    seen: set[str] = set()
    for root in roots:
        host = tree.host(root)
        queue.append((read_elf(host), root, ()))
        seen.add(str(host))
    while queue:
        obj, opened, inherited = queue.pop(0)
        origin_of = Path(opened)
        rpath = () if obj.runpath else tuple(expand_origin(p, origin_of) for p in obj.rpath) + inherited
        for name in obj.needed:
            if name in result.libraries:
                continue
            if "/" in name:
                dirs = [(posixpath.dirname(name) or "/", "path")]
                name_only = posixpath.basename(name)
            else:
                dirs = ([(p, "rpath") for p in rpath] + [(p, "LD_LIBRARY_PATH") for p in ld_library_path]
                        + [(expand_origin(p, origin_of), "runpath") for p in obj.runpath]
                        + [(p, "system") for p in system_dirs])
                name_only = name
            found = None
            for folder, via in dirs:
                hit = _candidate(tree, folder, name_only, obj)
                if hit is not None:
                    found = (hit, via)
                    break
            if found is None:
                result.libraries[name] = Resolved(name, None, opened, "-")
                continue
            (host, path), via = found
            result.libraries[name] = Resolved(name, Path(path), opened, via)
            if str(host) not in seen:
                seen.add(str(host))
                queue.append((read_elf(host), path, rpath))
    return result


__all__ = ["ImageTree", "exported", "resolve_in_tree", "wanted"]
