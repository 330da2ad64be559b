"""The tests image of a build: the Dockerfile's `tests` target (templates/_tests.j2), the image target plus the
fork's own /app/test-backend-ops, built right after the image is verified, from the same context, build stage
and ccache, and loaded as `<image tag>-tests` for `buildkit gpu-check` (`build --tests`, and a nightly unit).

No image target depends on the tests stages, so the image itself (its bytes, its digest, its lock entry, its
build key) is what it is without them. The tests image carries none of buildkit's labels: a lookup by build
key or variant label (the nightly's, `buildkit push`'s) must never find it instead of the image. Its one label,
TESTS_LABEL, names the image it was made with.

Published (`build --tests --push`, a nightly unit), it goes to the registry under one tag only, the image's
build-key tag with `-tests` (`bk-<key>-<variant>-tests`: the inputs that made the image made it too), and the
publication gives its digest: a gate pulls it by digest. It never gets a release tag (version, variant,
latest, sha, nightly), so no one pulls it in place of the server. It is not signed: it is the gate's input,
not a release artifact; buildkit's signature attests the image's provenance and SBOM, which are not the tests
image's, and each consumer holds its digest from the publication that pushed it, or finds it from a release
through that release's own labels and checks that it names that release (`tests_of_release`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from buildkit.core.errors import BuildkitError
from buildkit.engine.buildx import BuildOptions, BuildResult
from buildkit.flows.unit.buildspec import build_spec
from buildkit.oci.digest import Digest
from buildkit.plan.inputs import BUILD_KEY_LABEL
from buildkit.plan.tags import TagSet, build_key_tag
from buildkit.release.artifact import Image, Published
from buildkit.release.publish import local_image, publish, image_labels
from buildkit.verify.buildfailure import run_build_explained

if TYPE_CHECKING:
    from buildkit.engine.api import Engine, Images, OutStream
    from buildkit.flows.unit.pipeline import Prepared
    from buildkit.oci.imageref import ImageRef
    from buildkit.oci.registry import RegistryClient
    from buildkit.plan.archs import Arch

TESTS_TARGET = "tests"
TESTS_LABEL = "org.llama-buildkit.tests-of"  # the image (manifest digest, else image id) it was made with
TESTS_SUFFIX = "-tests"
CPU_BACKEND = "CPU"  # test-backend-ops' name of ggml's CPU backend (gpu_check.backend)
_KEY = re.compile(r"[0-9a-f]{24,128}")


@dataclass(frozen=True)
class BuiltTestsImage:
    """A built tests image: its local tag, its manifest digest and OCI archive (the reproducible exporter's;
    "" and None on the classic store), and where it went in the registry once pushed (`repo@digest`)."""
    tag: str
    digest: str = ""
    archive: Path | None = None
    reference: str = ""


def tests_tag(image_tag: str) -> str:
    """`repo:cpu` -> `repo:cpu-tests` (`repo` -> `repo:latest-tests`)."""
    name, _, tag = image_tag.rpartition(":")
    if not name or "/" in tag:
        return f"{image_tag}:latest{TESTS_SUFFIX}"
    return f"{name}:{tag}{TESTS_SUFFIX}"


def registry_tests_tag(build_key: str, variant: str) -> str:
    """The tests image's one registry tag: the image's build-key tag, `-tests` after it."""
    return build_key_tag(build_key, variant) + TESTS_SUFFIX


def builds_tests(arch: Arch, backend: str) -> bool:
    """Whether a nightly unit builds and pushes its tests image: every CUDA variant (the GPU gate's kernel suite),
    and any variant when gpu_check.backend is the CPU (whose backend every image has: the CPU stand-in's gate)."""
    return arch.is_cuda or backend == CPU_BACKEND


def build_tests_image(prepared: Prepared, options: BuildOptions, image: BuildResult, work_dir: Path, *,
                      stream: OutStream | None = None, engine: Engine) -> BuiltTestsImage:
    """Build the tests target of prepared's context (loaded with options.load, in an OCI archive of its own with
    the reproducible exporter, beside the image's, which a publication still pushes)."""
    tag = tests_tag(image.tags[0]) if image.tags else tests_tag(prepared.plan.tags[0])
    metadata = work_dir / "tests-metadata.json"
    spec = build_spec(prepared.plan, prepared.rendered, options, metadata)
    archive = work_dir / "tests.oci.tar" if options.reproducible else None
    spec = replace(spec, target=TESTS_TARGET, tags=(tag,), labels=((TESTS_LABEL, image.digest or image.config_digest),),
                   annotations=(), cache_to=(), oci_archive=archive, load=options.load or archive is None,
                   push=False, provenance=False)
    built = run_build_explained(spec, options.session(metadata), stream=stream, engine=engine)
    return BuiltTestsImage(tag, built.digest if archive is not None else "", archive)


def push_tests_image(client: RegistryClient, repository: ImageRef, tests: BuiltTestsImage, tag: str, *,
                     stream: OutStream | None = None, engine: Images) -> BuiltTestsImage:
    """tests under its registry tag (bk-<key>-<variant>-tests; the same inputs may replace it), unsigned."""
    if tests.archive is not None:
        artifact = Image(tests.digest, archive=tests.archive)
    else:  # the classic store: the engine's copy, by docker push
        artifact = Image("", engine_ref=local_image(tests.tag, engine).id)
    done: Published = publish(client, repository, artifact, TagSet((tag,), (), ((tag, "build_key"),)), force=True,
                              stream=stream, engine=engine)
    return replace(tests, digest=done.digest, reference=f"{repository.name}@{done.digest}")


def tests_of_image(client: RegistryClient, repository: ImageRef, tests_digest: str, image_digest: str) -> str:
    """`repo@digest` of the tests image at tests_digest when the registry has it and its TESTS_LABEL names
    image_digest; else why not (a line starting "no tests image: ")."""
    try:
        where = f"{repository.name}@{Digest.parse(tests_digest, 'the tests image').short}"
        if client.head_manifest(repository.repository, tests_digest) is None:
            return f"no tests image: {where} is not in the registry"
        made_with = image_labels(client, repository.repository, tests_digest).get(TESTS_LABEL, "")
    except BuildkitError as exc:
        return f"no tests image: {exc}"
    if made_with != image_digest:
        try:  # (the registry's label: printed only as a digest)
            shown = Digest.parse(made_with).short
        except BuildkitError:
            shown = f"no image (its {TESTS_LABEL} label is not a digest)" if made_with else "no image"
        return f"no tests image: {where} was made with {shown}, not {image_digest[:19]}"
    return f"{repository.name}@{tests_digest}"


def tests_of_release(client: RegistryClient, repository: ImageRef, variant: str) -> str:
    """The tests image of the release under the tag `variant`: found through the release's build-key label
    (bk-<key>-<variant>-tests) and checked to name the release's digest; `repo@digest`, or why not (a line
    starting "no tests image: ")."""
    repo = repository.repository
    try:
        release = client.head_manifest(repo, variant)
        if release is None:
            return f"no tests image: {repository.name}:{variant} does not exist"
        key = image_labels(client, repo, release.digest).get(BUILD_KEY_LABEL, "")
        if not _KEY.fullmatch(key):
            return f"no tests image: {repository.name}:{variant} has no build key label"
        tag = registry_tests_tag(key, variant)
        found = client.head_manifest(repo, tag)
    except BuildkitError as exc:
        return f"no tests image: {exc}"
    if found is None:
        return f"no tests image: {repository.name}:{tag} does not exist (the release was published without one)"
    return tests_of_image(client, repository, found.digest, release.digest)


