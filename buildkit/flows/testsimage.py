"""The tests image of a build (`buildkit build --tests`): the Dockerfile's `tests` target (templates/_tests.j2),
the image target plus the fork's own /app/test-backend-ops, built right after the image from the same context,
build stage and ccache, and loaded as `<image tag>-tests` for `buildkit gpu-check`.

No image target depends on the tests stages, so the image itself (its bytes, its digest, its lock entry) is
what it is without them. The tests image carries none of buildkit's labels: a lookup by build key or variant
label (the nightly's, `buildkit push`'s) must never find it instead of the image.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from buildkit.engine.buildx import BuildOptions, BuildResult, run_build
from buildkit.flows.buildspec import build_spec

if TYPE_CHECKING:
    from buildkit.engine.api import OutStream
    from buildkit.flows.pipeline import Prepared

TESTS_TARGET = "tests"
TESTS_LABEL = "org.llama-buildkit.tests-of"  # the image (manifest digest, else image id) it was made with


def tests_tag(image_tag: str) -> str:
    """`repo:cpu` -> `repo:cpu-tests` (`repo` -> `repo:latest-tests`)."""
    name, _, tag = image_tag.rpartition(":")
    if not name or "/" in tag:
        return f"{image_tag}:latest-tests"
    return f"{name}:{tag}-tests"


def build_tests_image(prepared: Prepared, options: BuildOptions, image: BuildResult, work_dir: Path, *,
                      stream: OutStream | None = None) -> str:
    """Build and load the tests target of prepared's context; its tag."""
    tag = tests_tag(image.tags[0])
    spec = build_spec(prepared.plan, prepared.rendered, options, work_dir / "tests-metadata.json")
    spec = replace(spec, target=TESTS_TARGET, tags=(tag,), labels=((TESTS_LABEL, image.digest or image.config_digest),),
                   annotations=(), cache_to=(), oci_archive=None, load=True, push=False, provenance=False)
    run_build(spec, options.session(work_dir / "tests-metadata.json"), stream=stream)
    return tag
