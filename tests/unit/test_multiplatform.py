"""Multi-platform builds without an engine: the OCI index assembled from per-platform archives
(synthetic ones, made here), the platform list, the lock's index entries and reproduce's record."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from buildkit.core.errors import ArchError, ConfigError, ImageSourceError, LockError
from buildkit.cli.matrixspecs import platform_requests
from buildkit.flows.reproduce.record import IndexRecorded, load_record
from buildkit.oci.ociindex import PlatformManifest, index_digest_of, index_document, write_index_archive
from buildkit.oci.ocilayout import OCI_INDEX, OCI_MANIFEST, OciArchive
from buildkit.plan.buildkey import index_key
from buildkit.plan.config import load_config
from buildkit.plan.inputs import BaseImage
from buildkit.plan.plantypes import plan_inputs
from buildkit.plan.platforms import parse_platforms
from buildkit.release.lock import IndexEntry, LockEntry, PlatformRecord, platform_entry_key
from buildkit.release.lockfile import Lock, write_index_entry
from test_plan_render import plan_for

DIGEST = "sha256:" + "ab" * 32


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def oci_archive(path: Path, architecture: str, layer: bytes, annotations: dict | None = None) -> str:
    """A one-image OCI archive as buildx's exporter writes it (with annotations on its manifest, as
    --annotation manifest:KEY=VALUE puts them); returns its manifest digest."""
    config = json.dumps({"architecture": architecture, "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]}}).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": _digest(config), "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                       "digest": _digest(layer), "size": len(layer)}],
                           **({"annotations": annotations} if annotations else {})}).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": _digest(manifest), "size": len(manifest),
         "platform": {"os": "linux", "architecture": architecture}}]}).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in (("index.json", index), ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
                           *((f"blobs/sha256/{_digest(b)[7:]}", b) for b in (config, manifest, layer))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return _digest(manifest)


@pytest.fixture
def two(tmp_path):
    amd = oci_archive(tmp_path / "amd64.tar", "amd64", b"amd64 layer")
    arm = oci_archive(tmp_path / "arm64.tar", "arm64", b"arm64 layer")
    return {"linux/amd64": (tmp_path / "amd64.tar", amd), "linux/arm64": (tmp_path / "arm64.tar", arm)}


def test_index_lists_each_manifest_with_its_platform_in_the_given_order(tmp_path, two):
    pairs = [("linux/arm64", two["linux/arm64"][0]), ("linux/amd64", two["linux/amd64"][0])]
    digest = write_index_archive(pairs, tmp_path / "index.tar", ["reg/x:cpu", "reg/x:sha-1234567-cpu"])
    with OciArchive(tmp_path / "index.tar") as layout:
        outer = layout.index()
        assert [m["digest"] for m in outer["manifests"]] == [digest, digest]
        assert [m["annotations"]["io.containerd.image.name"] for m in outer["manifests"]] == \
            ["reg/x:cpu", "reg/x:sha-1234567-cpu"]
        body = layout.read_blob(digest)
        assert _digest(body) == digest
        index = json.loads(body)
        assert index["mediaType"] == OCI_INDEX
        assert [(m["digest"], m["platform"]) for m in index["manifests"]] == [
            (two["linux/arm64"][1], {"os": "linux", "architecture": "arm64"}),
            (two["linux/amd64"][1], {"os": "linux", "architecture": "amd64"})]
        # every platform's image is whole in the one archive, and each blob hashes to its name
        assert layout.image("linux/amd64").manifest_digest == two["linux/amd64"][1]
        assert layout.image("linux/arm64").layers[0].digest == _digest(b"arm64 layer")
        for m in index["manifests"]:
            image = layout.image(f"linux/{m['platform']['architecture']}")
            for blob in [image.config_digest] + [d.digest for d in image.layers]:
                assert _digest(layout.read_blob(blob)) == blob
    assert index_digest_of(pairs) == digest


def test_same_inputs_same_bytes_and_the_order_is_part_of_the_digest(tmp_path, two):
    pairs = [(p, two[p][0]) for p in ("linux/amd64", "linux/arm64")]
    a = write_index_archive(pairs, tmp_path / "a.tar", ["r/x:t"])
    b = write_index_archive(pairs, tmp_path / "b.tar", ["r/x:t"])
    assert a == b and (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    assert write_index_archive(pairs[::-1], tmp_path / "c.tar") != a


def test_the_index_carries_the_annotations_every_manifest_shares_and_nightly_assembles_the_same(tmp_path):
    oci = "org.opencontainers.image."
    same = {oci + "source": "https://example.invalid/fork", oci + "revision": "a" * 40,
            oci + "created": "2026-01-01T00:00:00Z"}
    amd = oci_archive(tmp_path / "amd64.tar", "amd64", b"amd64 layer",
                      {**same, oci + "base.digest": "sha256:" + "1" * 64, oci + "title": "x"})
    arm = oci_archive(tmp_path / "arm64.tar", "arm64", b"arm64 layer",
                      {**same, oci + "base.digest": "sha256:" + "2" * 64})
    pairs = [("linux/amd64", tmp_path / "amd64.tar"), ("linux/arm64", tmp_path / "arm64.tar")]
    digest = write_index_archive(pairs, tmp_path / "index.tar", ["r/x:t"])
    with OciArchive(tmp_path / "index.tar") as layout:
        index = json.loads(layout.read_blob(digest))
        bodies = {d: layout.read_blob(d) for d in (amd, arm)}
    # a value that differs (the base digest) or that one platform lacks (the title) stays on the manifests
    assert index["annotations"] == same
    assert index_digest_of(pairs) == digest  # reproduce assembles the same index
    # the nightly assembles it from the registry's manifest bodies: the same bytes
    nightly = index_document([PlatformManifest.of_body("linux/amd64", amd, bodies[amd], OCI_MANIFEST),
                              PlatformManifest.of_body("linux/arm64", arm, bodies[arm], OCI_MANIFEST)])
    assert _digest(nightly) == digest


def test_manifests_without_annotations_give_the_index_they_gave_before(two):
    """An index over images built before annotations existed keeps its digest (no annotations key)."""
    manifests = [PlatformManifest(p, two[p][1], 10, OCI_MANIFEST) for p in ("linux/amd64", "linux/arm64")]
    assert set(json.loads(index_document(manifests))) == {"schemaVersion", "mediaType", "manifests"}
    assert _digest(index_document(manifests)) == _digest(json.dumps(
        {"manifests": [m.descriptor() for m in manifests], "mediaType": OCI_INDEX, "schemaVersion": 2},
        sort_keys=True, separators=(",", ":")).encode())


def test_index_document_refuses_nothing_a_duplicate_and_a_bad_platform():
    m = PlatformManifest("linux/amd64", DIGEST, 10, OCI_MANIFEST)
    with pytest.raises(ImageSourceError, match="at least one"):
        index_document([])
    with pytest.raises(ImageSourceError, match="each platform once"):
        index_document([m, m])
    with pytest.raises(ImageSourceError, match="os/arch"):
        index_document([replace(m, platform="linux")])
    variant = json.loads(index_document([replace(m, platform="linux/arm64/v8")]))
    assert variant["manifests"][0]["platform"] == {"os": "linux", "architecture": "arm64", "variant": "v8"}


@pytest.mark.parametrize("text, message", [
    ("linux/amd64,linux/amd64", "names linux/amd64 twice"),
    ("linux/arm64,linux/arm64/v8", "names linux/arm64 twice"),
    ("linux/amd64,linux/riscv64", "buildkit builds linux/amd64 and linux/arm64"),
    ("linux/amd64,,linux/arm64", "has an empty entry"),
    ("", "is empty"),
])
def test_platform_list_errors_are_one_line(text, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_platforms(text)
    assert "\n" not in str(info.value)


def test_platform_list_keeps_the_order_written():
    assert parse_platforms(" linux/arm64, linux/amd64") == ("linux/arm64", "linux/amd64")


def test_every_platform_is_checked_against_the_arch_before_any_work():
    cfg = load_config(None, {}, {"build.arch": ("sm_121", "--arch"),
                                 "build.platform": ("linux/arm64,linux/amd64", "--platform")})
    with pytest.raises(ArchError, match="sm_121 .* exists on linux/arm64 only"):
        platform_requests(cfg)
    cfg = load_config(None, {}, {"build.arch": ("cpu", "--arch"),
                                 "build.platform": ("linux/amd64,linux/arm64", "--platform")})
    got = platform_requests(cfg)
    assert [(p, r.platform) for p, _, r in got] == [("linux/amd64", "linux/amd64"), ("linux/arm64", "linux/arm64")]
    assert len({r.tag_variant for _, _, r in got}) == 1


def test_index_key_depends_on_every_platform_key_and_the_order():
    a = index_key([("linux/amd64", "k1"), ("linux/arm64", "k2")])
    assert a == index_key([("linux/amd64", "k1"), ("linux/arm64", "k2")])
    assert a != index_key([("linux/amd64", "k1"), ("linux/arm64", "k3")])
    assert a != index_key([("linux/arm64", "k2"), ("linux/amd64", "k1")])


def lock_entry_for(platform: str, digest: str) -> LockEntry:
    plan = plan_for(**{"build.arch": "cpu", "base.os_image": "buildkit-test/debian:bookworm",
                       "build.platform": platform})
    inputs = plan_inputs(plan, (BaseImage("buildkit-test/debian:bookworm", DIGEST),), None, None)
    return LockEntry(**inputs.lock_fields(), ref="main", template=plan.request.template, dockerfile_sha256="d" * 64,
                     cuda_root=None, cmake_archs=None, image_name=plan.request.image_name, build_key="k" + platform,
                     image_digest=digest, image_id=digest, tags=(), labels=inputs.to_labels(),
                     exporter="oci")


def test_lock_round_trip_of_an_index_and_reproduce_reads_it_as_one_build(tmp_path):
    path = tmp_path / "buildkit.lock"
    digests = {"linux/amd64": "sha256:" + "1" * 64, "linux/arm64": "sha256:" + "2" * 64}
    entries = {platform_entry_key("cpu", "server", p): lock_entry_for(p, d) for p, d in digests.items()}
    index = IndexEntry(variant="cpu", target="server", image_name="reg/x", index_digest="sha256:" + "3" * 64,
                       build_key="ik",
                       platforms=tuple(PlatformRecord(p, d, "k" + p, platform_entry_key("cpu", "server", p))
                                       for p, d in digests.items()),
                       tags=("reg/x:cpu",), version="0.1.0", pushed=("127.0.0.1:5000/x:cpu",))
    write_index_entry(path, index, entries)
    lock = Lock.read(path)
    assert set(lock.builds) == {"cpu/server@linux/amd64", "cpu/server@linux/arm64"}
    assert lock.indexes == {"cpu/server": index} and lock.index_by_digest(index.index_digest) == ("cpu/server", index)
    assert lock.builds["cpu/server@linux/arm64"].image_digest == digests["linux/arm64"]
    record = load_record(str(path))
    assert isinstance(record, IndexRecorded) and record.index_digest == index.index_digest
    assert [(p, r.image_digest, r.inputs.platform) for p, r in record.platforms] == [
        (p, d, p) for p, d in digests.items()]
    assert isinstance(load_record(str(path), "cpu/server@linux/arm64"), type(record.platforms[0][1]))


def test_a_malformed_index_entry_is_one_error(tmp_path):
    path = tmp_path / "buildkit.lock"
    path.write_text(json.dumps({"lock_version": 1, "builds": {},
                                "indexes": {"cpu/server": {"variant": "cpu", "target": "server", "image_name": "x",
                                                           "index_digest": DIGEST, "build_key": "k",
                                                           "platforms": [{"platform": "linux/amd64"}]}}}))
    with pytest.raises(LockError, match=r"indexes\['cpu/server'\].platforms\[0\]: expected an object"):
        Lock.read(path)


def test_a_matrix_with_several_platforms_has_one_unit_per_platform_and_one_key_per_variant():
    from fakeengine import FakeEngine

    from buildkit.flows.matrix.bake import local_name
    from buildkit.cli.unitspecs import variant_spec
    from buildkit.plan.matrix import matrix_variants

    cfg = load_config(None, {}, {"matrix.archs": (["cpu", "sm_121"], "t"), "matrix.cuda_versions": (["13.1"], "t"),
                                 "build.platform": ("linux/amd64,linux/arm64", "--platform")})
    variants, excluded = matrix_variants(cfg)
    assert [v.unit for v in variants] == ["cpu@linux/amd64", "cpu@linux/arm64", "cuda13.1-sm121@linux/arm64"]
    assert [v.key for v in variants] == ["cpu", "cpu", "cuda13.1-sm121"]
    assert len({v.target_name for v in variants}) == 3 and all(v.platform_split for v in variants)
    assert [local_name(variant_spec(v, FakeEngine())) for v in variants][:2] == ["cpu-linux-amd64", "cpu-linux-arm64"]
    assert [c for c, _ in excluded] == ["sm_121 on linux/amd64"]
    again = variants[1].with_values("nightly", image__version="0.2.0")
    assert again.unit == "cpu@linux/arm64" and again.request.version == "0.2.0"
    single, _ = matrix_variants(load_config(None, {}, {"matrix.archs": (["cpu"], "t")}))
    assert [(v.unit, v.platform_split) for v in single] == [("cpu", False)]


def test_each_build_unit_of_a_matrix_has_a_cache_ref_of_its_own():
    """`{variant}` in build.cache_from/cache_to: a bake's builds export their caches at the same time, and two
    targets of one variant under one ref raced (the engine tier's bake: the registry answered a write 500)."""
    from buildkit.plan.matrix import matrix_variants

    cfg = load_config(None, {}, {"matrix.archs": (["cpu"], "t"), "matrix.targets": (["server", "light"], "t"),
                                 "build.platform": ("linux/amd64,linux/arm64", "--platform")})
    variants, _ = matrix_variants(cfg)
    assert sorted(v.request.cache_name for v in variants) == ["cpu-amd64", "cpu-arm64", "cpu-light-amd64",
                                                              "cpu-light-arm64"]


def test_a_step_of_one_platform_refuses_a_list_in_one_line():
    from buildkit.plan.buildplan import make_request

    cfg = load_config(None, {}, {"build.arch": ("cpu", "--arch"),
                                 "build.platform": ("linux/amd64,linux/arm64", "--platform")})
    with pytest.raises(ConfigError, match="names several platforms: `buildkit build`, `bake` and `nightly`"):
        make_request(cfg)
