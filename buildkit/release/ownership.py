"""Whether an image a registry holds is ours (issue 48): what a published build key, or a release tag left by a
killed publication, must prove before buildkit reuses the image behind it, signs it, tags it or records it.

A tag is a pointer that anyone with push rights can move; it proves nothing. The image at a digest is ours
when one of these holds:

* **the lock**: this project's buildkit.lock recorded that digest for this build key (a build entry's
  `image_digest`, a multi-platform index entry's `index_digest`): an image this project built and verified;
* **the signature**: our key signed that digest and attached a provenance (SLSA v1, release/provenance.py)
  whose build key is this one and whose parameters that decide the image's content are these inputs' (the
  key's own inputs: commit, arch, CUDA, target, CPU level, CMake flags, build number, patch set, template,
  platform, base images). An index: its own signed provenance names these platforms and this commit, and
  each of its images, as the registry's index lists them, carries such a signature for its platform's key.

Anything else is reported as not ours (TamperedError, one line naming the tag, the digest and why), and the
caller signs, tags and records nothing. The signed provenance also says the version the image was published
as, which the caller keeps (a version asked for on the command line that differs is an error, never ignored).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric import ec

from buildkit.core.errors import BuildkitError, RegistryError, TamperedError, ImageSourceError
from buildkit.core.printable import printable
from buildkit.oci.ocilayout import Descriptor, json_document
from buildkit.oci.registry import RegistryClient
from buildkit.plan.inputs import INPUTS
from buildkit.release.lock import LockEntry, entry_dict
from buildkit.release.lockfile import Lock
from buildkit.release.provenance import BUILD_TYPE, INDEX_BUILD_TYPE, PREDICATE_TYPE, signed_definition
from buildkit.release.signing import attested_statement, check_signature


@dataclass(frozen=True)
class Proof:
    digest: str
    how: Literal["lock", "signature"]
    version: str  # the version it was published as ("" when the proof does not say)


def key_parameters(entry: LockEntry) -> dict[str, Any]:
    """The parameters a signed provenance of the same build must hold: the build key and the lock's inputs that
    the key hashes (JSON form, as the provenance writes them)."""
    data = json.loads(json.dumps(entry_dict(entry)))
    names = [i.name for i in INPUTS if i.lock and i.key]
    return {"build_key": entry.build_key, **{name: data.get(name) for name in names}}


def lock_proof(lock: Lock, build_key: str, digest: str) -> Proof | None:
    """The lock's record of digest under build_key (a build's entry, or a multi-platform index's)."""
    for entry in lock.builds.values():
        if entry.build_key == build_key and entry.image_digest == digest:
            return Proof(digest, "lock", entry.version)
    for index in lock.indexes.values():
        if index.build_key == build_key and index.index_digest == digest:
            return Proof(digest, "lock", index.version)
    return None


def _parameters(statement: Any, build_type: str) -> dict[str, Any]:
    """The external and internal parameters of a signed statement of build_type ({} for anything else)."""
    definition = signed_definition(statement)
    if definition is None or definition.get("buildType") != build_type:
        return {}
    params: dict[str, Any] = {}
    for part in ("externalParameters", "internalParameters"):
        if isinstance(definition.get(part), dict):
            params.update(definition[part])
    return params


def _version(params: Mapping[str, Any]) -> str:
    version = params.get("version")
    return version if isinstance(version, str) else ""


def image_signature_proof(client: RegistryClient, repo: str, digest: str, key: ec.EllipticCurvePublicKey,
                          expected: Mapping[str, Any]) -> Proof:
    """Our key's signature of digest and its provenance of these parameters (key_parameters); VerifyError or
    TamperedError saying which is missing or which parameters differ."""
    check_signature(client, repo, digest, key)
    params = _parameters(attested_statement(client, repo, digest, key, PREDICATE_TYPE), BUILD_TYPE)
    differ = [name for name in expected if params.get(name, _ABSENT) != expected[name]]
    if differ:
        raise TamperedError(f"its signed provenance's {', '.join(differ)} {'is' if len(differ) == 1 else 'are'} "
                            "not these inputs'")
    return Proof(digest, "signature", _version(params))


def index_signature_proof(client: RegistryClient, repo: str, digest: str, key: ec.EllipticCurvePublicKey, *,
                          commit: str, platforms: Sequence[tuple[str, Mapping[str, Any]]]) -> Proof:
    """Our key's signature of the index and of each image it lists, with provenances of this commit, these
    platforms (in order) and each platform's parameters (key_parameters)."""
    check_signature(client, repo, digest, key)
    params = _parameters(attested_statement(client, repo, digest, key, PREDICATE_TYPE), INDEX_BUILD_TYPE)
    if params.get("commit") != commit or params.get("platforms") != [p for p, _ in platforms]:
        raise TamperedError("its signed provenance is not of this commit and these platforms")
    listed = index_manifests(client, repo, digest)
    if [p for p, _ in listed] != [p for p, _ in platforms]:
        raise TamperedError(f"it lists {', '.join(p for p, _ in listed) or 'nothing'}, not "
                            f"{', '.join(p for p, _ in platforms)}")
    for (platform, manifest), (_, expected) in zip(listed, platforms, strict=True):
        try:
            image_signature_proof(client, repo, manifest, key, expected)
        except BuildkitError as exc:
            raise TamperedError(f"its {platform} image {manifest}: {exc}") from None
    return Proof(digest, "signature", _version(params))


def index_manifests(client: RegistryClient, repo: str, digest: str) -> list[tuple[str, str]]:
    """(platform, manifest digest) of each image the registry's index at digest lists, in its order (read by
    digest: the bytes are checked against it)."""
    where = f"{client.host}/{repo}@{digest[:19]}"
    index = json_document(client.get_manifest(repo, digest)[0], where, "image index", RegistryError)
    manifests = index.get("manifests") or []
    if not isinstance(manifests, list):
        raise RegistryError(f"{where}: the index's manifests are not a list")
    try:
        listed = [Descriptor.from_json(m) for m in manifests]
    except ImageSourceError as exc:
        raise RegistryError(f"{where}: {exc}") from None
    return [("/".join(str(d.platform[k]) for k in ("os", "architecture", "variant") if d.platform.get(k)), d.digest)
            for d in listed]


_ABSENT = object()


def prove(tag_ref: str, digest: str, lock: Lock, build_key: str, key: ec.EllipticCurvePublicKey | None,
          by_signature: Callable[[ec.EllipticCurvePublicKey], Proof]) -> Proof:
    """The proof that the image tag_ref names (at digest) is ours: the lock's record, else by_signature(key) (a
    call of image_signature_proof or index_signature_proof); TamperedError naming the tag, the digest and why
    neither holds."""
    found = lock_proof(lock, build_key, digest)
    if found is not None:
        return found
    recorded = lock.digests_of(build_key)
    reasons = [f"the lock records {', '.join(recorded)} for build key {build_key[:24]}" if recorded
               else f"the lock records no image of build key {build_key[:24]}"]
    if key is None:
        reasons.append("no signing key was given to check a signature with")
    else:
        try:
            return by_signature(key)
        except BuildkitError as exc:
            reasons.append(str(exc))
    why = printable("; ".join(reasons))[:600]
    raise TamperedError(f"{tag_ref} names {digest}, which this project did not publish ({why}): tampered? "
                        "Nothing was signed, tagged or recorded; if you published it elsewhere, give the lock that "
                        "recorded it or the key that signed it, or --force to build it anew and move the tag")


__all__ = ["Proof", "image_signature_proof", "index_manifests", "index_signature_proof", "key_parameters",
           "lock_proof", "prove"]
