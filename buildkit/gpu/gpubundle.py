"""A compact bundle of an image's files for a GPU host without Docker (scripts/gpu_run.py).

`make_bundle` applies the image's layers into a scratch root (buildkit/oci/rootfs.py) and writes a
tar.xz holding only what must travel:

    manifest.json      the image (source, manifest digest, config digest, labels, layers) and every
                       file of the bundle: path, image path, type, size, sha256, mode, layer digest
    app/...            the image's /app (executables and llama.cpp's libraries, symlinks kept)
    cuda/lib64/...     optional: the image's CUDA runtime, libcudart alone (under 1 MB) or with
                       libcublas and libcublasLt (hundreds of MB: too much to carry, usually)
    extra/<path>       optional: further image paths asked for (e.g. usr/lib/x86_64-linux-gnu/libgomp.so.1)

The driver (libcuda.so*, libnvidia-*) never goes in: the NVIDIA container runtime takes it from the
host, and so does gpu_run. A symlink that points inside the bundle stays a (relative) link; one that
points elsewhere in the image is stored as the file it points to.

`open_bundle` unpacks a bundle (or takes an unpacked folder) and checks every file against the
manifest: sha256 and size of each file, target of each link, and nothing more, nothing less.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import os
import posixpath
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from buildkit.core.errors import ImageSourceError
from buildkit.core.platforms import DEFAULT_PLATFORM
from buildkit.core.wholefile import write_whole
from buildkit.core.treewalk import remove_tree, walk
from buildkit.oci.ocilayout import OciArchive
from buildkit.oci.rootfs import apply_layers, is_under, secure_join

BUNDLE_FORMAT = 1
MANIFEST = "manifest.json"
APP = "app"
CUDA_LIB = "usr/local/cuda/lib64"
CUDA_RUNTIME = ("libcudart.so*", "libcublas.so*", "libcublasLt.so*")
CUDA_CHOICES = {"none": (), "cudart": ("libcudart.so*",), "all": CUDA_RUNTIME}
DRIVER_LIBRARIES = ("libcuda.so*", "libcudadebugger.so*", "libnvidia-*", "libnvcuvid.so*")


def is_driver_library(name: str) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in DRIVER_LIBRARIES)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Section:
    image_dir: str  # relative to the image root
    bundle_dir: str  # relative to the bundle
    patterns: tuple[str, ...] = ("*",)  # file names taken (all files below image_dir for "*")


def sections(with_cuda: str | bool, extra: Sequence[str] = (), cuda_dir: str = CUDA_LIB) -> list[Section]:
    """What the bundle takes: /app, the CUDA runtime (none, cudart alone, or all of CUDA_RUNTIME), extra files."""
    named: dict[str | bool, str] = {True: "all", False: "none"}
    choice = named.get(with_cuda, with_cuda)
    if not isinstance(choice, str) or choice not in CUDA_CHOICES:
        raise ImageSourceError(f"with_cuda: one of {', '.join(CUDA_CHOICES)}, not {with_cuda!r}")
    out = [Section(APP, APP)]
    if CUDA_CHOICES[choice]:
        out.append(Section(cuda_dir.strip("/"), "cuda/lib64", CUDA_CHOICES[choice]))
    for path in extra:
        rel = path.strip("/")
        out.append(Section(posixpath.dirname(rel), f"extra/{posixpath.dirname(rel)}".rstrip("/"),
                           (posixpath.basename(rel),)))
    return out


def _collect(root: Path, section: Section) -> list[tuple[str, Path]]:
    """(path relative to section.image_dir, file in the root) for every entry the section takes."""
    base = secure_join(root, section.image_dir)
    if not base.is_dir():
        return []
    found = []
    for dirpath, dirnames, others in walk(base):  # symlinks, to folders too, are among the others
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, base)
        if section.patterns != ("*",) and rel_dir != ".":
            continue  # named files: only the folder itself, not stubs/ and the like
        for name in sorted(others):
            if not any(fnmatch.fnmatch(name, p) for p in section.patterns) or is_driver_library(name):
                continue
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            found.append((rel, Path(dirpath) / name))
    return found


def make_bundle(archive_path: Path, out: Path, *, platform: str = DEFAULT_PLATFORM, with_cuda: str | bool = "none",
                extra: Sequence[str] = (), cuda_dir: str = CUDA_LIB, xz_preset: int = 6,
                scratch: Path | None = None, log: Callable[[str], None] = lambda msg: None) -> dict[str, Any]:
    """Write the bundle of the image in an OCI archive or layout to `out` (tar.xz); returns its manifest."""
    secs = sections(with_cuda, extra, cuda_dir)
    prefixes = [s.image_dir for s in secs]
    with OciArchive(Path(archive_path)) as archive, \
            tempfile.TemporaryDirectory(prefix="gpu-bundle-", dir=scratch) as tmp:
        image = archive.image(platform)
        log(f"image {image.manifest_digest}: {len(image.layers)} layers "
            f"({sum(d.size for d in image.layers) / 1e6:.1f} MB compressed)")
        applied = apply_layers(image, Path(tmp) / "root", include=lambda rel: is_under(rel, prefixes))
        root = applied.root
        entries: list[dict[str, Any]] = []
        members: list[tuple[str, Path | None, dict[str, Any]]] = []
        for sec in secs:
            taken = _collect(root, sec)
            if not taken and sec.image_dir == APP:
                raise ImageSourceError(f"{archive_path}: the image has no /app; not a buildkit image")
            if not taken:
                raise ImageSourceError(f"{archive_path}: nothing in the image matches /{sec.image_dir}/"
                                       f"{'|'.join(sec.patterns)}")
            in_bundle = {rel for rel, _ in taken}
            for rel, src in taken:
                bundle_path = f"{sec.bundle_dir}/{rel}"
                image_rel = f"{sec.image_dir}/{rel}"
                entry: dict[str, Any] = {"path": bundle_path, "image_path": "/" + image_rel,
                                         "layer": applied.origin.get(image_rel)}
                if src.is_symlink():
                    resolved = secure_join(root, image_rel)
                    try:
                        inside = resolved.relative_to(secure_join(root, sec.image_dir)).as_posix()
                    except ValueError:
                        inside = None
                    if inside in in_bundle and not Path(resolved).is_symlink():
                        link = posixpath.relpath(inside, posixpath.dirname(rel) or ".")
                        entry.update(type="symlink", target=link)
                        members.append((bundle_path, None, entry))
                        entries.append(entry)
                        continue
                    if not resolved.is_file():
                        raise ImageSourceError(f"/{image_rel} is a link to {os.readlink(src)!r}, not a file")
                    src = resolved
                    entry["dereferenced"] = os.readlink(Path(root) / image_rel)
                entry.update(type="file", size=src.stat().st_size, sha256=sha256_file(src),
                             mode=stat.S_IMODE(src.stat().st_mode))
                members.append((bundle_path, src, entry))
                entries.append(entry)
        manifest = {
            "bundle_format": BUNDLE_FORMAT,
            "image": {"source": str(archive_path), "platform": platform, "manifest_digest": image.manifest_digest,
                      "config_digest": image.config_digest, "labels": image.labels,
                      "layers": [d.digest for d in image.layers]},
            "sections": [s.bundle_dir for s in secs],
            "files": entries,
        }
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        body = json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n"
        # xz_preset is an int 0-9; typeshed asks for a literal
        xz = tarfile.open(partial, "w:xz", preset=xz_preset, format=tarfile.PAX_FORMAT)  # type: ignore[call-overload]
        with xz as tar:
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mode, info.mtime = len(body), 0o644, 0
            tar.addfile(info, io.BytesIO(body))
            for name, member_src, entry in members:
                info = tarfile.TarInfo(name)
                info.mtime = 0
                if member_src is None:
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry["target"], 0o777
                    tar.addfile(info)
                else:
                    info.size, info.mode = entry["size"], entry["mode"]
                    with open(member_src, "rb") as fh:
                        tar.addfile(info, fh)
        partial.replace(out)
        sidecar = out.with_name(out.name + ".manifest.json")
        write_whole(sidecar, body)
        return manifest


def verify_tree(folder: Path, manifest: dict[str, Any]) -> None:
    """Every file of the manifest is in folder, byte for byte, and nothing else is."""
    folder = Path(folder)
    listed = {e["path"]: e for e in manifest.get("files") or []}
    problems = []
    for path, entry in listed.items():
        here = folder / path
        if entry["type"] == "symlink":
            if not here.is_symlink() or os.readlink(here) != entry["target"]:
                problems.append(f"{path}: not the link to {entry['target']}")
        elif not here.is_file() or here.is_symlink():
            problems.append(f"{path}: missing")
        elif here.stat().st_size != entry["size"] or sha256_file(here) != entry["sha256"]:
            problems.append(f"{path}: sha256 differs from the manifest")
    for dirpath, _, others in walk(folder):  # symlinks, to folders too, are among the others
        for name in others:
            rel = os.path.relpath(os.path.join(dirpath, name), folder)
            if rel != MANIFEST and rel not in listed:
                problems.append(f"{rel}: not in the manifest")
    if problems:
        raise ImageSourceError(f"{folder}: the bundle does not match its manifest: " + "; ".join(problems[:5])
                               + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""))


def open_bundle(bundle: Path, dest: Path) -> tuple[Path, dict[str, Any]]:
    """The bundle's folder (unpacked into dest/bundle from a tar.xz, or the folder given) and its manifest,
    verified."""
    bundle = Path(bundle)
    if bundle.is_dir():
        folder = bundle
    else:
        folder = Path(dest) / "bundle"
        remove_tree(folder)
        folder.mkdir(parents=True)
        try:
            with tarfile.open(bundle, "r:*") as tar:
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(folder, filter="data")
                else:  # Python < 3.12: refuse by hand what the data filter refuses
                    for m in tar.getmembers():
                        parts = m.name.split("/")
                        if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.issym() or m.isdir()):
                            raise ImageSourceError(f"{bundle}: entry {m.name!r} refused")
                        if m.issym() and (m.linkname.startswith("/") or
                                          posixpath.normpath(posixpath.join(posixpath.dirname(m.name), m.linkname))
                                          .startswith("..")):
                            raise ImageSourceError(f"{bundle}: link {m.name!r} -> {m.linkname!r} leaves the bundle")
                    tar.extractall(folder)
        except (tarfile.TarError, OSError) as exc:
            raise ImageSourceError(f"{bundle}: cannot unpack ({exc})") from None
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise ImageSourceError(f"{folder}: no readable {MANIFEST} ({exc})") from None
    if manifest.get("bundle_format") != BUNDLE_FORMAT:
        raise ImageSourceError(f"{folder}: bundle format {manifest.get('bundle_format')!r}, "
                               f"this script reads {BUNDLE_FORMAT}")
    verify_tree(folder, manifest)
    return folder, manifest


__all__ = ["BUNDLE_FORMAT", "CUDA_CHOICES", "CUDA_RUNTIME", "DRIVER_LIBRARIES", "is_driver_library", "make_bundle",
           "open_bundle",
           "sections", "sha256_file", "verify_tree"]
