"""A real Python package index on loopback: PEP 691 JSON or PEP 503 HTML project pages, PEP 658
METADATA files, the files themselves; it counts every request by path.

Also makes small real wheels (zip files with a .dist-info/METADATA) shaped like NVIDIA's: the
``cuda-toolkit`` meta package with Requires-Dist pins per extra, and component wheels holding
``nvidia/cu13/...`` files (a bin/nvcc, an include/cuda.h with driver entry points), so a CUDA root
can be laid out from them.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import os
import threading
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
MARKER = ("(sys_platform == 'linux' and platform_machine == 'aarch64' or sys_platform == 'linux' and "
          "platform_machine == 'x86_64')")


def make_wheel(name: str, version: str, tag: str, files: dict[str, bytes],
               requires: tuple[str, ...] | list[str] = ()) -> tuple[str, bytes, bytes]:
    """(filename, wheel bytes, METADATA bytes) of a wheel with `files` (path -> content) and Requires-Dist lines."""
    dist = f"{name.replace('-', '_')}-{version}"
    metadata = "\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                          *(f"Requires-Dist: {r}" for r in requires)]).encode() + b"\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, content in sorted(files.items()):
            info = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if "/bin/" in path else 0o644) << 16
            z.writestr(info, content)
        z.writestr(f"{dist}.dist-info/METADATA", metadata)
        z.writestr(f"{dist}.dist-info/WHEEL", f"Wheel-Version: 1.0\nTag: {tag}\n")
    return f"{dist}-{tag}.whl", buf.getvalue(), metadata


def bomb_wheel(name: str, version: str, tag: str, members: int, member_bytes: int) -> tuple[str, bytes, bytes]:
    """(filename, wheel bytes, METADATA bytes) of a zip bomb shaped like a CUDA wheel: `members` members under
    nvidia/cu13/lib/, each `member_bytes` of zeros (one deflate stream, reused: 70 x 64 MiB is 4.4 MB of wheel),
    written by hand (zipfile would compress each again)."""
    import struct
    import zlib

    zeros = bytes(member_bytes)
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
    data, crc = squeeze.compress(zeros) + squeeze.flush(), zlib.crc32(zeros)
    dist = f"{name.replace('-', '_')}-{version}"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    entries = [(f"nvidia/cu13/lib/libbomb{i}.so.1".encode(), 8, crc, data, member_bytes) for i in range(members)]
    entries += [(f"{dist}.dist-info/{n}".encode(), 0, zlib.crc32(b), b, len(b))
                for n, b in (("METADATA", metadata), ("WHEEL", f"Wheel-Version: 1.0\nTag: {tag}\n".encode()))]
    out, central = io.BytesIO(), []
    for fname, method, crc32, body, size in entries:
        offset = out.tell()
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc32, len(body), size,
                              len(fname), 0))
        out.write(fname + body)
        central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0x21, crc32, len(body), size,
                                   len(fname), 0, 0, 0, 0, 0o644 << 16, offset) + fname)
    start, directory = out.tell(), b"".join(central)
    count = len(entries)
    out.write(directory + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(directory), start, 0))
    return f"{dist}-{tag}.whl", out.getvalue(), metadata


def toolkit_wheel(version: str, pins: dict[str, tuple[str, str]]) -> tuple[str, bytes, bytes]:
    """cuda-toolkit `version` whose extras pin {extra: (package, ==spec)} as NVIDIA's METADATA does,
    with an 'all' extra listing everything (which buildkit must not take as its own)."""
    requires = [f"{pkg}{spec}; {MARKER} and extra == 'all'" for pkg, spec in pins.values()]
    requires += [f"{pkg}{spec}; {MARKER} and extra == '{extra}'" for extra, (pkg, spec) in pins.items()]
    requires.append(f"nvidia-cuda-nvrtc=={version}.*; {MARKER} and extra == 'cublas'")
    return make_wheel("cuda-toolkit", version, "py2.py3-none-any", {}, requires)


def component_files(package: str) -> dict[str, bytes]:
    """What a component wheel holds for a CUDA root (enough for cudaroot's checks and the stub)."""
    base = "nvidia/cu13/"
    return {
        "nvidia-cuda-nvcc": {base + "bin/nvcc": b"#!/bin/sh\necho fake nvcc\n"},
        "nvidia-cuda-runtime": {base + "include/cuda.h": b"CUresult CUDAAPI cuInit(unsigned int Flags);\n"
                                                         b"CUresult CUDAAPI cuDriverGetVersion(int *v);\n",
                                base + "lib/libcudart.so.13": b"\x7fELF fake cudart"},
        "nvidia-cublas": {base + "lib/libcublas.so.13": b"\x7fELF fake cublas"},
    }.get(package, {base + f"include/{package}.h": package.encode()})


@dataclass
class IndexFile:
    project: str
    filename: str
    body: bytes
    metadata: bytes | None  # served as <file>.metadata (PEP 658) when given


@dataclass
class PackageIndexServer:
    """Serves `files` under /simple/<project>/ (json: PEP 691 when asked for; else PEP 503 HTML) and /files/."""

    json: bool = True
    files: list[IndexFile] = field(default_factory=list)
    requests: Counter = field(default_factory=Counter)
    basic_auth: str | None = None  # "user:secret": every request without it is answered 401

    def add(self, project: str, made: tuple[str, bytes, bytes], *, metadata: bool = True) -> str:
        filename, body, meta = made
        self.files.append(IndexFile(project, filename, body, meta if metadata else None))
        return hashlib.sha256(body).hexdigest()

    def wheel_requests(self) -> dict[str, int]:
        return {p: n for p, n in self.requests.items() if p.endswith(".whl")}

    def page(self, project: str, as_json: bool) -> tuple[bytes, str]:
        mine = [f for f in self.files if f.project == project]
        if as_json:
            doc = {"meta": {"api-version": "1.1"}, "name": project, "files": [
                {"filename": f.filename, "url": f"../../files/{f.filename}", "size": len(f.body),
                 "hashes": {"sha256": hashlib.sha256(f.body).hexdigest()}, "yanked": False,
                 "core-metadata": {"sha256": hashlib.sha256(f.metadata).hexdigest()} if f.metadata else False}
                for f in mine]}
            return json.dumps(doc).encode(), JSON_TYPE
        links = "".join(
            f'<a href="../../files/{html.escape(f.filename)}#sha256={hashlib.sha256(f.body).hexdigest()}"'
            + (f' data-core-metadata="sha256={hashlib.sha256(f.metadata).hexdigest()}"' if f.metadata else "")
            + f">{html.escape(f.filename)}</a>\n" for f in mine)
        return f"<!DOCTYPE html><html><body>\n{links}</body></html>".encode(), "text/html"

    def __enter__(self) -> PackageIndexServer:
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                index.requests[self.path] += 1
                if index.basic_auth is not None:
                    import base64

                    expected = "Basic " + base64.b64encode(index.basic_auth.encode()).decode()
                    if self.headers.get("Authorization") != expected:
                        self.send_error(401)
                        return
                parts = self.path.split("?")[0].strip("/").split("/")
                body, ctype = None, "application/octet-stream"
                if len(parts) == 2 and parts[0] == "simple":
                    if any(f.project == parts[1] for f in index.files):
                        body, ctype = index.page(parts[1], index.json and JSON_TYPE in self.headers.get("Accept", ""))
                elif len(parts) == 2 and parts[0] == "files":
                    for f in index.files:
                        if parts[1] == f.filename:
                            body = f.body
                        elif parts[1] == f.filename + ".metadata" and f.metadata:
                            body = f.metadata
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/simple"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


#: the extras buildkit takes from cuda-toolkit, and the component of each
EXTRAS = {"nvcc": "nvidia-cuda-nvcc", "cudart": "nvidia-cuda-runtime", "cccl": "nvidia-cuda-cccl",
          "crt": "nvidia-cuda-crt", "nvvm": "nvidia-nvvm", "culibos": "nvidia-cuda-culibos",
          "cuobjdump": "nvidia-cuda-cuobjdump", "cublas": "nvidia-cublas"}


def nvidia_index(server: PackageIndexServer, releases: dict[str, str], *, toolkit_metadata: bool = True) -> dict:
    """Fill `server` with cuda-toolkit releases {toolkit version: component version} and their component
    wheels for x86_64 and aarch64. Returns {(package, arch, component version): sha256}."""
    shas: dict = {}
    for toolkit, component in releases.items():
        pins = {extra: (pkg, f"=={component}.*") for extra, pkg in EXTRAS.items()}
        server.add("cuda-toolkit", toolkit_wheel(toolkit, pins), metadata=toolkit_metadata)
        for pkg in EXTRAS.values():
            for arch in ("x86_64", "aarch64"):
                tag = f"py3-none-manylinux2014_{arch}.manylinux_2_17_{arch}"
                shas[pkg, arch, component] = server.add(pkg, make_wheel(pkg, component, tag, component_files(pkg)))
    return shas


class ProxyIndex:
    """A loopback index in front of PyPI: its PEP 691 pages, their file URLs pointing here, and the files
    served from a store shared between runs (LLAMA_BUILDKIT_TEST_CACHE/pypi-files, checked by sha256)
    and fetched from PyPI once. Counts the requests by path, as PackageIndexServer does."""

    def __init__(self, store: Path, upstream: str = "https://pypi.org/simple") -> None:
        self.store, self.upstream = Path(store), upstream
        self.requests: Counter = Counter()
        self._files: dict[str, dict] = {}
        self._lock = threading.Lock()

    def wheel_requests(self) -> dict[str, int]:
        return {p: n for p, n in self.requests.items() if p.endswith(".whl")}

    def _page(self, project: str) -> bytes | None:
        import urllib.error
        import urllib.request

        req = urllib.request.Request(f"{self.upstream}/{project}/", headers={"Accept": JSON_TYPE})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                doc = json.loads(resp.read())
        except urllib.error.HTTPError:
            return None
        for f in doc["files"]:
            with self._lock:
                self._files[f["filename"]] = dict(f)
            f["url"] = f"../../files/{f['filename']}"
        return json.dumps(doc).encode()

    def _file(self, filename: str) -> Path | None:
        import urllib.request

        f = self._files.get(filename)
        if f is None:
            return None
        path = self.store / filename
        with self._lock:
            if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == f["hashes"]["sha256"]:
                return path
            self.store.mkdir(parents=True, exist_ok=True)
            import tempfile

            fd, name = tempfile.mkstemp(prefix=f".{filename}.", dir=self.store)  # another run may fetch it too
            with urllib.request.urlopen(f["url"], timeout=600) as resp, os.fdopen(fd, "wb") as out:
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
            os.replace(name, path)
        return path

    def __enter__(self) -> ProxyIndex:
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                index.requests[self.path] += 1
                parts = self.path.split("?")[0].strip("/").split("/")
                if len(parts) == 2 and parts[0] == "simple":
                    body = index._page(parts[1])
                    if body is not None:
                        self.send_response(200)
                        self.send_header("Content-Type", JSON_TYPE)
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body)
                        return
                elif len(parts) == 2 and parts[0] == "files":
                    path = index._file(parts[1])
                    if path is not None:
                        self.send_response(200)
                        self.send_header("Content-Length", str(path.stat().st_size))
                        self.end_headers()
                        with open(path, "rb") as src:
                            while chunk := src.read(1 << 20):
                                self.wfile.write(chunk)
                        return
                self.send_error(404)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/simple"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def proxy_store() -> Path:
    """Where ProxyIndex keeps PyPI's files between runs (tests/realserver.py's cache folder)."""
    cache = os.environ.get("LLAMA_BUILDKIT_TEST_CACHE", Path.home() / ".cache" / "llama-buildkit-tests")
    return Path(cache) / "pypi-files"


def proxy_env(index: ProxyIndex) -> dict[str, str]:
    """The variables that make buildkit (and pip) use `index` alone."""
    return {"PIP_INDEX_URL": index.url, "PIP_CONFIG_FILE": os.devnull, "PIP_EXTRA_INDEX_URL": ""}
