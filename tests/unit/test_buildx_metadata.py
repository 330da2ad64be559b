"""buildx's metadata file, as DockerEngine reads it (engine/buildxmetadata.py): the digests a build or a bake
made, each checked before anything names a file or a tag with it; a broken file is one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from buildkit.core.errors import BuildError
from buildkit.engine.api import Finished, ImageDigests
from buildkit.engine.buildxmetadata import with_bake_images, with_build_images
from buildkit.engine.specs import BuildSession

MANIFEST = "sha256:" + "a" * 64
CONFIG = "sha256:" + "b" * 64
DONE = Finished(0, 1.0, False)


def session(tmp_path: Path, document: object) -> BuildSession:
    path = tmp_path / "metadata.json"
    path.write_text(json.dumps(document))
    return BuildSession(metadata_file=path)


def test_a_build_and_a_bake_report_what_they_made(tmp_path):
    made = with_build_images(DONE, session(tmp_path, {"containerimage.digest": MANIFEST,
                                                      "containerimage.config.digest": CONFIG}))
    assert made.images == {"": ImageDigests(MANIFEST, CONFIG)}
    baked = with_bake_images(DONE, session(tmp_path, {"cpu": {"containerimage.digest": MANIFEST}, "other": 1}),
                             ["cpu", "sm120", "other"])
    assert baked.images == {"cpu": ImageDigests(MANIFEST, "")}  # a missing target is the bake's caller's to report
    failed = Finished(1, 1.0, False)
    assert with_build_images(failed, BuildSession(metadata_file=tmp_path / "none.json")) is failed


@pytest.mark.parametrize("document,message", [
    ({"containerimage.digest": "sha256:../../etc/passwd"}, "invalid digest"),
    ({"containerimage.digest": MANIFEST, "containerimage.config.digest": ["x"]}, "invalid digest list"),
    ({"buildx.build.ref": "x"}, "names no image digest"),
    ([MANIFEST], "not a JSON object but list"),
])
def test_a_file_that_names_no_sound_digest_is_one_line(tmp_path, document, message):
    with pytest.raises(BuildError, match=message) as raised:
        with_build_images(DONE, session(tmp_path, document))
    assert "\n" not in str(raised.value)
    with pytest.raises(BuildError, match="invalid digest"):
        with_bake_images(DONE, session(tmp_path, {"cpu": {"containerimage.digest": "sha256:Z"}}), ["cpu"])


def test_a_fifo_in_its_place_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "metadata.json"
    os.mkfifo(fifo)
    with pytest.raises(BuildError, match="no readable metadata file"):
        with_build_images(DONE, BuildSession(metadata_file=fifo))
