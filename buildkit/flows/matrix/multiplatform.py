"""A multi-platform build (`build.platform = "linux/amd64,linux/arm64"`): one OCI index per tag.

Each platform is an ordinary single-platform build: its own request and plan (so its own build
key), its own reproducible OCI archive, loaded under its build-key tag only and verified like any
build. Then oci/ociindex.py assembles the index over the verified archives, in the order the
platforms were written; the index's archive is loaded (on the containerd store every tag then has
the index digest) and, with push, each platform's manifest and blobs go up by digest, then the
index byte for byte under every tag. The lock gets one entry per platform
(builds[<variant>/<target>@<platform>], complete like any entry) and indexes[<variant>/<target>]
with the index digest and each platform's manifest digest and build key.

Needs the OCI exporter (the containerd image store): the index is made from the archives' bytes.
The build comes resolved by the CLI (cli/matrixspecs.multi_spec): a MultiSpec, each platform with its unit's spec.
"""

from __future__ import annotations

import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast

from buildkit.core.errors import BuildkitError, ConfigError, RegistryError
from buildkit.core.progress import stage
from buildkit.engine.api import Engine, Images, OutStream
from buildkit.engine.buildx import BuildOptions, BuildResult, check_buildx
from buildkit.flows.unit.buildunit import UnitOptions, run_unit
from buildkit.flows.unit.debpackages import debian_packages
from buildkit.flows.unit.pipeline import Prepared, prepared_context
from buildkit.flows.unit.spec import UnitSpec
from buildkit.flows.unit.signpublished import index_sign_step
from buildkit.oci.ociindex import write_index_archive
from buildkit.oci.registry import client_for, RegistryClient
from buildkit.oci.ocilayout import Descriptor, json_document
from buildkit.plan.buildkey import index_key
from buildkit.plan.request import BuildRequest
from buildkit.release.publish import (publish, publish_repository, reuse_published, check_immutable_free,
                                      Prover)
from buildkit.release.ownership import index_signature_proof, key_parameters, prove, Proof
from buildkit.release.signer import Signer, public_key_of
from buildkit.plan.tags import Bump, build_key_tag, check_tag, next_version, parse_version, platform_suffix
from buildkit.plan.tagset import publication_tags
from buildkit.release.artifact import Index
from buildkit.release.lock import IndexEntry, LockEntry, PlatformRecord, platform_entry_key
from buildkit.release.lockfile import Lock, write_index_entry
from buildkit.verify.report import VerifyReport


@dataclass(frozen=True)
class PlatformBuild:
    platform: str
    prepared: Prepared
    result: BuildResult
    report: VerifyReport
    packages: dict[str, Any] | None = None  # its Debian packages (flows/unit/debpackages.py), when it was built here

    def entry(self, engine: Images) -> LockEntry:
        """This platform's lock entry (LockEntry.of its plan and its build; engine: the one holding its image)."""
        return LockEntry.of(self.prepared.plan, self.prepared.outcome(self.result, engine=engine))


@dataclass(frozen=True)
class MultiResult:
    image_name: str
    variant: str  # as tags name it
    index_digest: str
    build_key: str  # index_key over the platforms' keys
    platforms: tuple[PlatformBuild, ...]
    tags: tuple[str, ...]  # local references (empty with --no-load)
    lock_path: Path
    version: str = ""
    pushed: tuple[str, ...] = ()  # registry references, with push
    added: tuple[str, ...] = ()  # registry tags this run created or moved
    origin: Literal["built", "registry"] = "built"  # registry: it had this index's build key, nothing was built
    signed: tuple[str, ...] = ()  # the index's signature references, with a signing key

    def to_json(self) -> dict[str, Any]:
        return {
            "image_name": self.image_name, "variant": self.variant, "index_digest": self.index_digest,
            "digest": self.index_digest, "build_key": self.build_key, "tags": list(self.tags),
            "version": self.version, "pushed": list(self.pushed), "added": list(self.added),
            "lock": str(self.lock_path), "origin": self.origin, "signed": list(self.signed),
            "platforms": [{"platform": p.platform, "digest": p.result.digest, "build_key": p.prepared.build_key,
                           "verify": [c.to_json() for c in p.report.checks]} for p in self.platforms],
        }


@dataclass(frozen=True)
class MultiSpec:
    """A multi-platform build resolved (cli/matrixspecs.multi_spec): each platform of build.platform, in the order
    written, with its unit's spec (its own checked request). The platforms' specs differ in the platform only, so
    the build options, the lock and the tag rule are the first's."""
    platforms: tuple[tuple[str, UnitSpec], ...]

    @property
    def first(self) -> BuildRequest:
        return self.platforms[0][1].request

    @property
    def build(self) -> BuildOptions:
        return self.platforms[0][1].build

    @property
    def lock_path(self) -> Path:
        return self.platforms[0][1].lock_path


def build_multi(spec: MultiSpec, *, push: bool = False, version: str | None = None, bump: Bump = "patch",
                force: bool = False, verify: bool = True, load: bool = True, stream: OutStream | None = None,
                extra_tags: tuple[str, ...] = (), signer: Signer | None = None, engine: Engine) -> MultiResult:
    if version is not None:
        parse_version(version)
    for tag in extra_tags:
        check_tag(tag)
    options = spec.build
    if not options.reproducible:
        raise ConfigError("a multi-platform build needs the OCI exporter (the containerd image store, "
                          "build.reproducible = auto): its index is assembled from the built OCI archives")
    check_buildx(engine)
    first_request = spec.first
    variant, image_name, target = first_request.tag_variant, first_request.image_name, first_request.target
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="buildkit-multi-")))
        prepared = [(p, stack.enter_context(prepared_context(unit, engine, extra_tags=extra_tags)))
                    for p, unit in spec.platforms]
        key = index_key((p, pr.build_key) for p, pr in prepared)
        commit = prepared[0][1].source.commit
        client = repository = tags = None
        if push:
            repository = publish_repository(image_name)
            client = stack.enter_context(client_for(repository.registry))
            tag_target = spec.platforms[0][1].tags.target(variant, commit, build_key=key, extra=extra_tags)
            found = index_sign_step(signer, commit=commit, version=version or "") if signer is not None else None
            mine = _index_prover(client, repository.repository, spec.lock_path, key, commit, prepared, signer)
            reused = None if force else reuse_published(client, repository, tag_target, found, prove=mine,
                                                        version=version)
            if reused is not None:
                done, version, tags = reused
                versioned = [(p, pr.replanned(version=version)) for p, pr in prepared]
                builds = _published_platforms(client, repository.repository, done.digest, versioned)
                lock_path = spec.lock_path
                record_index(lock_path, builds, target, image_name, done.digest, key, (), version, done.pushed,
                             engine=engine)
                return MultiResult(image_name=image_name, variant=variant, index_digest=done.digest, build_key=key,
                                   platforms=tuple(builds), tags=(), lock_path=lock_path, version=version,
                                   pushed=done.pushed, added=done.added, origin="registry", signed=done.signed)
            version = version or next_version(client.list_tags(repository.repository), variant, bump)
            tags = publication_tags(tag_target, version)
            check_immutable_free(client, repository.repository, tags, None, force=force)
            prepared = [(p, pr.replanned(version=version)) for p, pr in prepared]
        builds = []
        for platform, pr in prepared:
            pr = pr.replanned(shared_tags=False)  # its build-key tag only: the shared tags belong to the index
            # verified like any build; no lock entry yet: the platforms' entries go with the index's
            unit = run_unit(pr, UnitOptions(verify=verify, build=replace(options, load=load or verify), stream=stream),
                            engine=engine)
            assert unit.result is not None
            builds.append(PlatformBuild(platform, unit.prepared, unit.result, unit.report,
                                        debian_packages(unit.prepared, unit.result, options, engine)))
        # the index's local tags are the default platform's plain ones (an arm64 build's are cpu-arm64...)
        lead = next((pr for p, pr in prepared if not platform_suffix(p)), prepared[0][1])
        local_tags = tuple(t for t in lead.plan.tags if not t.rsplit(":", 1)[-1].startswith("bk-"))
        local_tags += (f"{image_name}:{build_key_tag(key, variant)}",)
        archive = work / "index.oci.tar"
        with stage("index", f"{variant}: {', '.join(b.platform for b in builds)}"):
            # (options.reproducible, checked above: every platform's build wrote its OCI archive)
            digest = write_index_archive([(b.platform, cast(Path, b.result.oci_archive)) for b in builds], archive,
                                         local_tags if load else ())
            if load:
                engine.load(archive, local_tags, stream=stream)
        added: list[str] = []
        pushed: tuple[str, ...] = ()
        signed: tuple[str, ...] = ()
        if push:
            assert client is not None and repository is not None and tags is not None
            sign = None
            if signer is not None:  # each platform's image with its own provenance and SBOM, then the index
                entries = [replace(b.entry(engine), version=version or "") for b in builds]
                sign = index_sign_step(signer, commit=commit, version=version or "", entries=entries)
            with stage("push", f"{repository.name}:{tags.immutable[0]} (the index and {len(builds)} manifests)"):
                done = publish(client, repository, Index(digest, archive=archive,
                                                         platforms=tuple(b.platform for b in builds)),
                               tags, force=force, sign=sign)
                digest, added, signed = done.digest, list(done.added), done.signed
            pushed = done.pushed
            if load:
                engine.tag(local_tags[0], f"{repository.name}:{tags.immutable[0]}")
        if not load:  # loaded for the checks only
            engine.untag([t for b in builds for t in b.result.tags])
        lock_path = spec.lock_path
        record_index(lock_path, builds, target, image_name, digest, key, local_tags if load else (),
                     version or first_request.version, pushed, engine=engine)
        return MultiResult(image_name=image_name, variant=variant, index_digest=digest, build_key=key,
                           platforms=tuple(builds), tags=local_tags if load else (), lock_path=lock_path,
                           version=version or first_request.version, pushed=pushed, added=tuple(added),
                           signed=signed)


def _index_prover(client: RegistryClient, repo: str, lock_path: Path, key: str, commit: str,
                  prepared: list[tuple[str, Prepared]], signer: Signer | None) -> Prover:
    """The proof that an index a tag names is ours (release/ownership.py): the lock recorded it for this build
    key, or our key signed it with a provenance of this commit and these platforms, and each image it lists
    with a provenance of its platform's inputs."""
    lock = Lock.read(lock_path)
    public = public_key_of(signer)
    platforms = [(p, key_parameters(LockEntry.of(pr.plan, pr.outcome()))) for p, pr in prepared]

    def mine(ref: str, digest: str) -> Proof:
        return prove(ref, digest, lock, key, public, lambda k: index_signature_proof(
            client, repo, digest, k, commit=commit, platforms=platforms))

    return mine


def _published_platforms(client: RegistryClient, repo: str, digest: str,
                         prepared: list[tuple[str, Prepared]]) -> list[PlatformBuild]:
    """The platforms of an index the registry has (found by its build-key tag), as builds of
    nothing: each platform's manifest digest, read from the index, in its order."""
    where = f"registry {client.host}: {repo}@{digest[:19]}"
    index = json_document(client.get_manifest(repo, digest)[0], where, "image index", RegistryError)
    listed = [Descriptor.from_json(m) for m in index.get("manifests") or []]
    found = [("/".join(str(d.platform.get(k)) for k in ("os", "architecture", "variant") if d.platform.get(k)),
              d.digest) for d in listed]
    wanted = [p for p, _ in prepared]
    if [p for p, _ in found] != wanted:
        raise RegistryError(f"{where}: the index lists {', '.join(p for p, _ in found) or 'nothing'}, not "
                            f"{', '.join(wanted)}; publish again with --force")
    return [PlatformBuild(p, pr, BuildResult(digest=d, config_digest="", tags=(), seconds=0.0),
                          VerifyReport(image="", checks=())) for (p, pr), (_, d) in zip(prepared, found, strict=True)]


def record_index(lock_path: Path, builds: list[PlatformBuild], target: str, image_name: str,
                 digest: str, key: str, tags: tuple[str, ...], version: str, pushed: tuple[str, ...], *,
                 engine: Images) -> None:
    """The lock's index entry and each platform's entry (builds[<variant>/<target>@<platform>])."""
    entries: dict[str, LockEntry] = {}
    records = []
    for b in builds:
        entry = b.entry(engine)
        name = platform_entry_key(entry.variant, entry.target, b.platform)
        # a platform found in the registry, not built here: the packages its entry recorded when it was built
        kept = b.packages or _recorded_packages(lock_path, name, b.result.digest)
        entry = replace(entry, version=version, pushed=pushed, image_digest=b.result.digest, debian_packages=kept)
        entries[name] = entry
        records.append(PlatformRecord(platform=b.platform, manifest_digest=b.result.digest,
                                      build_key=b.prepared.build_key, entry=name))
    index = IndexEntry(variant=builds[0].prepared.plan.request.variant, target=target, image_name=image_name,
                       index_digest=digest, build_key=key, platforms=tuple(records), tags=tags, version=version,
                       pushed=pushed)
    write_index_entry(lock_path, index, entries)


def _recorded_packages(lock_path: Path, name: str, digest: str) -> dict[str, Any] | None:
    """debian_packages of the lock's entry NAME when it records this manifest digest (else None)."""
    try:
        entry = Lock.read(lock_path).builds.get(name)
    except BuildkitError:  # no readable lock: nothing kept (the write that follows says why)
        return None
    return entry.debian_packages if entry is not None and entry.image_digest == digest else None
