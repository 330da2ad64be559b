"""What each variant's nightly tag was built from, and why it must be built again (flows/nightly/run.py step 2).

The registry is the truth, the lock a shortcut: one HEAD request for `nightly-<variant>` gives the
digest the world sees. When the lock's nightly record holds that digest, its commit and patch set are
used, and the inputs of the lock entry of that digest (builds[...].image_digest, or the platform entry
of an indexes[...] entry's index_digest). Otherwise (no lock, a lock from elsewhere, an image tagged by
hand, an entry since replaced by another build) the image's labels are read from the registry: commit,
patch set and, from the same response, every recorded input (plan/inputs.py from_labels).

A variant is up to date when its image was built from the head commit with the current patch set
and every input its config decides (plan/configinputs.py) is what the config makes now; an input
the image predates counts as its declared `absent` value.

Labels are the image's word about itself, and a tag is a pointer anyone with push rights can move (issue 48).
With a signing key, an image the lock does not vouch for counts only when the key signed its digest and
attached a provenance of the commit its labels name (release/ownership.py); any other image is not ours:
its variant is built anew (the reason says so), and nothing of it is signed, kept or recorded.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric import ec

from buildkit import __version__
from buildkit.core.errors import InputsError, LockError, BuildkitError
from buildkit.core.paths import templates_sha256
from buildkit.core.printable import printable
from buildkit.flows.nightly.plan import KnownFrom
from buildkit.oci.imageref import ImageRef
from buildkit.oci.registry import RegistryClient
from buildkit.plan.configinputs import config_changes, config_inputs
from buildkit.plan.inputs import BuildInputs, from_labels
from buildkit.release.lockfile import Lock, update_lock
from buildkit.release.publish import image_labels
from buildkit.release.provenance import PREDICATE_TYPE, signed_definition
from buildkit.release.signing import attested_statement, check_signature

if TYPE_CHECKING:
    from buildkit.flows.unit.spec import VariantSpec

REVISION_LABEL = "org.opencontainers.image.revision"
PATCH_SET_LABEL = "org.llama-buildkit.patch-set"
RECORD_FIELDS = ("commit", "patch_set_sha256", "digest", "version", "date")  # of each variant's record
VERSION_LABEL = "org.opencontainers.image.version"


def nightly_tag(key: str) -> str:
    return f"nightly-{key}"


def one_per_key(variants: Sequence[VariantSpec]) -> list[VariantSpec]:
    """A multi-platform variant's first platform stands for it (one nightly tag, one summary row)."""
    return list({v.key: v for v in reversed(variants)}.values())[::-1]


@dataclass(frozen=True)
class Previous:
    commit: str | None
    patch_set: str | None
    digest: str
    version: str | None
    known_from: KnownFrom  # "lock" (the lock holds the registry's digest) or "registry" (image labels)
    inputs: BuildInputs | None = field(default=None, repr=False)  # what it was built with; None: unreadable
    unread: str = ""  # why inputs is None
    foreign: str = ""  # why the image is not ours (a signing key was given and it is not signed by it)

    def to_dict(self) -> dict[str, Any]:
        """What the plan and the summary say of it (the inputs stay out)."""
        return {"commit": self.commit, "patch_set": self.patch_set, "digest": self.digest, "version": self.version,
                "known_from": self.known_from}


def _lock_of(lock_path: Path) -> Lock:
    try:
        return Lock.read(lock_path)
    except LockError:
        return Lock.empty(lock_path)


def read_nightly_record(lock_path: Path, url: str, branch: str) -> dict[str, Any]:
    """The lock's nightly record, if it is about this repository and branch and has the shape nightly
    writes; anything else is no record (the registry's labels are asked instead, and it is rewritten)."""
    return _record_of(_lock_of(lock_path), url, branch)


def _record_of(lock: Lock, url: str, branch: str) -> dict[str, Any]:
    record = dict(lock.nightly)
    return record if _ours(record, url, branch) else {}


def _ours(record: dict[str, Any], url: str, branch: str) -> bool:
    variants = record.get("variants", {})
    return record.get("url") == url and record.get("branch") == branch and isinstance(variants, dict) and all(
        isinstance(v, dict) and all(isinstance(v.get(k), (str, type(None))) for k in RECORD_FIELDS)
        for v in variants.values())


def update_nightly_record(lock_path: Path, url: str, branch: str, key: str, entry: dict[str, Any]) -> None:
    """Set the record of one variant (atomically, under the lock's writer lock)."""
    def change(lock: Lock) -> Lock:
        record = dict(lock.nightly)
        if not _ours(record, url, branch):
            record = {"url": url, "branch": branch, "variants": {}}
        record["variants"] = dict(sorted({**record.get("variants", {}), key: entry}.items()))
        return lock.with_nightly(record)
    update_lock(lock_path, change)


def lock_inputs(lock: Lock, digest: str, platform: str) -> BuildInputs | None:
    """The inputs of the lock's entry for the image at digest (a multi-platform index: its entry of
    platform, else its first); None when the lock has no readable entry of it."""
    name = lock.by_digest(digest)
    found = lock.index_by_digest(digest)
    if name is None and found is not None:
        index = found[1]
        name = next((p.entry for p in index.platforms if p.platform == platform), index.platforms[0].entry)
    if name is None or name not in lock.builds:
        return None
    try:
        return lock.inputs(name, f"lock entry {name}")
    except InputsError:
        return None


def last_built(client: RegistryClient, repo: str, variant: VariantSpec, record: dict[str, Any] | None,
               lock: Lock, key: ec.EllipticCurvePublicKey | None = None) -> Previous | None:
    """What nightly-<key> in the registry was built from; None when there is no such image. With key, an
    image the lock does not record must be signed by it (else Previous.foreign says why not)."""
    info = client.head_manifest(repo, nightly_tag(variant.key))
    if info is None:
        return None
    if record and record.get("digest") == info.digest:
        inputs = lock_inputs(lock, info.digest, variant.request.platform)
        if inputs is not None:
            return Previous(record.get("commit"), record.get("patch_set_sha256"), info.digest,
                            record.get("version"), "lock", inputs)

    labels = image_labels(client, repo, info.digest)
    if key is not None:
        foreign = _not_signed(client, repo, info.digest, key, labels.get(REVISION_LABEL))
        if foreign:
            return Previous(None, None, info.digest, None, "registry",
                            foreign=f"{nightly_tag(variant.key)} names {info.digest}, which this project did not "
                                    f"publish ({foreign}): tampered? built anew")
    try:
        recorded, unread = from_labels(labels, f"{repo}:{nightly_tag(variant.key)}"), ""
    except InputsError as exc:
        recorded, unread = None, str(exc)
    return Previous(labels.get(REVISION_LABEL), labels.get(PATCH_SET_LABEL), info.digest, labels.get(VERSION_LABEL),
                    "registry", recorded, unread)


def _not_signed(client: RegistryClient, repo: str, digest: str, key: ec.EllipticCurvePublicKey,
                commit: str | None) -> str:
    """Why the image at digest is not one key signed with a provenance of commit ("" when it is)."""
    try:
        check_signature(client, repo, digest, key)
        definition = signed_definition(attested_statement(client, repo, digest, key, PREDICATE_TYPE)) or {}
    except BuildkitError as exc:
        return printable(str(exc))[:300]
    params = definition.get("externalParameters")
    if not isinstance(params, dict) or params.get("commit") != commit:
        return "its signed provenance is not of the commit its labels name"
    return ""


def previous_builds(client: RegistryClient, repository: ImageRef, variants: Sequence[VariantSpec], lock_path: Path,
                    url: str, branch: str, key: ec.EllipticCurvePublicKey | None = None,
                    ) -> dict[str, Previous | None]:
    """{variant key: what its nightly tag was built from}: one registry request per variant whose nightly
    record and lock entry the lock holds, the image's labels (its manifest and config) for the others, and with
    key their signature and provenance."""
    lock = _lock_of(lock_path)
    record = _record_of(lock, url, branch)
    return {v.key: last_built(client, repository.repository, v, (record.get("variants") or {}).get(v.key), lock, key)
            for v in one_per_key(variants)}


def old_commit_of(previous: dict[str, Previous | None]) -> str | None:  # the changelog's start
    commits = [p.commit for p in previous.values() if p is not None and p.commit]
    return collections.Counter(commits).most_common(1)[0][0] if commits else None


def config_of(variant: VariantSpec, url: str) -> dict[str, Any]:
    """The inputs the variant's config decides now (plan/configinputs.py), with this buildkit's version
    and templates."""
    return config_inputs(variant.request, source_url=url, template_sha256=templates_sha256(),
                         tool_version=__version__)


def stale_reason(previous: Previous | None, commit: str, patch_set: str, wanted: Mapping[str, Any]) -> str:
    """Why the variant's nightly must be built ("" when it is up to date: built from commit with patch_set
    and every config-decided input as wanted)."""
    if previous is None:
        return "no nightly image yet"
    if previous.foreign:
        return previous.foreign
    if previous.commit != commit:
        return f"new commit {(previous.commit or 'unknown')[:12]} -> {commit[:12]}"
    if previous.patch_set != patch_set:
        return "patch set changed"
    if previous.inputs is None:
        return f"what it was built with cannot be read ({previous.unread or 'not recorded'})"
    return "; ".join(config_changes(previous.inputs, wanted))


def is_current(previous: Previous | None, commit: str, patch_set: str, wanted: Mapping[str, Any]) -> bool:
    return not stale_reason(previous, commit, patch_set, wanted)


def stale_variants(previous: dict[str, Previous | None], variants: Sequence[VariantSpec], commit: str, patch_set: str,
                   url: str, force: bool = False) -> dict[str, str]:
    """{variant key: why its nightly is built tonight ("": it is not)}; a multi-platform variant is judged
    by its first platform, the image whose labels its nightly tag shows."""
    reasons = {v.key: stale_reason(previous[v.key], commit, patch_set, config_of(v, url))
               for v in one_per_key(variants)}
    return {key: why or ("--force" if force else "") for key, why in reasons.items()}
