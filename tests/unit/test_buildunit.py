"""The build unit's flow (flows/unit/buildunit.py) after a build: verify → lock entry → publish, in that
order, through the in-memory engine (tests/fakeengine.py) and a registry kept in a dict. What is
checked is what a user finds afterwards: the engine's tags, buildkit.lock, the registry's tags."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from buildkit.core.errors import RegistryError
from buildkit.engine.api import ImageInfo
from buildkit.engine.current import use_engine
from buildkit.engine.buildx import BuildResult
from buildkit.flows.unit import buildunit
from buildkit.flows.unit.buildunit import LOADED, Publication, UnitOptions, attempt_unit, run_unit
from buildkit.flows.unit.pipeline import Prepared
from buildkit.oci.imageref import parse_image_ref
from buildkit.oci.registry import ManifestInfo
from buildkit.plan.buildplan import make_plan, make_request
from buildkit.plan.plantypes import Resolved
from buildkit.plan.request import SourceFacts
from buildkit.plan.config import load_config
from buildkit.plan.render import RenderResult
from buildkit.plan.tags import TagSet
from buildkit.plan.tagset import release_tags
from buildkit.source.fetch import SourceInfo
from buildkit.source.patches import PatchQueue
from buildkit.verify.gate import FailedVerification
from fakeengine import FakeEngine

PACKAGES = {"build": {"gcc": "4:12.2.0-3"}, "runtime": {"libgomp1": "12.2.0-14+deb12u1"}}


@pytest.fixture(autouse=True)
def _packages(monkeypatch):
    """The in-memory engine builds no stages: the lock step's Debian packages (flows/unit/debpackages.py, which
    tests/engine/test_debian_packages_docker.py runs for real) are given."""
    monkeypatch.setattr(buildunit, "debian_packages", lambda prepared, result, options, engine: PACKAGES)

COMMIT = "c0ffee" + "0" * 34
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = b'{"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}'
CONFIG_DIGEST = "sha256:" + hashlib.sha256(CONFIG).hexdigest()
# the one image's manifest: its digest is the image's id, as on the containerd store
BODY = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST, "layers": [],
                   "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": CONFIG_DIGEST,
                              "size": len(CONFIG)}}).encode()
IMAGE_ID = "sha256:" + hashlib.sha256(BODY).hexdigest()
REPO = "registry.test/llama"
TAGS = TagSet(immutable=("1.0.0-nightly.1-cpu", "sha-c0ffee0-cpu"), moving=("nightly-cpu",))


class MemoryRegistry:
    """The registry calls publishing makes, on a dict: {tag: digest} of one repository."""

    host = "registry.test"

    def __init__(self) -> None:
        self.tags: dict[str, str] = {}
        self.bodies: dict[str, bytes] = {}
        self.blobs: dict[str, bytes] = {}

    def head_manifest(self, repo: str, reference: str) -> ManifestInfo | None:
        digest = self.tags.get(reference, reference if reference in self.bodies else None)
        return None if digest is None else ManifestInfo(digest, MANIFEST, len(self.bodies[digest]))

    def get_manifest(self, repo: str, reference: str) -> tuple[bytes, str, str]:
        info = self.head_manifest(repo, reference)
        if info is None:
            raise RegistryError(f"{repo}:{reference} is not in the registry")
        return self.bodies[info.digest], MANIFEST, info.digest

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        self.bodies[digest] = body
        if reference != digest:  # put by digest: no tag
            self.tags[reference] = digest
        return digest

    def blob_exists(self, repo: str, digest: str) -> bool:
        return digest in self.blobs

    def upload_blob(self, repo: str, digest: str, data, size: int) -> None:
        self.blobs[digest] = data if isinstance(data, bytes) else data.read()


class PushingEngine(FakeEngine):
    """The fake engine's image (its manifest is BODY) saved as an OCI archive, as the containerd store saves it:
    publishing pushes that through the registry API, by digest."""

    def __init__(self, registry: MemoryRegistry, **kwargs) -> None:
        super().__init__(**kwargs)
        self.registry = registry

    def save(self, ref: str, dest: Path) -> Path:
        self.calls.append(("save", ref))
        files = {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}',
                 "index.json": json.dumps({"schemaVersion": 2, "manifests": [
                     {"mediaType": MANIFEST, "digest": IMAGE_ID, "size": len(BODY)}]}).encode(),
                 f"blobs/sha256/{IMAGE_ID.split(':')[1]}": BODY, f"blobs/sha256/{CONFIG_DIGEST.split(':')[1]}": CONFIG}
        with tarfile.open(dest, "w") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return dest

    def push(self, ref: str, *, stream=None) -> None:  # docker push: what has no digest before it (classic store)
        super().push(ref, stream=stream)
        image = self.images[ref]
        self.registry.bodies[image.id] = BODY
        self.registry.tags[ref.rsplit(":", 1)[1]] = image.id


def prepared_unit(tmp_path: Path) -> Prepared:
    cfg = load_config(None, env={}, overrides={"build.arch": ("cpu", "test"), "image.name": (REPO, "test")})
    facts = SourceFacts(url="https://example.invalid/fork", commit=COMMIT, commit_time=1767225600,
                        build_number=1, patch_set_sha256="", patch_names=())
    plan = make_plan(make_request(cfg), Resolved(facts, "t", "9.9.9"))
    rendered = RenderResult(context_dir=tmp_path / "context", dockerfile=tmp_path / "context" / "Dockerfile",
                            dockerfile_sha256="d" * 64)
    source = SourceInfo(url=facts.url, ref="master", commit=COMMIT, commit_time=facts.commit_time, build_number=1,
                        subject="", fetched=False, bytes_fetched=0)
    return Prepared(plan=plan, rendered=rendered, source=source, patches=PatchQueue(tmp_path, (), "", ()),
                    cuda_root=None, resolved=Resolved(facts, "t", "9.9.9"))


def loaded(engine: FakeEngine, prepared: Prepared) -> BuildResult:
    """The build as the bake left it: the image in the engine under the plan's tags."""
    image = ImageInfo(id=IMAGE_ID, tags=prepared.plan.tags)
    for ref in (IMAGE_ID, *prepared.plan.tags):
        engine.images[ref] = image
    return BuildResult(digest=IMAGE_ID, config_digest=IMAGE_ID, tags=prepared.plan.tags, seconds=1.0)


def nightly(registry: MemoryRegistry) -> Publication:
    return Publication(registry, parse_image_ref(REPO), TAGS, "1.0.0-nightly.1", how=LOADED)  # type: ignore[arg-type]


def publish_loaded(tmp_path: Path, registry: MemoryRegistry, run=run_unit, **options):
    """The unit's image, already loaded in a pushing engine, run through `run` with the nightly's publication:
    (engine, unit)."""
    engine = PushingEngine(registry)
    prepared = prepared_unit(tmp_path)
    with use_engine(engine):
        unit = run(prepared, UnitOptions(verify=False, publish=nightly(registry), stages=False, **options),
                   engine=engine, built=loaded(engine, prepared))
    return engine, unit


def test_a_unit_that_fails_verification_loses_its_tags_and_is_neither_locked_nor_pushed(tmp_path):
    registry = MemoryRegistry()
    engine = PushingEngine(registry, run_result=lambda image, entrypoint, args: (127, "libgomp.so.1: cannot open"))
    prepared = prepared_unit(tmp_path)
    lock = tmp_path / "buildkit.lock"
    options = UnitOptions(verify=True, lock_path=lock, publish=nightly(registry), stages=False)
    with use_engine(engine):
        built = loaded(engine, prepared)
        unit = attempt_unit(prepared, options, engine=engine, built=built)
        with pytest.raises(FailedVerification, match="failed verification and was removed"):
            run_unit(prepared, options, engine=engine, built=loaded(engine, prepared))
    assert unit.failed == "verify" and unit.error.startswith(f"image {built.tags[0]} failed verification")
    assert unit.report.failures() and unit.entry is None and unit.published is None
    assert ("untag", built.tags) in engine.calls and not any(t in engine.images for t in built.tags)
    assert not lock.exists()
    assert not [c for c in engine.calls if c[0] == "push"] and registry.tags == {}


def test_a_published_unit_is_locked_with_the_registry_digest_and_every_tag(tmp_path):
    registry = MemoryRegistry()
    lock = tmp_path / "buildkit.lock"
    engine, unit = publish_loaded(tmp_path, registry, lock_path=lock, lock_first=False)
    assert not [c for c in engine.calls if c[0] == "push"]  # the engine's copy went up by digest, through the API
    assert [c for c in engine.calls if c[0] == "save"] == [("save", IMAGE_ID)]
    assert registry.blobs == {CONFIG_DIGEST: CONFIG} and registry.bodies[IMAGE_ID] == BODY
    assert registry.tags == {t: IMAGE_ID for t in TAGS.all}
    assert unit.published is not None and unit.published.digest == IMAGE_ID
    assert set(unit.published.added) == set(TAGS.all)
    entry = json.loads(lock.read_text())["builds"]["cpu/server"]
    assert entry["version"] == "1.0.0-nightly.1" and entry["image_digest"] == IMAGE_ID
    assert entry["pushed"] == [f"{REPO}:{t}" for t in TAGS.all] and entry["build_key"] == unit.prepared.plan.build_key
    assert entry["debian_packages"] == PACKAGES  # also where the entry is written after the push only


def test_tags_the_registry_already_has_on_the_digest_are_not_put_again(tmp_path):
    registry = MemoryRegistry()
    registry.bodies[IMAGE_ID] = BODY
    registry.tags["nightly-cpu"] = IMAGE_ID
    _, unit = publish_loaded(tmp_path, registry)
    assert unit.published is not None and "nightly-cpu" not in unit.published.added
    assert registry.tags == {t: IMAGE_ID for t in TAGS.all}


@pytest.mark.parametrize("lock_first", [True, False])
def test_a_refused_publication_pushes_nothing_and_locks_only_the_verified_build_when_asked(tmp_path, lock_first):
    """An immutable tag on another digest stops the push. With lock_first (build --push) the lock keeps
    the built entry, unpublished, for `buildkit push`; the nightly (lock_first=False) locks nothing."""
    registry = MemoryRegistry()
    registry.bodies["sha256:" + "9" * 64] = b"other"
    registry.tags[TAGS.immutable[0]] = "sha256:" + "9" * 64
    lock = tmp_path / "buildkit.lock"
    engine, unit = publish_loaded(tmp_path, registry, attempt_unit, lock_path=lock, lock_first=lock_first)
    assert unit.failed == "publish" and "immutable tags are never overwritten" in unit.error
    assert not [c for c in engine.calls if c[0] == "push"]
    assert registry.tags == {TAGS.immutable[0]: "sha256:" + "9" * 64}
    if lock_first:
        entry = json.loads(lock.read_text())["builds"]["cpu/server"]
        assert entry["image_digest"] == IMAGE_ID and entry.get("pushed") in (None, [])
    else:
        assert not lock.exists()


def test_a_unit_locked_without_publishing_keeps_its_local_tags(tmp_path):
    engine = FakeEngine()
    prepared = prepared_unit(tmp_path)
    lock = tmp_path / "buildkit.lock"
    with use_engine(engine):
        built = loaded(engine, prepared)
        unit = run_unit(prepared, UnitOptions(verify=False, lock_path=lock, stages=False), engine=engine, built=built)
    entry = json.loads(lock.read_text())["builds"]["cpu/server"]
    assert entry["tags"] == list(built.tags) and entry["image_digest"] == IMAGE_ID
    assert entry["debian_packages"] == PACKAGES  # both stages' packages, with the entry (issue 41)
    assert unit.published is None and all(t in engine.images for t in built.tags)
    assert not [c for c in engine.calls if c[0] in ("untag", "push")]


@pytest.mark.parametrize("verify", [False, True])
def test_bake_locks_each_unit_it_built_and_verified_and_no_other(tmp_path, monkeypatch, verify):
    """`buildkit bake`'s flow (matrix.bake_locked): the bake, then each unit through the build-unit flow;
    the fake engine's image cannot pass verification (it saves no files), so verify=True locks nothing."""
    from buildkit.engine.buildx import BuildOptions
    from buildkit.flows.matrix import bake as matrix
    from buildkit.flows.unit.spec import VariantSpec
    from buildkit.cli.unitspecs import unit_spec

    prepared = prepared_unit(tmp_path)
    engine = FakeEngine()
    variant = VariantSpec("cpu", unit_spec(load_config(None, env={}, overrides={}), engine,
                                           request=prepared.plan.request))
    monkeypatch.setattr(matrix, "prepare_matrix", lambda variants, work, engine, **_: ({"cpu": prepared}, {}))
    lock = tmp_path / "buildkit.lock"
    with use_engine(engine):
        (build,), indexes, _ = matrix.bake_locked([variant], BuildOptions(progress="plain"), tmp_path / "work", lock,
                                                  engine=engine, verify=verify)
    assert indexes == [] and [c[0] for c in engine.calls][:1] == ["bake"]
    assert build.outcome is not None and build.outcome.result is not None
    if verify:
        assert not build.ok and build.unit is not None and build.unit.failed == "verify"
        assert ("untag", build.outcome.result.tags) in engine.calls and not lock.exists()
    else:
        assert build.ok and build.unit is not None and build.unit.entry is not None
        entry = json.loads(lock.read_text())["builds"]["cpu/server"]
        assert entry["image_digest"] == build.outcome.result.digest and entry["tags"] == list(build.outcome.result.tags)


def test_a_ci_job_unit_replaces_its_build_key_tag_and_locks_nothing(tmp_path):
    """`nightly --job` (BY_DIGEST, force): the same build key is the same inputs, so its tag may move;
    without an OCI archive the loaded image is saved from the engine and goes up by digest."""
    from buildkit.flows.unit.buildunit import BY_DIGEST

    registry = MemoryRegistry()
    registry.bodies["sha256:" + "9" * 64] = b"an earlier push"
    key_tag = "bk-" + "b" * 24 + "-cpu"
    registry.tags[key_tag] = "sha256:" + "9" * 64
    engine = PushingEngine(registry)
    prepared = prepared_unit(tmp_path)
    tags = TagSet((), ()).plus(key_tag, "build_key", immutable=True)  # as nightly --job makes it: by its role
    publication = Publication(registry, parse_image_ref(REPO), tags, "1.0.0-nightly.1",  # type: ignore[arg-type]
                              how=BY_DIGEST, force=True)
    with use_engine(engine):
        unit = run_unit(prepared, UnitOptions(verify=False, publish=publication, stages=False),
                        engine=engine, built=loaded(engine, prepared))
    assert registry.tags == {key_tag: IMAGE_ID} and unit.published is not None and unit.published.digest == IMAGE_ID
    assert unit.entry is None and not (tmp_path / "buildkit.lock").exists()


TESTS_ID = "sha256:" + "7" * 64
TESTS_TAG = "bk-" + "b" * 24 + "-cpu-tests"


class EngineBuildingTests(PushingEngine):
    """Builds the tests target as buildx would report it (its digest, loaded under its tag), or fails it."""

    def __init__(self, registry: MemoryRegistry, *, fail: bool = False) -> None:
        super().__init__(registry)
        self.fail = fail

    def build(self, spec, session, on_line, *, stream, tty=False):
        from buildkit.engine.api import Finished, ImageDigests

        self.calls.append(("build", spec, session))
        if self.fail or spec.target != "tests":
            on_line('ERROR: failed to solve: process "cmake --build /build --target test-backend-ops" did not complete')
            return Finished(code=1, seconds=1.0, tty=False)
        for ref in (TESTS_ID, *spec.tags):
            self.images[ref] = ImageInfo(id=TESTS_ID, tags=spec.tags)
        return Finished(code=0, seconds=1.0, tty=False, images={"": ImageDigests(TESTS_ID, TESTS_ID)})


def test_a_published_unit_pushes_its_tests_image_after_the_image_under_its_own_tag_only(tmp_path):
    """UnitOptions.tests with a publication (a nightly unit, build --tests --push; issue 46): the tests target is
    built once the image is verified, from the same context, labelled with the image's digest, and pushed after
    the image under the publication's tests tag alone (no release tag on it)."""
    from buildkit.flows.unit.testsimage import TESTS_LABEL

    registry = MemoryRegistry()
    engine = EngineBuildingTests(registry)
    prepared = prepared_unit(tmp_path)
    publication = replace(nightly(registry), tests_tag=TESTS_TAG)
    with use_engine(engine):
        unit = run_unit(prepared, UnitOptions(verify=False, publish=publication, tests=True, stages=False),
                        engine=engine, built=loaded(engine, prepared))
    (spec,) = [c[1] for c in engine.calls if c[0] == "build"]
    assert spec.target == "tests" and spec.labels == ((TESTS_LABEL, IMAGE_ID),)
    assert spec.tags == (f"{prepared.plan.tags[0]}-tests",) and spec.context == prepared.rendered.context_dir
    assert registry.tags == {**{t: IMAGE_ID for t in TAGS.all}, TESTS_TAG: TESTS_ID}
    # the image first (saved from the engine, up by digest), then the tests image (the fake's classic store)
    assert [c[0] for c in engine.calls if c[0] in ("save", "push")] == ["save", "push"]
    assert [c[1] for c in engine.calls if c[0] == "push"] == [f"{REPO}:{TESTS_TAG}"]
    assert unit.tests is not None and unit.tests.reference == f"{REPO}@{TESTS_ID}"
    assert unit.published is not None and unit.published.digest == IMAGE_ID


def test_a_tests_image_that_does_not_build_fails_the_unit_before_anything_is_pushed(tmp_path):
    registry = MemoryRegistry()
    engine = EngineBuildingTests(registry, fail=True)
    prepared = prepared_unit(tmp_path)
    with use_engine(engine):
        unit = attempt_unit(prepared, UnitOptions(verify=False, publish=replace(nightly(registry), tests_tag=TESTS_TAG),
                                                  tests=True, stages=False),
                            engine=engine, built=loaded(engine, prepared))
    assert unit.failed == "tests" and "test-backend-ops" in unit.error and unit.published is None
    assert registry.tags == {} and not [c for c in engine.calls if c[0] == "push"]


def test_no_tag_names_the_digest_before_it_is_signed(tmp_path):
    """Issue 48: the bytes go up by digest, the signer signs, and only then is any tag put on it, the build-key
    tag last: a kill before the signature leaves no tag on an unsigned digest."""
    from buildkit.flows.unit import buildunit as flow

    seen: list[dict[str, str]] = []
    tags = TAGS.plus("bk-" + "b" * 24 + "-cpu", "build_key", immutable=True)

    def sign_step(entry, signer):
        def sign(client, repository, digest):
            seen.append(dict(registry.tags))
            assert registry.bodies[digest] == BODY  # the bytes are there, by digest
            return ("signed",)
        return sign

    put: list[str] = []

    class Recording(MemoryRegistry):
        def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
            put.append(reference)
            return super().put_manifest(repo, reference, body, media_type)

    registry = Recording()
    engine = PushingEngine(registry)
    prepared = prepared_unit(tmp_path)
    publication = Publication(registry, parse_image_ref(REPO), tags, "1.0.0-nightly.1",  # type: ignore[arg-type]
                              how=LOADED, signer=object())  # type: ignore[arg-type]
    with use_engine(engine), pytest.MonkeyPatch.context() as patch:
        patch.setattr(flow, "sign_step", sign_step)
        unit = run_unit(prepared, UnitOptions(verify=False, publish=publication, stages=False),
                        engine=engine, built=loaded(engine, prepared))
    assert seen == [{}] and unit.published is not None and unit.published.signed == ("signed",)
    assert put[0] == IMAGE_ID and put[-1] == "bk-" + "b" * 24 + "-cpu"  # by digest first, the build-key tag last
    assert put.index(TAGS.immutable[0]) < put.index("nightly-cpu")  # immutable tags, then the moving ones


def test_a_first_come_tag_on_another_image_is_not_among_the_pushed_references(tmp_path):
    """Issue 48: sha-<commit>-<variant> names the first build of a commit; a later build of it leaves the tag
    where it is, and the lock's pushed list does not claim it."""
    registry = MemoryRegistry()
    other = "sha256:" + "9" * 64
    registry.bodies[other] = b"the first build of this commit"
    registry.tags["sha-c0ffee0-cpu"] = other
    lock = tmp_path / "buildkit.lock"
    tags = release_tags("1.0.0", COMMIT, "cpu", default_variant=False)  # with their roles
    assert "sha-c0ffee0-cpu" in tags.immutable and tags.role("sha-c0ffee0-cpu") == "sha"
    engine = PushingEngine(registry)
    prepared = prepared_unit(tmp_path)
    publication = Publication(registry, parse_image_ref(REPO), tags, "1.0.0", how=LOADED)  # type: ignore[arg-type]
    with use_engine(engine):
        unit = run_unit(prepared, UnitOptions(verify=False, publish=publication, stages=False, lock_path=lock,
                                              lock_first=False), engine=engine, built=loaded(engine, prepared))
    assert registry.tags["sha-c0ffee0-cpu"] == other and registry.tags["1.0.0-cpu"] == registry.tags["cpu"] == IMAGE_ID
    assert unit.published is not None and f"{REPO}:sha-c0ffee0-cpu" not in unit.published.pushed
    entry = json.loads(lock.read_text())["builds"]["cpu/server"]
    assert entry["pushed"] == [f"{REPO}:{t}" for t in tags.all if t != "sha-c0ffee0-cpu"] and len(entry["pushed"]) > 2
