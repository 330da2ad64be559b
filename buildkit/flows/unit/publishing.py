"""Publishing a build (`buildkit build --push`, `buildkit push`): what the registry and the engine
already hold decides whether to build; a build (or the engine's image) then goes through the build
unit's flow (flows/unit/buildunit.py: build, verify, lock, publish, lock), one already published only
gets its missing tags and its lock entry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from buildkit.core.errors import ConfigError, LockError, RegistryError
from buildkit.engine.api import Engine, Images, OutStream
from buildkit.engine.buildx import BuildOptions, BuildResult, check_buildx
from buildkit.flows.unit.buildunit import RELEASE, Publication, UnitOptions, run_unit
from buildkit.flows.unit.pipeline import Prepared, prepared_context
from buildkit.flows.unit.spec import UnitSpec
from buildkit.flows.unit.testsimage import build_tests_image, push_tests_image, registry_tests_tag, tests_of_image
from buildkit.oci.imageref import ImageRef
from buildkit.oci.registry import RegistryClient, client_for
from buildkit.plan.tags import Bump, check_tag, next_version, parse_version
from buildkit.plan.tagset import publication_tags
from buildkit.release.lock import LockEntry
from buildkit.release.lockfile import Lock, record
from buildkit.release.ownership import Proof, image_signature_proof, key_parameters, prove
from buildkit.flows.unit.signpublished import sign_step
from buildkit.release.artifact import Image, SignStep
from buildkit.release.publish import (VERSION_LABEL, Origin, Prover, PublishResult, check_immutable_free,
                                      image_labels, local_image_with_key, publish,
                                      publish_repository, reuse_published)
from buildkit.release.signer import Signer, public_key_of


def build_and_push(spec: UnitSpec, engine: Engine, *, version: str | None = None, bump: Bump = "patch",
                   force: bool = False, verify: bool = True, stream: OutStream | None = None, load: bool = True,
                   extra_tags: tuple[str, ...] = (),
                   before_build: Callable[[], None] | None = None,
                   signer: Signer | None = None, tests: bool = False) -> PublishResult:
    """`buildkit build --push`. With the reproducible exporter the OCI archive itself is pushed
    (release/publish.publish of an Image from its archive); load=False keeps the image out of the engine:
    never loaded without verify, else loaded for the checks only and its tags removed after the push.
    extra_tags (--tag) are local tags and pushed as moving tags too. before_build runs only when there is
    something to compile (the registry and the engine lack this build key), before the compile: `build`'s
    deferred disk check. tests: the tests image too (flows/unit/testsimage.py), pushed after the image under
    bk-<key>-<variant>-tests; PublishResult.tests says where."""
    request = spec.request
    if version is not None:
        parse_version(version)
    for tag in extra_tags:
        check_tag(tag)
    repository = publish_repository(request.image_name)
    options = spec.build
    if not load and not options.reproducible:
        raise ConfigError("--no-load needs the OCI exporter (the containerd image store, build.reproducible "
                          "= auto): without it the image reaches the registry through the engine")
    check_buildx(engine)
    variant, repo = request.artifact_variant, repository.repository
    with client_for(repository.registry) as client, \
            prepared_context(spec, engine, extra_tags=extra_tags) as prepared:
        key, commit = prepared.build_key, prepared.source.commit
        target = spec.tags.target(variant, commit, build_key=key, extra=extra_tags)
        found_sign = _found_sign_step(prepared, signer) if signer is not None else None
        mine = image_prover(client, repo, spec.lock_path, key, key_parameters(_unbuilt(prepared)), signer)
        reused = None if force else reuse_published(client, repository, target, found_sign, prove=mine,
                                                    version=version)
        if reused is not None:
            done, version, tags = reused
            record(spec.lock_path, LockEntry.of(prepared.plan, prepared.outcome(image_digest=done.digest)), done,
                   version)
            return PublishResult(repository.name, version, done.digest, tags.all, done.added, origin="registry",
                                 build_key=key, signed=done.signed,
                                 tests=_published_tests(client, repository, prepared, done.digest, options, stream,
                                                        before_build, engine) if tests else "")
        local, local_version = (None, None) if force else local_image_with_key(key, request.image_name,
                                                                                    engine=engine)
        if local is not None and version and local_version != version:
            local = local_version = None  # the engine's copy carries another version label: build anew
        version = local_version or version or next_version(client.list_tags(repo), variant, bump)
        tags = publication_tags(target, version)
        check_immutable_free(client, repo, tags, local.id if local is not None else None, force=force)
        prepared = prepared.replanned(version=version)
        publication = Publication(client, repository, tags, version, how=RELEASE, force=force, keep_loaded=load,
                                  signer=signer, tests_tag=registry_tests_tag(key, variant) if tests else "")
        lock_path = spec.lock_path
        if local is None:
            if before_build is not None:
                before_build()
            build_opts = replace(options, load=load or verify)  # verify runs the image in the engine
            unit = run_unit(prepared, UnitOptions(verify=verify, lock_path=lock_path, publish=publication,
                                                  build=build_opts, tests=tests, stream=stream),
                            engine=engine)
            origin: Origin = "built"
        else:  # the engine's image with this build key: pushed as it is, its lock entry once published
            seconds, finished_at = built_before(lock_path, key)  # its build's times, for the provenance
            held = BuildResult(digest=local.id, config_digest=local.id, tags=tuple(local.tags), seconds=seconds,
                               finished_at=finished_at)
            unit = run_unit(prepared, UnitOptions(verify=False, lock_path=lock_path, lock_first=False,
                                                  publish=publication, build=options, tests=tests, stream=stream),
                            engine=engine, built=held)
            origin = "engine"
        assert unit.published is not None
        return PublishResult(repository.name, version, unit.published.digest, tags.all, unit.published.added,
                             origin=origin, build_key=key, signed=unit.published.signed,
                             tests=unit.tests.reference if unit.tests else "")


def _published_tests(client: RegistryClient, repository: ImageRef, prepared: Prepared, digest: str,
                     options: BuildOptions, stream: OutStream | None, before_build: Callable[[], None] | None,
                     engine: Engine) -> str:
    """The tests image of a build the registry has already (its build key found): the one under its tag when
    that names the image at digest, else built from the prepared context (the build stage from the layer cache
    where it is there) and pushed."""
    tag = registry_tests_tag(prepared.build_key, prepared.plan.request.artifact_variant)
    found = client.head_manifest(repository.repository, tag)
    if found is not None and (ref := tests_of_image(client, repository, found.digest, digest)).startswith(
            f"{repository.name}@"):
        return ref
    if before_build is not None:
        before_build()
    image = BuildResult(digest, "", prepared.plan.tags[:1], 0.0)
    tests = build_tests_image(prepared, options, image, prepared.rendered.context_dir.parent, stream=stream,
                              engine=engine)
    return push_tests_image(client, repository, tests, tag, stream=stream, engine=engine).reference


def built_before(lock_path: Path, key: str) -> tuple[float, float]:
    """(seconds, finished_at) of the build the lock recorded with this build key (the engine's image of a
    `buildkit build` that a later `build --push` pushes); (0, 0) when it recorded none."""
    for entry in Lock.read(lock_path).builds.values():
        if entry.build_key == key and entry.build_finished:
            try:
                started, finished = (datetime.strptime(when, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
                                     for when in (entry.build_started, entry.build_finished))
            except ValueError:
                continue
            return finished - started, finished
    return 0.0, 0.0


def _unbuilt(prepared: Prepared) -> LockEntry:
    """The prepared unit's lock entry before anything is built: its inputs and build key."""
    return LockEntry.of(prepared.plan, prepared.outcome())


def image_prover(client: RegistryClient, repo: str, lock_path: Path, key: str, expected: dict[str, Any],
                 signer: Signer | None) -> Prover:
    """The proof that the image a tag names is ours (release/ownership.py): the lock at lock_path recorded it
    for this build key, or the signer's public key verifies its signature and a provenance of these parameters
    (ownership.key_parameters)."""
    lock = Lock.read(lock_path)
    public = public_key_of(signer)

    def mine(ref: str, digest: str) -> Proof:
        return prove(ref, digest, lock, key, public,
                     lambda k: image_signature_proof(client, repo, digest, k, expected))

    return mine


def _found_sign_step(prepared: Prepared, signer: Signer) -> SignStep:
    """The signing of an image the registry has under this build key: the prepared inputs, at the version
    its labels say (a publication found again is signed as a new one is)."""

    def sign(client: RegistryClient, repository: ImageRef, digest: str) -> tuple[str, ...]:
        found = replace(LockEntry.of(prepared.plan, prepared.outcome(image_digest=digest)),
                        version=image_labels(client, repository.repository, digest).get(VERSION_LABEL, ""))
        return sign_step(found, signer)(client, repository, digest)

    return sign


def push_local(spec: UnitSpec, engine: Images, *, force: bool = False, stream: OutStream | None = None,
               signer: Signer | None = None) -> PublishResult:
    """`buildkit push`: publish the image of the lock's entry for this variant, already in the engine."""
    request = spec.request
    repository = publish_repository(request.image_name)
    lock_path = spec.lock_path
    lock = Lock.read(lock_path)
    found = lock.find(request.variant, request.target, request.platform, request.cpu_level.name, request.arch.name)
    if found is None:
        raise LockError(f"{lock_path} has no build of {request.variant}/{request.target} for {request.platform}; "
                        "run buildkit build first")
    name = found[0]
    recorded = lock.entry(name, f"{lock_path}: builds[{name!r}]")  # every key there
    image = engine.image(recorded.image_id)
    if image is None:
        raise RegistryError(f"the image {recorded.image_id[:19]} of {request.variant} is not in the local engine; "
                            "run buildkit build again")
    key, version, commit = recorded.build_key, recorded.version, recorded.commit
    target = spec.tags.target(request.artifact_variant, commit, build_key=key)
    sign = sign_step(recorded, signer) if signer is not None else None
    with client_for(repository.registry) as client:
        mine = image_prover(client, repository.repository, lock_path, key, key_parameters(recorded), signer)
        reused = None if force else reuse_published(client, repository, target, sign=sign, prove=mine,
                                                    version=version, asked_by=f"the lock's entry {name}")
        if reused is not None:
            done, version, tags = reused
        else:
            tags = publication_tags(target, version)
            done = publish(client, repository, Image(image.id, engine_ref=image.id, platform=request.platform), tags,
                           force=force, sign=sign, stream=stream, engine=engine)
    record(lock_path, recorded, done, version)
    return PublishResult(repository.name, version, done.digest, tags.all, done.added,
                         origin="registry" if reused is not None else "engine", build_key=key, signed=done.signed)

