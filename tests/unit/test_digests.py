"""A digest never names a file outside an OCI layout, and a blob is what its digest says (issue 39, class 1;
class 3 for layouts). OCI layouts are made by hand on disk, folders and archives, with the hostile digests of
the issue: a config digest that climbs to a host file (a fake ~/.docker/config.json), a layer digest naming
/dev/zero, blobs whose bytes or sizes are not what the manifest declares; a document over its limit is
refused before it is read (measured: what Python allocated)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import signal
import tarfile
import tracemalloc
from contextlib import ExitStack
from pathlib import Path

import pytest

from buildkit.core.errors import ImageSourceError
from buildkit.oci.digest import MAX_DOCUMENT, Digest
from buildkit.oci.imagediff import diff_images
from buildkit.oci.ocilayout import OciArchive
from buildkit.oci.imagesource import open_image
from buildkit.oci.rootfs import apply_layers
from cliutil import run_cli

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SECRET = "c2VjcmV0LXRva2VuLW9mLXRoZS1ob3N0"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, body in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return gzip.compress(raw.getvalue(), mtime=0)


def forgery(real: bytes) -> bytes:
    """Another layer of real's length (so only its digest tells them apart)."""
    candidates = (layer({"app/x": b"fak" + bytes([c])}) for c in b"abcdefghijklmnopqrstuvwxyz")
    return next(f for f in candidates if len(f) == len(real))


def layout(dest: Path, *, config: bytes = b'{"architecture": "amd64", "os": "linux", "config": {}}',
           layers: tuple[bytes, ...] = (), config_digest: str | None = None, layer_digests: tuple[str, ...] = (),
           config_size: int | None = None, layer_sizes: tuple[int, ...] = (), store: dict[str, bytes] | None = None,
           manifest_size: int | None = None) -> Path:
    """An OCI layout folder of one image; the *_digest and *_size arguments lie in the manifest, and store
    puts other bytes under a digest's file (what a tampered layout holds)."""
    blobs = dest / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    for data in (config, *layers):
        (blobs / sha(data)[7:]).write_bytes(data)
    for digest, data in (store or {}).items():
        (blobs / digest[7:]).write_bytes(data)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest or sha(config),
                   "size": len(config) if config_size is None else config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": layer_digests[i] if i < len(layer_digests) else sha(data),
                    "size": layer_sizes[i] if i < len(layer_sizes) else len(data)} for i, data in enumerate(layers)],
    }).encode()
    (blobs / sha(manifest)[7:]).write_bytes(manifest)
    index = {"schemaVersion": 2, "manifests": [{"mediaType": OCI_MANIFEST, "digest": sha(manifest),
                                                "size": len(manifest) if manifest_size is None else manifest_size}]}
    (dest / "index.json").write_text(json.dumps(index))
    (dest / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return dest


def as_tar(folder: Path) -> Path:
    out = folder.with_suffix(".tar")
    with tarfile.open(out, "w") as tar:
        for path in sorted(folder.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return out


def both(folder: Path) -> list[Path]:
    return [folder, as_tar(folder)]


def open_and_diff(path: Path, other: Path) -> None:
    with ExitStack() as stack:
        diff_images(open_image(f"oci:{path}", stack, platform=None), open_image(f"oci:{other}", stack, platform=None))


# --------------------------------------------------------------------------- the digest itself

@pytest.mark.parametrize("text", ["sha256:" + "a" * 64, "sha512:" + "0" * 128])
def test_registered_digests_parse_and_name_their_blob(text: str) -> None:
    digest = Digest.parse(text)
    assert str(digest) == text
    assert str(digest.blob_path()) == f"blobs/{text.replace(':', '/')}"
    assert digest.file_name() == text.replace(":", "-")


@pytest.mark.parametrize("text", ["sha256:../../../../etc/passwd", "sha256:/dev/zero", "sha256:" + "A" * 64,
                                  "sha256:" + "a" * 63, "sha256:" + "a" * 65, "sha1:" + "a" * 40, "md5:abc",
                                  "sha256:" + "a" * 63 + "/", "../x:" + "a" * 64, "sha256", "", 7, None])
def test_anything_else_is_one_line_naming_it(text: object) -> None:
    with pytest.raises(ImageSourceError, match="invalid digest") as caught:
        Digest.parse(text, "here")
    assert str(caught.value).startswith("here: ") and "\n" not in str(caught.value)


# --------------------------------------------------------------------------- a digest as a path

def test_a_config_digest_that_climbs_out_never_reads_the_host_file(tmp_path: Path) -> None:
    home = tmp_path / "home" / ".docker"
    home.mkdir(parents=True)
    stolen = json.dumps({"auths": {"registry.example": {"auth": SECRET}}}).encode()
    (home / "config.json").write_bytes(stolen)
    climb = "sha256:../../../../home/.docker/config.json"  # from blobs/sha256/ of tmp_path/x/layout
    bad = layout(tmp_path / "x" / "layout", config=stolen, config_digest=climb)
    good = layout(tmp_path / "good")
    for path in both(bad):
        with pytest.raises(ImageSourceError, match="invalid digest"):
            open_and_diff(path, good)
    proc = run_cli(tmp_path, "diff", f"oci:{bad}", f"oci:{good}")
    assert proc.returncode == 1 and SECRET not in proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and "invalid digest" in proc.stderr


def test_a_layer_digest_naming_a_device_is_refused(tmp_path: Path) -> None:
    data = layer({"a": b"1"})
    good = layout(tmp_path / "good", layers=(data,))
    for name, digests in (("dev", ("sha256:/dev/zero",)), ("climb", ("sha256:../../../../../../../dev/zero",))):
        for path in both(layout(tmp_path / name, layers=(data,), layer_digests=digests)):
            with pytest.raises(ImageSourceError, match="invalid digest"):
                open_and_diff(path, good)


@pytest.mark.parametrize("target", ["/dev/zero", "outside"])
def test_a_blob_that_is_a_link_out_of_the_folder_is_refused(tmp_path: Path, target: str) -> None:
    data = layer({"a": b"1"})
    bad = layout(tmp_path / "bad", layers=(data,))
    good = layout(tmp_path / "good", layers=(layer({"a": b"2"}),))
    outside = tmp_path / "outside"
    outside.write_bytes(data)  # the right bytes, but not the layout's file
    blob = bad / "blobs" / "sha256" / sha(data)[7:]
    blob.unlink()
    blob.symlink_to(target if target.startswith("/") else outside)
    with pytest.raises(ImageSourceError, match="out of the layout"):
        open_and_diff(bad, good)


def test_a_blob_that_is_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    data = layer({"a": b"1"})
    bad = layout(tmp_path / "bad", layers=(data,))
    blob = bad / "blobs" / "sha256" / sha(data)[7:]
    blob.unlink()
    os.mkfifo(blob)
    signal.alarm(120)  # a net, not a measure: an open that waits for a writer would wait for ever
    try:
        with pytest.raises(ImageSourceError, match="not a regular file"):
            open_and_diff(bad, layout(tmp_path / "good", layers=(layer({"a": b"2"}),)))
    finally:
        signal.alarm(0)


# --------------------------------------------------------------------------- bytes that are not their digest's

def test_a_config_whose_bytes_do_not_match_is_never_shown(tmp_path: Path) -> None:
    real = b'{"architecture": "amd64", "os": "linux", "config": {"Labels": {"who": "realer"}}}'  # as long
    forged = b'{"architecture": "amd64", "os": "linux", "config": {"Labels": {"who": "forged"}}}'
    bad = layout(tmp_path / "bad", config=real, store={sha(real): forged})
    for path in both(bad):
        with pytest.raises(ImageSourceError, match="do not match the digest"):
            open_and_diff(path, layout(tmp_path / f"good-{path.suffix}"))


def test_a_layer_whose_bytes_do_not_match_fails_the_diff(tmp_path: Path) -> None:
    real = layer({"app/x": b"real"})
    forged = forgery(real)
    good = layout(tmp_path / "good", layers=(layer({"app/x": b"other"}),))
    for name, store, said in (("bytes", {sha(real): forged}, "do not match the digest"),
                              ("longer", {sha(real): real + b"\0" * 4096}, "more bytes than"),
                              ("shorter", {sha(real): real[:-8]}, "bytes, not the")):
        for path in both(layout(tmp_path / name, layers=(real,), store=store)):
            with pytest.raises(ImageSourceError, match=said):
                open_and_diff(path, good)


def test_a_forged_layer_never_reaches_a_root_file_system(tmp_path: Path) -> None:
    real = layer({"app/x": b"real"})
    broken = real[:-5] + bytes([real[-5] ^ 1]) + real[-4:]  # the gzip trailer's length: gzip fails on it
    for name, forged in (("forged", forgery(real)), ("broken", broken)):
        path = layout(tmp_path / name, layers=(real,), store={sha(real): forged})
        with OciArchive(path) as archive, pytest.raises(ImageSourceError, match="do not match the digest"):
            apply_layers(archive.image(None), tmp_path / f"root-{name}")


def test_a_layer_declared_smaller_than_its_file_reads_no_more_than_declared(tmp_path: Path) -> None:
    real = layer({"app/x": b"real"})
    bad = layout(tmp_path / "bad", layers=(real,), layer_sizes=(len(real) - 10,))
    with OciArchive(bad) as archive:
        fh = archive.image(None).open_blob(sha(real))
        with pytest.raises(ImageSourceError, match="more bytes than the"):
            fh.read()
        assert fh.tell() == len(real) - 9  # the declared size and one byte, never more
        fh.close()


# --------------------------------------------------------------------------- documents within their limit

def sparse(path: Path, size: int) -> None:
    with open(path, "wb") as fh:
        fh.truncate(size)


def peak_while(call) -> tuple[int, Exception | None]:
    tracemalloc.start()
    try:
        call()
        caught = None
    except ImageSourceError as exc:
        caught = exc
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, caught


def test_a_huge_index_json_is_refused_within_its_limit(tmp_path: Path) -> None:
    folder = layout(tmp_path / "big")
    sparse(folder / "index.json", 64 << 20)  # 64 MiB of zeros, on disk as a hole
    peak, caught = peak_while(lambda: OciArchive(folder).image(None))
    assert caught is not None and f"limit of {MAX_DOCUMENT} bytes" in str(caught)
    assert peak < 2 * MAX_DOCUMENT + (1 << 20)


@pytest.mark.parametrize("declared", ["true", "small"])
def test_a_huge_manifest_or_config_is_refused_within_its_limit(tmp_path: Path, declared: str) -> None:
    config = b'{"architecture": "amd64", "os": "linux"}'
    if declared == "true":  # the descriptor says 64 MiB: refused before a byte is read
        folder = layout(tmp_path / "big", config=config, config_size=64 << 20)
        said = "over the limit"
    else:  # it says 40 bytes and the file is 64 MiB: 41 are read
        folder = layout(tmp_path / "big", config=config)
        said = "limit of 40 bytes"
    sparse(folder / "blobs" / "sha256" / sha(config)[7:], 64 << 20)
    peak, caught = peak_while(lambda: OciArchive(folder).image(None))
    assert caught is not None and said in str(caught), caught
    assert peak < 2 << 20


def test_a_base_images_layout_never_reads_a_file_its_digests_climb_to(tmp_path: Path) -> None:
    from buildkit.engine.baseimages import offered_platforms

    layout_dir = tmp_path / "cache" / "base"
    (layout_dir / "blobs" / "sha256").mkdir(parents=True)
    (tmp_path / "cache" / "evil.json").write_text(json.dumps(
        {"manifests": [{"platform": {"os": "linux", "architecture": "evil"}}]}))
    assert offered_platforms(layout_dir, "sha256:../../../evil.json") == ()
