"""Compare two images: manifest digest first, then config fields, then layer by layer, file by file.

Same manifest digest means the same image, bit for bit. Otherwise the report says what differs:
config fields (a label, a `created` time, a diff id), which layers differ (with the Dockerfile
step that made each one), and inside a differing pair of layers every file whose content or
metadata differs (path, size, sha256; mode, owner, mtime or link target). For an ELF file whose
content differs it also names the ELF sections that differ, so a CUDA fat binary (`.nv_fatbin`)
is told apart from ordinary code. A user sees at once whether it is a timestamp, a compiler or
a real change.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import struct
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import IO, Any

from buildkit.core.errors import ImageSourceError
from buildkit.oci.ocilayout import Descriptor, Image

MAX_ELF_BYTES = 1 << 30  # ELF files larger than this are not compared section by section


@dataclass(frozen=True)
class FileEntry:
    path: str
    kind: str  # file, dir, symlink, hardlink, other
    size: int
    sha256: str  # "" unless kind == file
    mode: int
    uid: int
    gid: int
    mtime: int
    link: str = ""

    def meta(self) -> tuple[str, int, int, int, int, str]:
        return (self.kind, self.mode, self.uid, self.gid, self.mtime, self.link)


@dataclass
class FileDiff:
    path: str
    change: str  # added, removed, content, metadata
    a: FileEntry | None
    b: FileEntry | None
    details: list[str] = field(default_factory=list)  # what in the metadata differs; ELF sections that differ

    def line(self) -> str:
        def side(e: FileEntry | None) -> str:
            if e is None:
                return "-"
            if e.kind == "file":
                return f"{e.size} sha256:{e.sha256[:12]}"
            return f"{e.kind}{' -> ' + e.link if e.link else ''}"
        extra = f"  [{'; '.join(self.details)}]" if self.details else ""
        return f"{self.change:<8} {self.path}  {side(self.a)}  vs  {side(self.b)}{extra}"


@dataclass
class LayerDiff:
    index: int
    a: Descriptor | None
    b: Descriptor | None
    created_by: str
    files: list[FileDiff] = field(default_factory=list)
    note: str = ""

    def title(self) -> str:
        def side(d: Descriptor | None) -> str:
            return f"{d.digest[:19]} ({d.size} bytes)" if d else "none"
        step = f" {self.created_by}" if self.created_by else ""
        return f"layer {self.index + 1}{step}: {side(self.a)} vs {side(self.b)}"


@dataclass
class ImageDiff:
    a: str
    b: str
    a_digest: str
    b_digest: str
    layers_total: int = 0
    config: list[tuple[str, object, object]] = field(default_factory=list)
    layers: list[LayerDiff] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return self.a_digest == self.b_digest

    def differing_paths(self) -> list[str]:
        return [f.path for layer in self.layers for f in layer.files]

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a, "b": self.b, "a_digest": self.a_digest, "b_digest": self.b_digest, "same": self.same,
            "config": [{"field": k, "a": va, "b": vb} for k, va, vb in self.config],
            "layers": [{"index": layer.index, "created_by": layer.created_by, "note": layer.note,
                        "a": asdict(layer.a) if layer.a else None, "b": asdict(layer.b) if layer.b else None,
                        "files": [{"path": f.path, "change": f.change, "details": f.details,
                                   "a": asdict(f.a) if f.a else None, "b": asdict(f.b) if f.b else None}
                                  for f in layer.files]}
                       for layer in self.layers],
        }

    def report(self, max_files: int = 200) -> str:
        lines = [f"A: {self.a}  manifest {self.a_digest}", f"B: {self.b}  manifest {self.b_digest}"]
        if self.same:
            lines.append("same manifest digest: the images are identical")
            return "\n".join(lines)
        lines.append(f"different: {len(self.layers)} of {self.layers_total} layers differ, "
                     f"{len(self.config)} config fields differ")
        for key, va, vb in self.config:
            lines.append(f"config {key}: {_short(va)}  vs  {_short(vb)}")
        for layer in self.layers:
            lines.append(layer.title())
            if layer.note:
                lines.append(f"  {layer.note}")
            for f in layer.files[:max_files]:
                lines.append(f"  {f.line()}")
            if len(layer.files) > max_files:
                lines.append(f"  ... and {len(layer.files) - max_files} more files")
        return "\n".join(lines)


def _short(value: object, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# --------------------------------------------------------------------------- layers

def _decompressed(fh: IO[bytes], media_type: str) -> IO[bytes]:
    if media_type.endswith("+zstd") or media_type.endswith(".zstd"):
        try:
            import zstandard
        except ImportError:
            raise ImageSourceError("a layer is zstd-compressed; install the zstandard package to compare it") from None
        reader: IO[bytes] = zstandard.ZstdDecompressor().stream_reader(fh)
        return reader
    head = fh.peek(2)[:2] if hasattr(fh, "peek") else b""
    if media_type.endswith("gzip") or head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh)  # type: ignore[return-value]  # a binary file; typeshed: no IO[bytes]
    return fh


def _kind(member: tarfile.TarInfo) -> str:
    if member.isreg():
        return "file"
    if member.isdir():
        return "dir"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    return "other"


def iter_layer(image: Image, layer: Descriptor,
               want: set[str] | None = None) -> Iterator[tuple[FileEntry, bytes | None]]:
    """Every entry of a layer as a FileEntry; with `want`, also the bytes of those paths."""
    with image.open_blob(layer.digest) as raw:
        # any binary file does for BufferedReader; typeshed asks for a raw stream
        buffered = raw if hasattr(raw, "peek") else io.BufferedReader(raw)  # type: ignore[type-var]
        stream = _decompressed(buffered, layer.media_type)
        try:
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                for member in tar:
                    path = "/" + member.name.lstrip("./").rstrip("/") if member.name not in (".", "./") else "/"
                    data = None
                    digest = ""
                    if member.isreg():
                        fh = tar.extractfile(member)
                        h = hashlib.sha256()
                        keep = want is not None and path in want and member.size <= MAX_ELF_BYTES
                        chunks = []
                        assert fh is not None
                        while chunk := fh.read(1 << 20):
                            h.update(chunk)
                            if keep:
                                chunks.append(chunk)
                        digest = h.hexdigest()
                        data = b"".join(chunks) if keep else None
                    yield (FileEntry(path=path, kind=_kind(member), size=member.size if member.isreg() else 0,
                                     sha256=digest, mode=member.mode, uid=member.uid, gid=member.gid,
                                     mtime=int(member.mtime), link=member.linkname or ""), data)
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise ImageSourceError(f"{image.source}: layer {layer.digest[:19]} cannot be read: {exc}") from None


def layer_files(image: Image, layer: Descriptor) -> dict[str, FileEntry]:
    return {entry.path: entry for entry, _ in iter_layer(image, layer)}


def _meta_details(a: FileEntry, b: FileEntry) -> list[str]:
    out = []
    for name in ("kind", "mode", "uid", "gid", "mtime", "link"):
        va, vb = getattr(a, name), getattr(b, name)
        if va != vb:
            out.append(f"{name} {oct(va) if name == 'mode' else va} vs {oct(vb) if name == 'mode' else vb}")
    return out


def elf_sections(data: bytes) -> dict[str, str] | None:
    """sha256 of every ELF section's bytes, None when data is not ELF."""
    if not data.startswith(b"\x7fELF"):
        return None
    from elftools.common.exceptions import ELFError
    from elftools.construct import ConstructError
    from elftools.elf.elffile import ELFFile

    try:
        elf = ELFFile(io.BytesIO(data))
        out = {}
        for section in elf.iter_sections():
            if section["sh_type"] == "SHT_NOBITS":
                continue
            out[section.name or f"#{section['sh_offset']}"] = hashlib.sha256(section.data()).hexdigest()
        return out
    except (ELFError, ConstructError, ValueError, KeyError, IndexError, struct.error):
        # a file that starts like ELF but does not parse: not compared by section
        return None


def elf_section_diff(a: bytes, b: bytes) -> list[str] | None:
    sa, sb = elf_sections(a), elf_sections(b)
    if sa is None or sb is None:
        return None
    return sorted(name for name in set(sa) | set(sb) if sa.get(name) != sb.get(name))


def diff_layer(a_img: Image, a: Descriptor, b_img: Image, b: Descriptor) -> tuple[list[FileDiff], str]:
    fa, fb = layer_files(a_img, a), layer_files(b_img, b)
    diffs: list[FileDiff] = []
    for path in sorted(set(fa) | set(fb)):
        ea, eb = fa.get(path), fb.get(path)
        if ea is None:
            diffs.append(FileDiff(path, "added", None, eb))
        elif eb is None:
            diffs.append(FileDiff(path, "removed", ea, None))
        elif (ea.sha256, ea.size) != (eb.sha256, eb.size):
            diffs.append(FileDiff(path, "content", ea, eb, _meta_details(ea, eb)))
        elif ea.meta() != eb.meta():
            diffs.append(FileDiff(path, "metadata", ea, eb, _meta_details(ea, eb)))
    content = {d.path for d in diffs if d.change == "content" and d.a and d.a.kind == "file"}
    if content:
        da = {e.path: data for e, data in iter_layer(a_img, a, content) if data is not None}
        db = {e.path: data for e, data in iter_layer(b_img, b, content) if data is not None}
        for d in diffs:
            if d.path in da and d.path in db:
                sections = elf_section_diff(da[d.path], db[d.path])
                if sections is not None:
                    d.details.append("ELF sections differ: " + (", ".join(sections) or "none (headers only)"))
    note = ""
    if not diffs:
        ua, ub = _uncompressed_digest(a_img, a), _uncompressed_digest(b_img, b)
        note = ("same files and metadata; only the compressed bytes differ (compression)" if ua == ub else
                "same files and metadata; the tar streams differ (entry order or tar headers)")
    return diffs, note


def _uncompressed_digest(image: Image, layer: Descriptor) -> str:
    with image.open_blob(layer.digest) as raw:
        # any binary file does for BufferedReader; typeshed asks for a raw stream
        buffered = raw if hasattr(raw, "peek") else io.BufferedReader(raw)  # type: ignore[type-var]
        stream = _decompressed(buffered, layer.media_type)
        h = hashlib.sha256()
        while chunk := stream.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


# --------------------------------------------------------------------------- config

def _flatten(value: object, prefix: str = "") -> Iterable[tuple[str, object]]:
    if isinstance(value, dict):
        for key in sorted(value):
            yield from _flatten(value[key], f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list) and prefix.endswith(("history", "diff_ids")):
        for i, item in enumerate(value):
            yield from _flatten(item, f"{prefix}[{i}]")
    else:
        yield prefix, value


def config_diff(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, object, object]]:
    fa, fb = dict(_flatten(a)), dict(_flatten(b))
    return [(key, fa.get(key), fb.get(key)) for key in sorted(set(fa) | set(fb)) if fa.get(key) != fb.get(key)]


# --------------------------------------------------------------------------- images

def diff_images(a: Image, b: Image, *, files: bool = True) -> ImageDiff:
    result = ImageDiff(a=a.source, b=b.source, a_digest=a.manifest_digest, b_digest=b.manifest_digest,
                       layers_total=max(len(a.layers), len(b.layers)))
    if result.same:
        return result
    result.config = config_diff(a.config, b.config)
    history_a, history_b = a.history, b.history
    for i in range(result.layers_total):
        la = a.layers[i] if i < len(a.layers) else None
        lb = b.layers[i] if i < len(b.layers) else None
        if la is not None and lb is not None and la.digest == lb.digest:
            continue
        entry = history_a[i] if i < len(history_a) else history_b[i] if i < len(history_b) else {}
        step = entry.get("created_by", "")
        layer = LayerDiff(index=i, a=la, b=lb, created_by=_step(step))
        if files and la is not None and lb is not None:
            layer.files, layer.note = diff_layer(a, la, b, lb)
        elif files:
            only, which = (la, a) if la is not None else (lb, b)
            assert only is not None
            change = "removed" if la is not None else "added"
            layer.files = [FileDiff(e.path, change, e if la is not None else None, e if lb is not None else None)
                           for e in layer_files(which, only).values()]
        result.layers.append(layer)
    return result


def _step(created_by: str, limit: int = 100) -> str:
    text = " ".join(created_by.replace("|", " ").split())
    for prefix in ("/bin/sh -c #(nop) ", "/bin/sh -c ", "RUN /bin/sh -c "):
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text.removesuffix(" # buildkit")
    return ("(" + (text if len(text) <= limit else text[:limit - 3] + "...") + ")") if text else ""
