"""Every registry read has its limit before it starts (issue 39, class 3): a manifest or config streamed
without end, a gzip bomb sent with Content-Encoding: gzip, a layer longer than its declared size. Real
servers on 127.0.0.1 (tests/hostile.py); what is bounded is measured: the bytes the server got into the
socket (what the client read, and at most the sockets' buffers more) and the memory Python allocated."""

from __future__ import annotations

import gzip
import hashlib
import json
import tracemalloc
from contextlib import ExitStack
from pathlib import Path

import pytest

from buildkit.core.errors import BuildkitError, RegistryError
from buildkit.oci.digest import MAX_DOCUMENT
from buildkit.oci.imagesource import open_image
from buildkit.oci.registry import OCI_MANIFEST, RegistryClient
from hostile import Flood, HostileServer

FLOOD = 64 << 20  # what a hostile server offers; a bounded read takes a fraction of it
SLACK = 24 << 20  # loopback sockets' buffers, both ends, with room
CONFIG = b'{"architecture": "amd64", "os": "linux", "config": {}}'


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def head(*headers: str) -> bytes:
    return "\r\n".join(["HTTP/1.1 200 OK", *headers, "", ""]).encode()


def client(server: HostileServer) -> RegistryClient:
    return RegistryClient(server.host, timeout=20, retries=0, backoff=0)


def peak_of(call) -> tuple[int, BuildkitError]:
    tracemalloc.start()
    try:
        with pytest.raises(BuildkitError) as caught:
            call()
        return tracemalloc.get_traced_memory()[1], caught.value
    finally:
        tracemalloc.stop()


OPS = {
    "manifest": (lambda c: c.get_manifest("team/app", "latest"), MAX_DOCUMENT),
    "config": (lambda c: c.get_blob("team/app", sha(CONFIG), max_bytes=len(CONFIG)), len(CONFIG)),
}


@pytest.mark.parametrize("op", OPS)
def test_an_answer_without_end_is_cut_at_its_limit(op: str) -> None:
    call, limit = OPS[op]
    flood = Flood(head(f"Content-Type: {OCI_MANIFEST}", f"Docker-Content-Digest: {sha(CONFIG)}",
                       "Connection: close"), FLOOD)  # no Content-Length: the body ends when the server closes
    with HostileServer("answer", answer=flood, registry=True) as server, client(server) as c:
        peak, error = peak_of(lambda: call(c))
    assert f"larger than the limit of {limit} bytes" in str(error) and "\n" not in str(error)
    assert server.sent < limit + SLACK and peak < limit + (4 << 20)


def test_an_answer_that_declares_more_than_its_limit_is_refused_before_its_body() -> None:
    flood = Flood(head(f"Content-Type: {OCI_MANIFEST}", f"Content-Length: {FLOOD}",
                       f"Docker-Content-Digest: {sha(CONFIG)}"), FLOOD)
    with HostileServer("answer", answer=flood, registry=True) as server, client(server) as c:
        with pytest.raises(RegistryError, match=f"declares {FLOOD} bytes, over the limit of {MAX_DOCUMENT}"):
            c.get_manifest("team/app", "latest")
    assert server.sent < SLACK


def test_a_gzip_bomb_is_decoded_no_further_than_the_limit() -> None:
    bomb = gzip.compress(bytes(FLOOD), compresslevel=9)  # 64 MiB of zeros in about 64 KiB
    answer = head(f"Content-Type: {OCI_MANIFEST}", "Content-Encoding: gzip", f"Content-Length: {len(bomb)}",
                  f"Docker-Content-Digest: {sha(bytes(FLOOD))}") + bomb
    with HostileServer("answer", answer=answer, registry=True) as server, client(server) as c:
        peak, error = peak_of(lambda: c.get_manifest("team/app", "latest"))
    assert f"larger than the limit of {MAX_DOCUMENT} bytes" in str(error)
    assert peak < 3 * MAX_DOCUMENT


def test_a_layer_longer_than_declared_is_not_written_past_its_size(tmp_path: Path) -> None:
    layer_size = 3000
    layer = "sha256:" + "5" * 64
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(CONFIG),
                                      "size": len(CONFIG)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer,
                                       "size": layer_size}]}).encode()
    routes: dict[str, bytes | Flood] = {
        f"GET /v2/team/app/manifests/{sha(manifest)} ": head(
            f"Content-Type: {OCI_MANIFEST}", f"Content-Length: {len(manifest)}",
            f"Docker-Content-Digest: {sha(manifest)}", "Connection: close") + manifest,
        f"GET /v2/team/app/blobs/{sha(CONFIG)} ": head(f"Content-Length: {len(CONFIG)}", "Connection: close") + CONFIG,
        f"GET /v2/team/app/blobs/{layer} ": Flood(head("Connection: close"), FLOOD),
    }
    with HostileServer("answer", answer=routes, registry=True) as server, ExitStack() as stack:
        image = open_image(f"registry:{server.host}/team/app@{sha(manifest)}", stack, platform=None)
        with pytest.raises(RegistryError, match=f"limit of {layer_size} bytes \\(its declared size\\)"):
            with image.open_blob(layer) as fh:
                fh.read()
    assert server.sent < layer_size + SLACK


@pytest.mark.parametrize("lie", ["layer", "config"])
def test_a_real_registry_blob_longer_than_its_manifest_declares_is_refused(registry_plain, lie: str) -> None:
    """The real registry serves what was pushed; a manifest that declares a blob smaller than it is (the
    registry takes it) gives an image whose blob is read no further than declared: one line naming the limit."""
    layer = gzip.compress(bytes(200_000), mtime=0)
    declared = {"layer": len(layer) - 100, "config": len(CONFIG)}, {"layer": len(layer), "config": len(CONFIG) - 5}
    sizes = declared[0] if lie == "layer" else declared[1]
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(CONFIG),
                                      "size": sizes["config"]},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": sha(layer),
                                       "size": sizes["layer"]}]}).encode()
    repo = f"bounds/{lie}"
    with RegistryClient(registry_plain.host) as c:
        for blob in (CONFIG, layer):
            c.upload_blob(repo, sha(blob), blob, len(blob))
        c.put_manifest(repo, "lying", manifest, OCI_MANIFEST)
    with ExitStack() as stack, pytest.raises(BuildkitError) as caught:
        image = open_image(f"registry:{registry_plain.host}/{repo}:lying", stack, platform=None)
        with image.open_blob(sha(layer)) as fh:
            fh.read()
    limit = sizes[lie]
    assert f"limit of {limit} bytes" in str(caught.value) and "\n" not in str(caught.value)
