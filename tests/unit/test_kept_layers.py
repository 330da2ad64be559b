"""oci/keptlayers.py: the lower layers applied once and kept; a later call links them in and applies the
top layers on the copy, with the same result as applying every layer, and the kept copy unchanged."""

from __future__ import annotations

from buildkit.oci.keptlayers import apply_kept
from buildkit.oci.ocilayout import OciArchive
from buildkit.oci.rootfs import apply_layers
from buildkit.verify.imagetree import built_layers
from test_gpu_run import layer_blob, lower, upper, write_layout
from test_sourcetree import snapshot


def test_kept_lower_layers_give_the_same_root_and_stay_as_they_were(tmp_path):
    write_layout(tmp_path / "layout", [layer_blob(lower()), layer_blob(upper())])
    kept = tmp_path / "kept"
    with OciArchive(tmp_path / "layout") as archive:
        image = archive.image("linux/amd64")
        whole = apply_layers(image, tmp_path / "whole")
        first = apply_kept(image, tmp_path / "first", lambda rel: True, "all", kept, fresh=1)
        [folder] = list(kept.iterdir())
        before = snapshot(folder / "root")
        second = apply_kept(image, tmp_path / "second", lambda rel: True, "all", kept, fresh=1)
    assert snapshot(first.root) == snapshot(second.root) == snapshot(whole.root)
    assert first.origin == second.origin == whole.origin and second.skipped == whole.skipped
    # the top layer replaced app/bin/tool and whited out data/old.txt in the copy, not in the kept layers
    assert snapshot(folder / "root") == before
    assert (folder / "root" / "app" / "bin" / "tool").read_bytes() == b"tool v1"
    assert (folder / "root" / "data" / "old.txt").is_file()
    assert not (second.root / "data" / "old.txt").exists()


def test_nothing_is_kept_when_every_layer_is_the_builds(tmp_path):
    write_layout(tmp_path / "layout", [layer_blob(lower()), layer_blob(upper())])
    with OciArchive(tmp_path / "layout") as archive:
        applied = apply_kept(archive.image("linux/amd64"), tmp_path / "root", lambda rel: True, "all",
                             tmp_path / "kept", fresh=2)
    assert (applied.root / "app" / "bin" / "tool").read_bytes() == b"tool v2"
    assert not (tmp_path / "kept").exists()


def test_the_builds_own_layers_start_at_the_first_copy_into_app():
    history = [{"created_by": "debootstrap"}, {"created_by": "RUN /bin/sh -c apt-get install"},
               {"created_by": "COPY /lib64/ /usr/local/cuda/lib64/ # buildkit"},
               {"created_by": "ENV LD_LIBRARY_PATH=/app/lib", "empty_layer": True},
               {"created_by": "COPY --chown=0:0 /app/lib/ /app/lib/ # buildkit"},
               {"created_by": "COPY /app/bin/llama-server /app/llama-server # buildkit"},
               {"created_by": "WORKDIR /app"}]
    config = {"history": history, "rootfs": {"diff_ids": ["sha256:x"] * 6}}
    assert built_layers(config) == 3
    assert built_layers({"history": history[:2], "rootfs": {"diff_ids": ["sha256:x"] * 6}}) == 6  # no history
