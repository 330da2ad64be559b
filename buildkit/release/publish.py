"""Publishing: build key, skip what the registry already has (when it proves to be ours), versions, push,
tags by digest.

The order is what makes a failed push safe to run again, anywhere:
1. The build key (hash of every input) is computed before building. If the registry already has
   `bk-<key>-<variant>`, nothing is built, but only when the image behind that tag proves to be ours
   (release/ownership.py: the lock recorded that digest for this key, or our key signed it with a provenance
   of these inputs): then the missing tags are pointed at that digest through the registry API, in seconds.
   Otherwise the tag is reported as tampered, and nothing is signed, tagged or recorded.
2. Otherwise the image is built and verified locally first (never publish an unverified image),
   or reused when the engine already holds an image with that build key (a previous run that
   failed while pushing), keeping that image's version.
3. The bytes go up by digest, with no tag on them: a fresh build with the reproducible exporter pushes its
   OCI archive, the bytes verify checked, through the registry API (ocilayout.push_layout, with the
   credentials `docker login` stored), so the registry's digest is the archive's and the lock's; an image
   taken from the engine is saved from it and pushed the same way (only the classic store, whose digest is
   known after `docker push` alone, goes with `docker push` under the first immutable tag).
4. The signer signs that digest and attaches its attestations; only then are tags put on it, by putting its
   manifest under each: the immutable ones, the moving ones, and the build-key tag last (it marks a
   complete publication). A kill at any point leaves no tag of ours on an unsigned digest, and a re-run,
   on this machine or a fresh one, finds the bytes there and completes the publication. With load=False
   (--no-load) the image does not stay in the engine.
An immutable tag that already points at another digest stops the publication before anything is
pushed.

`publish()` is that step for every flow and every artifact (release/artifact.py: an image or an
index, from an archive, the engine, a document or the registry itself).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from buildkit.engine.api import ImageInfo, Images, OutStream
from buildkit.oci.ocilayout import Descriptor, json_document, OCI_INDEX, OciArchive, push_layout, INDEX_TYPES
from buildkit.oci.ociindex import push_index
from buildkit.core.errors import ConfigError, ImageSourceError, RegistryError, TamperedError
from buildkit.core.printable import printable
from buildkit.oci.imageref import ImageRef, name_of, parse_image_ref
from buildkit.plan.inputs import BUILD_KEY_LABEL
from buildkit.oci.registry import RegistryClient
from buildkit.plan.tags import TagSet, build_key_tag, highest_version, normalise_version, parse_version
from buildkit.plan.tagset import TagTarget, publication_tags
from buildkit.release.artifact import Artifact, Image, Index, Published, SignStep, in_registry
from buildkit.release.ownership import Proof

VERSION_LABEL = "org.opencontainers.image.version"
# Where a published result came from: "built" this run, the "engine" (an image with this build key was already
# loaded) or the "registry" (it had this build key: nothing built, nothing pushed)
Origin = Literal["built", "engine", "registry"]


@dataclass(frozen=True)
class PublishResult:
    repository: str  # registry/name
    version: str
    digest: str
    tags: tuple[str, ...]  # every tag of this build, now pointing at digest
    added: tuple[str, ...]  # tags this run created or moved
    origin: Origin
    build_key: str
    signed: tuple[str, ...] = ()  # the signature and attestation references written
    tests: str = ""  # build --tests --push: the tests image, repository@digest (flows/unit/testsimage.py)


def _labels_of(client: RegistryClient, repo: str, digest: str) -> dict[str, str]:
    """Labels of an image in the registry: manifest (or the first image of an index) → config.
    Everything read is checked: a registry's answer is untrusted input."""
    where = f"registry {client.host}: {repo}@{digest[:19]}"
    body, media_type, _ = client.get_manifest(repo, digest)
    manifest = json_document(body, where, "manifest", RegistryError)
    try:
        if "manifests" in manifest:
            images = [Descriptor.from_json(m) for m in manifest["manifests"]]
            images = [d for d in images if d.annotations.get("vnd.docker.reference.type") != "attestation-manifest"]
            if not images:
                return {}
            manifest = json_document(client.get_manifest(repo, images[0].digest)[0], where, "manifest", RegistryError)
        if "config" not in manifest:
            raise RegistryError(f"{where}: the manifest has no config")
        config_digest = Descriptor.from_json(manifest["config"]).digest
    except ImageSourceError as exc:
        raise RegistryError(f"{where}: {exc}") from None
    config = json_document(client.get_blob(repo, config_digest), where, "image config", RegistryError)
    inner = config.get("config") or {}
    labels = inner.get("Labels") if isinstance(inner, dict) else None
    if not isinstance(labels, dict):
        return {}
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}


def _first_come(tags: TagSet, tag: str) -> bool:
    """A sha tag (sha-<commit>-<variant>) names a commit, not one build of it: a later build of the same
    commit (other patches, another template) leaves it on the first image instead of failing."""
    return tags.role(tag) == "sha"


def _forced(tags: TagSet, tag: str, force: bool) -> bool:
    """--force rebuilds the same inputs: only the build-key tag may move to the new digest."""
    return force and tags.role(tag) == "build_key"


def point_tags(client: RegistryClient, repo: str, digest: str, tags: TagSet, *, force: bool = False,
               elsewhere: list[str] | None = None) -> list[str]:
    """Make every tag point at digest; refuse to move an immutable one. Returns the tags changed; a first-come
    tag (sha-…) left on another digest is added to elsewhere."""
    body, media_type, _ = client.get_manifest(repo, digest)
    changed: list[str] = []
    for tag in tags.all:
        current = client.head_manifest(repo, tag)
        if current is not None and current.digest == digest:
            continue
        if current is not None and _first_come(tags, tag):
            if elsewhere is not None:
                elsewhere.append(tag)
            continue
        if current is not None and tag in tags.immutable and not _forced(tags, tag, force):
            raise RegistryError(f"{repo}:{tag} already points at {current.digest}, not {digest}; "
                                "immutable tags are never moved (choose another --release)")
        client.put_manifest(repo, tag, body, media_type)
        changed.append(tag)
    return changed


def check_immutable_free(client: RegistryClient, repo: str, tags: TagSet, allowed_digest: str | None,
                         *, force: bool) -> None:
    """Before building: no immutable tag of the new build may exist with another digest."""
    for tag in tags.immutable:
        if _forced(tags, tag, force) or _first_come(tags, tag):
            continue
        current = client.head_manifest(repo, tag)
        if current is not None and current.digest != allowed_digest:
            raise RegistryError(f"{repo}:{tag} already exists with digest {current.digest}; immutable tags are "
                                "never overwritten (use --release to choose another version, or --bump)")


def docker_push(engine: Images, ref: str, stream: OutStream | None = None) -> None:
    """Push one tag with the engine: it uploads the blobs with the user's credentials."""
    engine.push(ref, stream=stream)


def local_image_with_key(key: str, repository: str | None = None, *, engine: Images
                         ) -> tuple[ImageInfo, str | None] | tuple[None, None]:
    """(image, its version label) for an image in the engine built with this key, else (None, None).

    With repository, only an image tagged in that repository counts: reproducible builds give the
    same key (and digest) to the same inputs in another project, whose version label is not ours."""
    images = engine.images_with_label(BUILD_KEY_LABEL, key)
    if repository is not None:
        images = [i for i in images if any(name_of(t) == repository for t in (i.tags or ()))]
    # A nightly of the same inputs carries a nightly version label: it is not this release's image.
    images = [i for i in images if not is_nightly_version((i.labels or {}).get(VERSION_LABEL, ""))]
    if not images:
        return None, None
    return images[0], (images[0].labels or {}).get(VERSION_LABEL)


def local_image(ref: str, engine: Images) -> ImageInfo:
    image = engine.image(ref)
    if image is None:
        raise RegistryError(f"the image {ref[:19]} is not in the local engine")
    return image


def is_nightly_version(version: str) -> bool:
    """0.4.1-nightly.20261130 (what `buildkit nightly` publishes)."""
    try:
        prerelease = parse_version(version).prerelease
    except ConfigError:
        return False
    return bool(prerelease) and str(prerelease).split(".")[0] == "nightly"


def tag_locally(image: ImageInfo, repository: ImageRef, tags: tuple[str, ...], engine: Images) -> None:
    for tag in tags:
        engine.tag(image.id, f"{repository.name}:{tag}")


def publish(client: RegistryClient, repository: ImageRef, artifact: Artifact, tags: TagSet, *,
            force: bool = False, sign: SignStep | None = None, stream: OutStream | None = None,
            engine: Images | None = None) -> Published:
    """The one publication path of every flow: no immutable tag may point elsewhere; the artifact's bytes go
    up by digest (unless the registry has them already); sign signs that digest and attaches its
    attestations; then every tag is put on it, the immutable ones first, the build-key tag last (it marks a
    complete publication). Published.pushed names the tags that point at the digest (a first-come sha tag
    that names another build's image is not among them). engine: the one holding an Image's engine_ref (an
    archive's, an index's or the registry's artifact needs none)."""
    repo = repository.repository
    check_immutable_free(client, repo, tags, artifact.digest or None, force=force)
    if in_registry(artifact):
        if client.head_manifest(repo, artifact.digest) is None:
            raise RegistryError(f"{repository.name}@{artifact.digest} is not in the registry: nothing to tag")
        digest, tagged = artifact.digest, None
    else:
        digest, tagged = _upload(client, repository, artifact, tags, stream, engine)
    signed = sign(client, repository, digest) if sign is not None else ()
    key_tags = tuple(t for t in tags.all if tags.role(t) == "build_key")
    elsewhere: list[str] = []
    added = [tagged] if tagged is not None else []
    for group in (tuple(t for t in tags.immutable if t not in key_tags), tags.moving, key_tags):
        added += point_tags(client, repo, digest, tags.only(tuple(t for t in group if t != tagged)), force=force,
                            elsewhere=elsewhere)
    return Published(digest, tuple(added), tuple(f"{repository.name}:{t}" for t in tags.all if t not in elsewhere),
                     tuple(signed))


def _upload(client: RegistryClient, repository: ImageRef, artifact: Artifact, tags: TagSet,
            stream: OutStream | None, engine: Images | None) -> tuple[str, str | None]:
    """The artifact's bytes in the registry by digest, checked against the artifact's: (the digest, the tag the
    upload had to write: docker push of the classic store's image, else None)."""
    repo = repository.repository
    if artifact.digest and client.head_manifest(repo, artifact.digest) is not None:
        return artifact.digest, None  # a re-run: the bytes are there (their tags are put by the caller)
    tagged = None
    if isinstance(artifact, Index):
        if artifact.archive is not None:
            digest = push_index(client, repo, artifact.archive, [artifact.digest])
        else:
            assert artifact.document is not None
            digest = client.put_manifest(repo, artifact.digest, artifact.document, OCI_INDEX)
    elif artifact.archive is not None:
        with OciArchive(artifact.archive) as layout:
            image = layout.image(None)
            if artifact.digest and image.manifest_digest != artifact.digest:
                raise RegistryError(f"the archive {artifact.archive} holds {image.manifest_digest}, "
                                    f"not the built {artifact.digest}")
            digest = push_layout(client, repo, image, [image.manifest_digest])
    elif engine is None:
        raise TypeError("publish of an engine's image (engine_ref) needs the engine holding it: give engine")
    elif artifact.digest and engine.image_store() != "classic":
        assert artifact.engine_ref is not None
        digest = _push_engine_image(engine, client, repo, artifact.engine_ref, artifact.digest)
    else:  # the classic store: the manifest pushed exists only once docker push made it, under a tag
        assert artifact.engine_ref is not None
        first = tags.immutable[0]
        before = client.head_manifest(repo, first)
        engine.tag(artifact.engine_ref, f"{repository.name}:{first}")
        docker_push(engine, f"{repository.name}:{first}", stream)
        pushed = client.head_manifest(repo, first)
        if pushed is None:
            raise RegistryError(f"after docker push, {repository.name}:{first} is not in the registry")
        digest = pushed.digest
        tagged = None if before is not None and before.digest == digest else first  # (added: what moved)
    if artifact.digest and digest != artifact.digest:
        raise RegistryError(f"after the push, {repository.name}@{digest} is not the artifact's {artifact.digest}")
    return digest, tagged


def _push_engine_image(engine: Images, client: RegistryClient, repo: str, ref: str, digest: str) -> str:
    """The engine's image (containerd store: its id is its manifest's or index's digest) saved as an OCI
    archive and pushed through the registry API by digest, byte for byte: no tag names it before it is signed."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="buildkit-push-") as tmp:
        archive = engine.save(ref, Path(tmp) / "image.tar")
        with OciArchive(archive) as layout:
            top = Descriptor.from_json((layout.index().get("manifests") or [{}])[0])
            if top.digest != digest:
                raise RegistryError(f"the engine saved {ref} as {top.digest}, not {digest}")
            if top.media_type not in INDEX_TYPES:
                return push_layout(client, repo, layout.image(None), [digest])
        return push_index(client, repo, archive, [digest])


def publish_repository(request_image_name: str) -> ImageRef:
    repository = parse_image_ref(request_image_name)
    if repository.tag or repository.digest:
        raise RegistryError(f"image.name {request_image_name!r} must not carry a tag or digest")
    return repository


# (a tag's reference, the digest it names) -> the proof that the image is ours; TamperedError otherwise
Prover = Callable[[str, str], Proof]


def reuse_published(client: RegistryClient, repository: ImageRef, target: TagTarget, sign: SignStep | None = None,
                    *, prove: Prover, version: str | None = None, asked_by: str = "--release",
                    ) -> tuple[Published, str, TagSet] | None:
    """What the registry already has of target's build key, completed: (what was published, its version, its
    tags); None when it has nothing of it.

    The build-key tag's image is reused only when prove() shows it is ours (release/ownership.py); otherwise
    prove's TamperedError stops the command, and nothing is signed, tagged or recorded. Without a build-key
    tag, the release tag of the version asked for (else the variant's highest) whose image proves ours with
    this build key is a publication a kill cut short (its tags go on only after its signature): it is
    completed the same way. The version is the one it was published as; a version asked for that differs is
    an error, never ignored. An image proved ours by the lock alone is signed now (sign); one proved by its
    signature is signed already. An index's build key is found the same way (its tag is on the index)."""
    repo, key, variant = repository.repository, target.build_key, target.variant
    if key is None:
        raise ValueError("reuse_published needs the target's build key")
    key_tag = build_key_tag(key, variant)
    existing = client.head_manifest(repo, key_tag)
    if existing is not None:
        proof = prove(f"{repository.name}:{key_tag}", existing.digest)
    else:
        found = _cut_short(client, repository, variant, version, prove)
        if found is None:
            return None
        proof = found
    published_as = proof.version or _labels_of(client, repo, proof.digest).get(VERSION_LABEL, "")
    if version is not None and normalise_version(version) != published_as:
        shown = printable(published_as)[:60]
        raise ConfigError(f"this build (build key {key[:24]}) is published as version {shown} "
                          f"({repository.name}@{proof.digest}); {asked_by} asks for {version}, which would be another "
                          f"image of the same inputs: leave out --release to complete {shown}, "
                          "or add --force to build it anew as that version and move the build-key tag")
    tags = publication_tags(target, published_as)
    done = publish(client, repository, Image(proof.digest), tags, sign=sign if proof.how == "lock" else None)
    return done, published_as, tags


def _cut_short(client: RegistryClient, repository: ImageRef, variant: str, version: str | None,
               prove: Prover) -> Proof | None:
    """The image of the release tag `V-<variant>` (V: the version asked for, else the highest) when it proves
    ours with this build key; None when there is no such tag or its image is another build's."""
    existing = client.list_tags(repository.repository)
    candidate = normalise_version(version) if version is not None else highest_version(existing, variant)
    tag = f"{candidate}-{variant}"
    if candidate is None or tag not in existing:
        return None
    info = client.head_manifest(repository.repository, tag)
    if info is None:
        return None
    try:
        return prove(f"{repository.name}:{tag}", info.digest)
    except TamperedError:
        return None  # an earlier release of other inputs: published before, and not this build


def image_labels(client: RegistryClient, repo: str, digest: str) -> dict[str, str]:
    """The labels of the image at digest in the registry (for nightly and promote)."""
    return _labels_of(client, repo, digest)


