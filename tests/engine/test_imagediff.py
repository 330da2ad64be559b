"""imagediff and ocilayout on OCI layouts made here (no engine), and pushing a layout to a real registry."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path

import pytest

from buildkit.core.errors import ImageSourceError
from buildkit.oci.imagediff import diff_images, elf_section_diff
from buildkit.oci.ocilayout import OciArchive, push_layout
from buildkit.oci.imagesource import open_image
from registryserver import head_digest

ROOT = Path(__file__).resolve().parents[2]


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def make_layer(files: Mapping[str, bytes | str], mtime: int = 1704153600, mode: int = 0o644) -> bytes:
    """A gzip'd tar layer; a str value is a symlink target."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, content in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.mtime = mtime
            if isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size, info.mode = len(content), mode
                tar.addfile(info, io.BytesIO(content))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def write_layout(dest: Path, layers: list[bytes], labels: dict[str, str] | None = None, *, as_tar: bool = False,
                 created: str = "2024-01-02T00:00:00Z") -> Path:
    """An OCI image layout (folder, or tar of it) holding one linux/amd64 image."""
    blobs = dest / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def put(data: bytes) -> str:
        digest = _digest(data)
        (blobs / digest.split(":")[1]).write_bytes(data)
        return digest

    diff_ids = [_digest(gzip.decompress(layer)) for layer in layers]
    config = {"architecture": "amd64", "os": "linux", "created": created,
              "config": {"Labels": labels or {}}, "rootfs": {"type": "layers", "diff_ids": diff_ids},
              "history": [{"created": created, "created_by": f"RUN step {i}"} for i in range(len(layers))]}
    config_bytes = json.dumps(config, sort_keys=True).encode()
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": put(config_bytes),
                           "size": len(config_bytes)},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": put(layer),
                            "size": len(layer)} for layer in layers]}
    manifest_bytes = json.dumps(manifest).encode()
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [{"mediaType": manifest["mediaType"], "digest": put(manifest_bytes),
                            "size": len(manifest_bytes), "platform": {"architecture": "amd64", "os": "linux"},
                            "annotations": {"org.opencontainers.image.ref.name": "t"}}]}
    (dest / "index.json").write_text(json.dumps(index))
    (dest / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    if not as_tar:
        return dest
    tar_path = dest.with_suffix(".tar")
    with tarfile.open(tar_path, "w") as tar:
        for path in sorted(dest.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(dest)), recursive=False)
    return tar_path


BASE = {"etc/os-release": b"debian\n", "bin/sh": b"\x00shell"}


def test_identical_layouts_are_the_same(tmp_path):
    a = write_layout(tmp_path / "a", [make_layer(BASE), make_layer({"app/x": b"1"})], as_tar=True)
    b = write_layout(tmp_path / "b", [make_layer(BASE), make_layer({"app/x": b"1"})])
    with ExitStack() as stack:
        result = diff_images(open_image(str(a), stack), open_image(str(b), stack))
    assert result.same and result.layers == [] and "identical" in result.report()


def test_content_metadata_added_removed_and_config_are_named(tmp_path):
    a = write_layout(tmp_path / "a", [make_layer(BASE), make_layer({"app/x": b"1", "app/old": b"o", "app/l": "x"})],
                     {"v": "1"})
    b = write_layout(tmp_path / "b", [make_layer(BASE), make_layer({"app/x": b"22", "app/new": b"n", "app/l": "y"})],
                     {"v": "2"})
    with ExitStack() as stack:
        result = diff_images(open_image(f"oci:{a}", stack), open_image(f"oci:{b}", stack))
    assert not result.same
    assert [layer.index for layer in result.layers] == [1]  # the base layer is the same
    changes = {f.path: f.change for f in result.layers[0].files}
    assert changes == {"/app/x": "content", "/app/old": "removed", "/app/new": "added", "/app/l": "metadata"}
    content = next(f for f in result.layers[0].files if f.path == "/app/x")
    assert content.a is not None and content.b is not None
    assert content.a.size == 1 and content.b.size == 2
    assert content.a.sha256 == hashlib.sha256(b"1").hexdigest()
    assert ("config.Labels.v", "1", "2") in result.config
    text = result.report()
    assert "layer 2 (RUN step 1)" in text and "/app/x" in text and "config config.Labels.v" in text
    assert json.loads(json.dumps(result.to_json()))["layers"][0]["files"]


def test_a_timestamp_difference_is_reported_as_metadata(tmp_path):
    a = write_layout(tmp_path / "a", [make_layer({"app/x": b"1"}, mtime=1)])
    b = write_layout(tmp_path / "b", [make_layer({"app/x": b"1"}, mtime=2)])
    with ExitStack() as stack:
        result = diff_images(open_image(str(a), stack), open_image(str(b), stack))
    (f,) = result.layers[0].files
    assert f.change == "metadata" and f.details == ["mtime 1 vs 2"]


def test_elf_sections_that_differ_are_named():
    elf = Path(sys.executable).resolve().read_bytes()
    if not elf.startswith(b"\x7fELF"):
        pytest.skip("the Python executable is not ELF")
    from elftools.elf.elffile import ELFFile

    sections = [s for s in ELFFile(io.BytesIO(elf)).iter_sections() if s["sh_type"] == "SHT_PROGBITS"]
    section = max(sections, key=lambda s: s["sh_size"])
    offset = section["sh_offset"] + section["sh_size"] // 2
    changed = bytearray(elf)
    changed[offset] ^= 0xFF
    assert elf_section_diff(elf, bytes(changed)) == [section.name]
    assert elf_section_diff(b"not elf", b"x") is None


def test_unreadable_sources_are_one_error(tmp_path):
    (tmp_path / "junk.tar").write_bytes(b"no tar")
    with ExitStack() as stack, pytest.raises(ImageSourceError, match="not a tar archive"):
        open_image(str(tmp_path / "junk.tar"), stack)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ImageSourceError, match="without index.json"):
        OciArchive(tmp_path / "empty")


def test_diff_cli_exit_codes(tmp_path):
    a = write_layout(tmp_path / "a", [make_layer({"app/x": b"1"})])
    b = write_layout(tmp_path / "b", [make_layer({"app/x": b"2"})])
    run = lambda *args: subprocess.run([sys.executable, "-m", "buildkit.cli", "diff", *args], capture_output=True,  # noqa: E731
                                       text=True, cwd=ROOT)
    same = run(str(a), str(a))
    assert same.returncode == 0 and "identical" in same.stdout
    differ = run(str(a), str(b), "--json")
    assert differ.returncode == 2
    data = json.loads(differ.stdout)
    assert data["same"] is False and data["layers"][0]["files"][0]["path"] == "/app/x"
    missing = run(str(a), str(tmp_path / "nothing.tar"))
    assert missing.returncode == 1 and missing.stderr.startswith("error:")


def test_push_layout_keeps_the_manifest_digest(tmp_path, registry_plain):
    from buildkit.oci.registry import RegistryClient

    layout = write_layout(tmp_path / "a", [make_layer(BASE), make_layer({"app/x": b"1" * 100_000})], as_tar=True)
    with OciArchive(layout) as archive, RegistryClient(registry_plain.host) as client:
        image = archive.image()
        digest = push_layout(client, "layout/push", image, ["one", "two"])
        assert digest == image.manifest_digest
        assert head_digest(client, "layout/push", "one") == digest
        assert head_digest(client, "layout/push", "two") == digest
        assert all(client.blob_exists("layout/push", d.digest) for d in image.layers)
        again = push_layout(client, "layout/push", image, ["three"])  # blobs already there: only the manifest
        assert again == digest
    with ExitStack() as stack:
        pulled = open_image(f"{registry_plain.host}/layout/push:two", stack)
        with OciArchive(layout) as archive:
            assert diff_images(pulled, archive.image()).same
