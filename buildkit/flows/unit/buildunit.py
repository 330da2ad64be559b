"""One build unit, start to end: build → verify → lock entry → tests image → publish, always in that order.

A unit is one prepared image (flows/unit/pipeline.prepare: source fetched, plan made, context rendered).
Every flow that builds runs its units through here: `build` (buildunit.build), `build --push`
(publishing.build_and_push), each platform of a multi-platform build (multiplatform.build_multi:
verify only, its lock entries go with the index), and, after `docker buildx bake` built the images,
each unit of `bake`, of the nightly and of a nightly CI job (matrix.build_matrix; `built` is then the
bake's result and the build stage is skipped).

The order is what makes a failure safe: an image that fails verification loses its tags
(verify/gate.py) and gets no lock entry; nothing unverified is pushed; the lock's entry of a
publication is written only after the registry has it. A unit asked for its tests image
(flows/unit/testsimage.py: `build --tests`, a nightly unit) builds it once the image is verified, from the
same context; a tests image that does not build fails the unit before anything is pushed, and a
publication pushes it after the image, under its own tag only.
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from collections.abc import Iterator
from typing import Any

from buildkit.core.errors import BuildkitError
from buildkit.core.progress import stage
from buildkit.engine.api import Engine, OutStream
from buildkit.engine.buildx import BuildOptions, BuildResult, check_buildx
from buildkit.flows.unit.buildspec import build_spec
from buildkit.flows.unit.debpackages import debian_packages
from buildkit.flows.unit.compiletimes import compile_curve_path, read_compile_curve, save_compile_curve
from buildkit.flows.unit.testsimage import BuiltTestsImage, build_tests_image, push_tests_image
from buildkit.flows.unit.pipeline import Prepared, check_build_machine, last_build_seconds, prepared_context
from buildkit.flows.unit.spec import UnitSpec
from buildkit.source.cudasource import cuda_object_count
from buildkit.oci.imageref import ImageRef
from buildkit.oci.registry import RegistryClient
from buildkit.plan.tags import TagSet
from buildkit.release.lock import LockEntry
from buildkit.release.lockfile import record, write_lock_entry
from buildkit.flows.unit.signpublished import sign_step
from buildkit.release.artifact import Image, Published, SignStep
from buildkit.release.publish import local_image, publish, tag_locally
from buildkit.release.signer import Signer
from buildkit.verify.report import VerifyReport
from buildkit.verify.gate import FailedVerification, verified_or_removed
from buildkit.verify.buildfailure import run_build_explained


class How(StrEnum):
    """How a verified unit reaches the registry (Publication.how)."""
    RELEASE = "release"  # build --push: the OCI archive through the registry API (the engine's copy then gets the
    #                      first release tag, or loses its tags with keep_loaded=False), else `docker push`
    LOADED = "loaded"  # the nightly: `docker push` of the loaded image, its immutable tags checked free first
    BY_DIGEST = "by-digest"  # a nightly CI job: the OCI archive through the API when there is one, else as LOADED


RELEASE, LOADED, BY_DIGEST = How.RELEASE, How.LOADED, How.BY_DIGEST  # the names the flows import
STAGES = ("build", "verify", "lock", "tests", "publish")


@dataclass(frozen=True)
class Publication:
    """Where a verified unit goes: the registry, its tags (the first immutable one is pushed, the
    others put on its digest) and the version its lock entry then records."""
    client: RegistryClient
    repository: ImageRef
    tags: TagSet
    version: str
    how: How = How.RELEASE
    force: bool = False
    keep_loaded: bool = True  # RELEASE through the archive: False removes the engine's tags after the push
    signer: Signer | None = None  # signs the pushed digest, with the unit's provenance and SBOM attached
    tests_tag: str = ""  # where the unit's tests image goes (testsimage.registry_tests_tag; "": not pushed)


@dataclass(frozen=True)
class UnitOptions:
    verify: bool = True
    lock_path: Path | None = None  # None: no lock entry (a platform of an index: the index's flow writes them)
    # the verified build's entry is written before the push as well, so `buildkit push` can retry a failed
    # push from it; the nightly records published builds only
    lock_first: bool = True
    publish: Publication | None = None
    build: BuildOptions | None = None  # the build stage's (default: the config's)
    tests: bool = False  # also build the tests image (flows/unit/testsimage.py), once the image is verified
    stages: bool = True  # the stage lines on stderr (a bake's units have the bake's log instead)
    stream: Any = None


@dataclass(frozen=True)
class UnitResult:
    prepared: Prepared
    result: BuildResult | None  # None when the build failed; after publish as the engine now holds it
    report: VerifyReport  # no checks when verify was not asked (or did not run)
    entry: LockEntry | None  # what the lock got last
    lock_path: Path | None
    published: Published | None
    seconds: dict[str, float] = field(default_factory=dict)  # per stage that ran
    error: str = ""  # attempt_unit: why it failed ("" when it did not)
    failed: str = ""  # attempt_unit: the stage that failed (one of STAGES)
    tests: BuiltTestsImage | None = None  # UnitOptions.tests: the tests image, and where it was pushed

    @property
    def ok(self) -> bool:
        return not self.error


class _Run:
    """What a unit's run has reached, so a failure can say at which stage and what it kept."""

    def __init__(self, prepared: Prepared, options: UnitOptions, engine: Engine) -> None:
        self.prepared, self.options, self.engine = prepared, options, engine
        self.result: BuildResult | None = None
        self.report = VerifyReport(image="", checks=())
        self.entry: LockEntry | None = None
        self.published: Published | None = None
        self.tests: BuiltTestsImage | None = None
        self.seconds: dict[str, float] = {}
        self.current = ""

    @contextmanager
    def step(self, name: str, detail: str = "") -> Iterator[None]:
        self.current = name
        start = time.monotonic()
        with stage(name, detail) if self.options.stages and detail else nullcontext():
            yield
        self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - start

    def outcome(self, error: str = "") -> UnitResult:
        return UnitResult(self.prepared, self.result, self.report, self.entry, self.options.lock_path,
                          self.published, dict(self.seconds), error, self.current if error else "", self.tests)


def run_unit(prepared: Prepared, options: UnitOptions, *, engine: Engine,
             built: BuildResult | None = None) -> UnitResult:
    """build (unless built: a bake's result) → verify → lock entry → publish. A failure raises, as it
    came (FailedVerification after the image lost its tags). The build stage reads prepared.spec."""
    run = _Run(prepared, options, engine)
    _run(run, built)
    return run.outcome()


def attempt_unit(prepared: Prepared, options: UnitOptions, *, engine: Engine,
                 built: BuildResult | None = None) -> UnitResult:
    """run_unit for one unit of many: a BuildkitError is the result's error (and failed, its stage),
    with what the unit reached (a failed verification's report)."""
    run = _Run(prepared, options, engine)
    try:
        _run(run, built)
    except FailedVerification as exc:
        run.report = exc.report
        return run.outcome(str(exc))
    except BuildkitError as exc:
        return run.outcome(str(exc))
    return run.outcome()


def _run(run: _Run, built: BuildResult | None) -> None:
    prepared, options, engine = run.prepared, run.options, run.engine
    result = built if built is not None else _build(run)
    run.result = result
    if options.verify:
        with run.step("verify", result.tags[0] if result.tags else ""):
            run.report = verified_or_removed(prepared.plan, result.tags, prepared.cuda_roots or prepared.cuda_root,
                                             result.oci_archive, engine=engine)
    entry = None  # the unit's lock entry, made once for its build (again only when the publication untagged it)
    if options.lock_path is not None and (options.publish is None or options.lock_first):
        with run.step("lock"):
            entry = _entry(prepared, result, _packages(run, result), engine)
            write_lock_entry(options.lock_path, entry)
            run.entry = entry
    if options.tests:
        build = options.build or _options(prepared)
        if options.publish is not None and not options.publish.keep_loaded:  # --no-load: its archive only
            build = replace(build, load=False)
        with run.step("tests", f"{prepared.plan.request.variant}, its tests target"):
            run.tests = build_tests_image(prepared, build, result, prepared.rendered.context_dir.parent,
                                          stream=options.stream, engine=engine)
    if options.publish is None:
        return
    target = options.publish
    sign = None
    if target.signer is not None:  # the signed provenance lists the build stage's packages: read them first
        entry = entry or _entry(prepared, result, _packages(run, result), engine)
        sign = sign_step(replace(entry, version=target.version), target.signer)
    with run.step("publish"):
        built = result
        run.published, result = _publish(target, result, options, sign, prepared.plan.request.platform, engine)
        if run.tests is not None and target.tests_tag:  # after the image: unsigned, never a release tag
            run.tests = push_tests_image(target.client, target.repository, run.tests, target.tests_tag,
                                         stream=options.stream, engine=engine)
    run.result = result
    if options.lock_path is not None:
        with run.step("lock"):
            if entry is None or result is not built:  # (the engine's tags of an image pushed with --no-load: gone)
                packages = entry.debian_packages if entry is not None else None
                entry = _entry(prepared, result, packages or _packages(run, result), engine)
            run.entry = record(options.lock_path, entry, run.published, target.version)


def _entry(prepared: Prepared, result: BuildResult, packages: dict[str, Any] | None, engine: Engine) -> LockEntry:
    """The unit's lock entry: its plan's and what its build produced (with the build stage's packages)."""
    return LockEntry.of(prepared.plan, prepared.outcome(result, debian_packages=packages, engine=engine))


def _packages(run: _Run, result: BuildResult) -> dict[str, Any]:
    """The lock entry's debian_packages of result (flows/unit/debpackages.py)."""
    options = run.options.build or _options(run.prepared)
    return debian_packages(run.prepared, result, options, run.engine)


def _options(prepared: Prepared) -> BuildOptions:
    """How the export of the build stage's packages runs: the unit's spec's builder (a bake's unit may have none)."""
    return prepared.spec.build if prepared.spec is not None else BuildOptions()


def _build(run: _Run) -> BuildResult:
    prepared, options, engine = run.prepared, run.options, run.engine
    unit = prepared.spec
    if unit is None:
        raise TypeError("run_unit builds a unit prepared from its spec (pipeline.prepare): give that, or built")
    build = options.build or unit.build
    check_build_machine(prepared.plan.request, engine, options.stream)
    metadata = prepared.rendered.context_dir.parent / "metadata.json"
    spec = build_spec(prepared.plan, prepared.rendered, build, metadata)
    request = prepared.plan.request
    last = last_build_seconds(unit.lock_path, request)
    curves = compile_curve_path(unit.cache_root, request)
    cuda = cuda_object_count(prepared.rendered.context_dir / "src", prepared.plan.cmake_args) \
        if request.arch.is_cuda else None
    with run.step("build", f"{request.variant}" + (f", last build took {last:.0f}s" if last else "")):
        result = run_build_explained(spec, build.session(metadata), stream=options.stream, last_seconds=last,
                                     last_curve=read_compile_curve(curves), cuda_objects=cuda,
                                     engine=engine)
    if result.compile_curve is not None:
        save_compile_curve(curves, result.compile_curve)
    return result


def _publish(target: Publication, result: BuildResult, options: UnitOptions, sign: SignStep | None,
             platform: str, engine: Engine) -> tuple[Published, BuildResult]:
    """(what the registry got, the build as the engine now holds it)."""
    client, repository, tags = target.client, target.repository, target.tags
    first = f"{repository.name}:{tags.immutable[0]}"
    archive = result.oci_archive if target.how in (RELEASE, BY_DIGEST) else None
    if archive is not None:
        artifact = Image(result.digest, archive=archive, platform=platform)
        how = "the built OCI archive"
    else:  # RELEASE's immutable tags were checked before the build, against the build's own digest
        image = local_image(result.tags[0], engine)
        artifact = Image(result.digest if target.how == RELEASE else image.id, engine_ref=image.id,
                         platform=platform)
        how = "docker push"
    with stage("push", f"{first} ({how})") if options.stages else nullcontext():
        published = publish(client, repository, artifact, tags, force=target.force, sign=sign,
                            stream=options.stream, engine=engine)
    if archive is not None and target.how == RELEASE:
        if not target.keep_loaded:
            engine.untag(result.tags)
            result = replace(result, tags=())
        elif result.tags:  # the engine's copy gets the release tag too, as `docker push` gave it
            tag_locally(local_image(result.tags[0], engine), repository, tags.immutable[:1], engine)
    return published, result


def build(spec: UnitSpec, engine: Engine, *, extra_tags: tuple[str, ...] = (), verify: bool = True,
          work_dir: Path | None = None, stream: OutStream | None = None, no_cache: bool = False,
          tests: bool = False) -> UnitResult:
    """`buildkit build`: prepare (flows/unit/pipeline.py), then this unit's flow: build, verify, write the lock.
    no_cache: build from a clean state (buildx --no-cache), as build.no_cache does. tests: then the
    tests target from the same context (flows/unit/testsimage.py). A UnitResult."""
    request = spec.request  # (unit_spec refused a bad request before anything else)
    options = replace(spec.build, no_cache=no_cache or spec.build.no_cache)
    check_buildx(engine)
    check_build_machine(request, engine, warn=False)  # before the fetch and the toolkit: a build that cannot run here
    with prepared_context(spec, engine, extra_tags=extra_tags, work_dir=work_dir,
                          ccache_recache=options.no_cache) as prepared:
        return run_unit(prepared, UnitOptions(verify=verify, lock_path=spec.lock_path, build=options, tests=tests,
                                              stream=stream), engine=engine)


__all__ = ["BY_DIGEST", "LOADED", "RELEASE", "Publication", "Published", "UnitOptions", "UnitResult", "build",
           "attempt_unit", "run_unit"]
