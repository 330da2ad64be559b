"""`buildkit base debian` without the engine or debootstrap: what is asked, the machine's Debian mirror, and the
OCI image written of a root folder (read back with buildkit's own OCI reader)."""

from __future__ import annotations

import hashlib
import json
import tarfile

import pytest
from click.testing import CliRunner

from buildkit.cli.main import main
from buildkit.core.errors import BaseImageError
from buildkit.engine.baseimages import BaseSource, check_base_history, undated_history
from buildkit.flows.setup.debianbase import EPOCH, DEFAULT_PATH, machine_mirror, plan_base, release_time, root_layout
from buildkit.oci.ociindex import write_index_archive
from buildkit.oci.ocilayout import OciArchive


@pytest.mark.parametrize("suite,platforms,tag,message", [
    ("bullseye", "linux/amd64", "local/debian:11", "bookworm or trixie"),
    ("bookworm", "linux/s390x", "local/debian:x", "linux/amd64 and linux/arm64"),
    ("bookworm", "linux/amd64,linux/amd64", "local/debian:x", "names a platform twice"),
    ("bookworm", " , ", "local/debian:x", "names no platform"),
    ("bookworm", "linux/amd64", "local/debian", "give NAME:TAG"),
    ("bookworm", "linux/amd64", "local/Debian:x", "invalid image reference"),
])
def test_what_cannot_be_made_is_one_line_before_any_work(suite, platforms, tag, message):
    with pytest.raises(BaseImageError, match=message):
        plan_base(suite, platforms, tag, mirror="http://deb.example/debian")


def test_the_cli_says_it_in_one_line(tmp_path):
    result = CliRunner().invoke(main, ["base", "debian", "--platform", "linux/riscv64", "--tag", "x:y"])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and result.output.startswith("error: ")


def test_two_platforms_keep_their_order_and_the_mirror_must_be_a_url():
    base = plan_base("trixie", "linux/arm64,linux/amd64", "local/debian:trixie", mirror="http://deb.example/debian")
    assert base.platforms == ("linux/arm64", "linux/amd64") and base.suite == "trixie"
    with pytest.raises(BaseImageError, match="--mirror"):
        plan_base("trixie", "linux/amd64", "local/debian:trixie", mirror="deb.example/debian; rm -rf /")


def test_the_machines_main_debian_archive_is_found_in_either_format(tmp_path):
    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n"
                      "Components: main\n\n# comment\nTypes: deb-src deb\nURIs: http://mirror.example/debian\n"
                      "Suites: bookworm bookworm-updates\nComponents: main\n")
    assert machine_mirror(deb822, tmp_path / "none") == "http://mirror.example/debian"
    one = tmp_path / "sources.list"
    one.write_text("deb http://security.example/debian-security bookworm-security main\n"
                   "deb [signed-by=/k.gpg] http://one.example/debian trixie main\n")
    assert machine_mirror(tmp_path / "none", one) == "http://one.example/debian"
    assert machine_mirror(tmp_path / "none", tmp_path / "none") is None


def test_a_root_becomes_an_oci_image_of_one_layer_and_two_become_an_index(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "debian_version").write_text("13.0\n")
    (root / "bin").mkdir()
    (root / "bin" / "sh").symlink_to("dash")
    for arch in ("amd64", "arm64"):
        root_layout(root, f"linux/{arch}", tmp_path / arch, f"test {arch}", "2025-05-20T08:30:00Z")
    with OciArchive(tmp_path / "arm64") as layout:
        image = layout.image(None)
        config = json.loads(image.config_bytes)
        assert (config["architecture"], config["os"]) == ("arm64", "linux")
        assert config["config"] == {"Env": [f"PATH={DEFAULT_PATH}"], "Cmd": ["bash"]}
        # one fixed time, never the run's: BuildKit would date an entry without one by its own cache (issue 47)
        assert config["created"] == "2025-05-20T08:30:00Z"
        assert config["history"] == [{"created": "2025-05-20T08:30:00Z", "created_by": "test arm64"}]
        assert undated_history(config) == 0
        layer, = image.layers
        data = layout.read_blob(layer.digest)
        assert "sha256:" + hashlib.sha256(data).hexdigest() == layer.digest == config["rootfs"]["diff_ids"][0]
    with tarfile.open(tmp_path / "arm64" / "blobs" / "sha256" / layer.digest.split(":")[1]) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["./etc/debian_version"].uid == 0 and members["./bin/sh"].issym()
    # the same root gives the same bytes (no time of its own); two platforms become one index
    root_layout(root, "linux/arm64", tmp_path / "again", "test arm64", "2025-05-20T08:30:00Z")
    with OciArchive(tmp_path / "again") as again:
        assert again.image(None).manifest_digest == image.manifest_digest
    digest = write_index_archive([("linux/amd64", tmp_path / "amd64"), ("linux/arm64", tmp_path / "arm64")],
                                 tmp_path / "index.tar", ["docker.io/local/debian:trixie"])
    with OciArchive(tmp_path / "index.tar") as both:
        assert both.image("linux/arm64").manifest_digest == image.manifest_digest
        assert both.image("linux/amd64").config["architecture"] == "amd64"
    assert digest.startswith("sha256:")


def test_the_work_folder_is_removed_only_after_the_mounts_inside_it_are_gone(tmp_path):
    """An interrupted debootstrap can leave /proc or /dev mounted in its root: removing the folder through such
    a mount would delete what the mount shows. A real tmpfs stands in for it."""
    import subprocess

    from buildkit.flows.setup.debianbase import remove_work

    work = tmp_path / "buildkit-base-x"
    inside = work / "root-amd64" / "dev"
    inside.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(inside)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    (inside / "null").write_text("stands for the host's /dev/null")
    try:
        remove_work(work)
    finally:
        subprocess.run(["umount", str(inside)], capture_output=True)
    assert not work.exists()


# ------------------------------------------------------- issue 50 item 5: an unreachable base, said with the way out

def test_a_base_no_one_can_provide_names_the_whole_offline_path():
    """The build's refusal names what a CUDA arch needs besides --os-image (--provider wheels), and how to make
    a base here; doctor's bases check warns with the same (it said all ok while docker.io was out of reach)."""
    from fakeengine import FakeEngine

    from buildkit.core.errors import BaseImageError
    from buildkit.engine.api import ImageInfo
    from buildkit.engine.current import use_engine
    from buildkit.engine.baseimages import resolve_base_images
    from buildkit.flows.doctor.basecheck import check_bases
    from buildkit.core.check import Status

    gone = "127.0.0.1:1/nobody/cuda:13.1.0-devel-ubuntu24.04"  # a registry that refuses connections
    engine = FakeEngine()
    engine.images["local/debian:bookworm"] = ImageInfo(id="sha256:" + "2" * 64)
    with use_engine(engine):
        with pytest.raises(BaseImageError) as caught:
            resolve_base_images([gone], engine=engine)
        said = str(caught.value)
        assert "--provider wheels" in said and "--os-image" in said and "buildkit base debian" in said
        check = check_bases([gone, "local/debian:bookworm"], engine)
        assert check.status == Status.WARNED and gone in check.detail and "local/debian" not in check.detail
        assert "--provider wheels" in check.fix and "buildkit base debian" in check.fix
        assert check_bases(["local/debian:bookworm"], engine).status == Status.PASSED
        offline = check_bases([gone], engine, offline=True)
        assert offline.status == Status.WARNED and "its registry was not asked" in offline.detail


def test_the_base_is_dated_by_its_suites_release_file(tmp_path):
    lists = tmp_path / "var/lib/apt/lists"
    lists.mkdir(parents=True)
    assert release_time(tmp_path, "bookworm") == EPOCH  # none: the epoch, never the time of the run
    (lists / "deb.debian.org_debian_dists_bookworm_Release").write_text(
        "Origin: Debian\nSuite: stable\nCodename: bookworm\nDate: Sat, 10 May 2025 08:27:30 UTC\n")
    assert release_time(tmp_path, "bookworm") == "2025-05-10T08:27:30Z"
    (lists / "deb.debian.org_debian_dists_trixie_Release").write_text("Date: not a date\n")
    assert release_time(tmp_path, "trixie") == EPOCH
    (lists / "deb.debian.org_debian_dists_trixie_Release").unlink()
    (lists / "deb.debian.org_debian_dists_trixie_Release").mkdir()  # not a file: not read
    assert release_time(tmp_path, "trixie") == EPOCH


def test_a_base_without_history_times_is_refused_in_one_line(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    root_layout(root, "linux/amd64", tmp_path / "dated", "dated", "2025-05-20T08:30:00Z")
    with OciArchive(tmp_path / "dated") as layout:
        digest = layout.image(None).manifest_digest
    check_base_history((BaseSource("local/dated:x", digest, tmp_path / "dated"),))  # passes
    check_base_history((BaseSource("registry.example/x:y", "sha256:" + "0" * 64),))  # not read by content here
    # what an older `buildkit base debian` wrote: one history entry, no created
    config = {"history": [{"created_by": "buildkit base debian"}], "rootfs": {"diff_ids": ["sha256:" + "1" * 64]}}
    assert undated_history(config) == 1
    assert undated_history({"history": [], "rootfs": {"diff_ids": ["sha256:" + "1" * 64] * 2}}) == 2
    assert undated_history({"history": [{"created": "2025-01-01T00:00:00Z"}, {"created": "x", "empty_layer": True}],
                            "rootfs": {"diff_ids": ["sha256:" + "1" * 64]}}) == 0
    for junk in ({"history": 3, "rootfs": []}, {"history": {"a": 1}, "rootfs": {"diff_ids": "x"}}, {}):
        assert undated_history(junk) == 0  # a configuration that is no image's: nothing to date, no traceback
    layout = tmp_path / "dated"
    index = json.loads((layout / "index.json").read_text())
    manifest_path = layout / "blobs/sha256" / index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads(manifest_path.read_text())
    old = json.loads((layout / "blobs/sha256" / manifest["config"]["digest"].split(":")[1]).read_text())
    del old["history"][0]["created"]
    body = json.dumps(old).encode()
    (layout / "blobs/sha256" / hashlib.sha256(body).hexdigest()).write_bytes(body)
    manifest["config"].update(digest="sha256:" + hashlib.sha256(body).hexdigest(), size=len(body))
    mbody = json.dumps(manifest).encode()
    (layout / "blobs/sha256" / hashlib.sha256(mbody).hexdigest()).write_bytes(mbody)
    undated = BaseSource("local/old:x", "sha256:" + hashlib.sha256(mbody).hexdigest(), layout)
    with pytest.raises(BaseImageError) as refused:
        check_base_history((undated,))
    message = str(refused.value)
    assert "\n" not in message and message.startswith("base image local/old:x has 1 history entry without a created")
    assert "buildkit base debian" in message
