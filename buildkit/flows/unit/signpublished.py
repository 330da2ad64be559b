"""Signing what a publish pushed (issue 38): the digest of a lock entry, its SLSA provenance (from the entry's
inputs) and its SBOM (from the pushed image's own layers), in cosign's formats through the registry client.

Called after a push with the signer the CLI made (cli/signing.make_signer, a release/signer.Signer: today the
key of `--sign-key FILE`, sign.key_file or LLAMA_BUILDKIT_SIGN_KEY); nothing is signed without one. The image
itself is not touched: its digest is the one pushed. sign_step(entry, signer) is what release/publish.publish()
calls, for every flow that publishes; sign_entry signs a lock entry pushed before.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from buildkit.core.errors import LockError, ReproduceError
from buildkit.core.wholefile import write_whole
from buildkit.oci.imageref import ImageRef, parse_image_ref
from buildkit.oci.imagesource import open_image
from buildkit.oci.registry import RegistryClient, client_for
from buildkit.release import provenance, sbom, reproduced
from buildkit.release.artifact import SignStep
from buildkit.release.lock import LockEntry, entry_dict
from buildkit.release.lockfile import Lock
from buildkit.release.ownership import index_manifests
from buildkit.release.cosignformat import Attestation
from buildkit.release.signing import sign_image
from buildkit.release.signer import Signer


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Signed:
    reference: str  # repository@digest
    written: tuple[str, ...]  # the .sig and .att references


def sign_step(entry: LockEntry, signer: Signer) -> SignStep:
    """What release/publish.publish() calls once the registry holds the image: signs its digest and attaches
    the SLSA provenance of entry's inputs and the SBOM of the pushed image's own layers."""

    def sign(client: RegistryClient, repository: ImageRef, digest: str) -> tuple[str, ...]:
        name = f"{repository.registry}/{repository.repository}"
        statement, document = _statements(entry, digest, name)
        attestations = [Attestation(provenance.PREDICATE_TYPE, statement),
                        Attestation(sbom.PREDICATE_TYPE, sbom.sbom_statement(document, digest, name))]
        return tuple(sign_image(client, repository.repository, digest, signer, attestations))

    return sign


def _statements(entry: LockEntry, digest: str, name: str) -> tuple[bytes, bytes]:
    """(the provenance statement, the SBOM document) of the image name@digest built as entry says; the SBOM
    is read from the pushed image's own layers. The provenance's times are the build's, as the lock entry
    carries them into a later push (none for an image this lock did not see built: never the signing time)."""
    statement = provenance.provenance_statement(entry, digest, name, provenance.run_details(entry, str(uuid.uuid4())))
    with ExitStack() as stack:
        image = open_image(f"registry:{name}@{digest}", stack, platform=entry.platform)
        packages, release = sbom.image_contents(image)
    return statement, sbom.sbom_document(packages, entry_dict(entry), release=release, image_name=name)


def write_predicates(entry: LockEntry, digest: str, name: str, folder: Path) -> tuple[Path, Path]:
    """The workflow's keyless form (a CI job's OIDC identity signs with cosign itself, outside buildkit: no Signer
    here): the predicates `cosign attest
    --type slsaprovenance1 / cyclonedx --predicate FILE` attaches, written as folder/provenance.json and
    folder/sbom.json, the same documents buildkit signs with a key."""
    statement, document = _statements(entry, digest, name)
    folder.mkdir(parents=True, exist_ok=True)
    predicate = json.dumps(json.loads(statement)["predicate"], sort_keys=True, indent=2).encode()
    write_whole(folder / "provenance.json", predicate)
    write_whole(folder / "sbom.json", document)
    return folder / "provenance.json", folder / "sbom.json"


def index_sign_step(signer: Signer, *, commit: str, version: str, entries: Sequence[LockEntry] = ()) -> SignStep:
    """An index's signing: each platform's image first, with its own provenance and SBOM (entries: the lock
    entries of images not signed when they were pushed; a nightly job signs its own), then the index's digest
    with a provenance whose dependencies are its images by digest, as the registry's index lists them."""

    def sign(client: RegistryClient, repository: ImageRef, digest: str) -> tuple[str, ...]:
        written: list[str] = []
        for entry in entries:
            written += sign_step(entry, signer)(client, repository, entry.image_digest)
        platforms = index_manifests(client, repository.repository, digest)
        name = f"{repository.registry}/{repository.repository}"
        # the index is assembled, not built: its images' builds' times where this run has them
        started = min((e.build_started for e in entries if e.build_started), default="")
        finished = max((e.build_finished for e in entries if e.build_finished), default="")
        run = provenance.RunDetails(str(uuid.uuid4()), started, finished)
        statement = provenance.index_provenance_statement(name, digest, platforms, commit=commit, version=version,
                                                          run=run)
        written += sign_image(client, repository.repository, digest, signer,
                              [Attestation(provenance.PREDICATE_TYPE, statement)])
        return tuple(written)

    return sign


def sign_entry(lock_path: Path, entry_key: str, signer: Signer) -> Signed:
    """Sign the digest lock_path's entry entry_key was pushed at, with its provenance and SBOM attached."""
    lock = Lock.read(lock_path)
    if entry_key not in lock.builds:
        raise LockError(f"{lock_path} has no build {entry_key} to sign")
    entry = lock.entry(entry_key, f"{lock_path}: builds[{entry_key!r}]")
    if not entry.pushed or not entry.image_digest.startswith("sha256:"):
        raise LockError(f"{entry_key} of {lock_path} was not pushed: nothing to sign (buildkit push first)")
    ref = parse_image_ref(entry.pushed[0])
    name = f"{ref.registry}/{ref.repository}"
    with client_for(ref.registry) as client:
        written = sign_step(entry, signer)(client, ref, entry.image_digest)
    return Signed(f"{name}@{entry.image_digest}", written)


def attest_reproduction(image_digest: str, originals: tuple[str, ...], signer: Signer) -> tuple[str, ...]:
    """`reproduce --attest`: the rebuilder's signed VSA (release/reproduced.py) on the recorded digest, in the
    registry the record names (a lock entry's pushed repository, or the image reference reproduced)."""
    where = [spec.removeprefix("registry:") for spec in originals if spec.startswith("registry:")
             or not (spec.startswith(("docker:", "oci:")) or Path(spec).exists())]  # a bare reference: a registry's
    if not where:
        raise ReproduceError("--attest writes beside the image in its registry, and this record names none "
                             "(a lock entry that was never pushed, a local image or an archive): push it first")
    ref = parse_image_ref(where[0])
    name = f"{ref.registry}/{ref.repository}"
    statement = reproduced.reproduction_statement(name, image_digest, time_verified=_now())
    with client_for(ref.registry) as client:
        written = sign_image(client, ref.repository, image_digest, signer,
                             [Attestation(reproduced.PREDICATE_TYPE, statement)], sign=False)
    return tuple(written)
