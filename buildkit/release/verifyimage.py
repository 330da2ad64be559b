"""`buildkit verify-image REF --key PUB [--lock]` (issues 38, 48): one result per check, each a line.

1. the digest of the manifest the registry serves for REF: fetched with GET (by digest when REF names one)
   and its digest computed from the bytes received, never taken from a HEAD answer alone;
2. a signature of that digest by the key, in cosign's tag scheme (release/signing.py) or as an OCI 1.1
   referrer (release/referrersigning.py); the line says where each was found;
3. a provenance attestation by the key whose subject is that digest, in either place;
4. with a lock: a lock entry of that digest (a build's, or a multi-platform index's), and the provenance's
   buildDefinition equal to the one its entry makes, field by field (release/provenance.py
   definition_differences): every parameter, the build key, the Dockerfile's hash, the CUDA archs, each
   resolved dependency; a parameter the lock does not know fails (SLSA: verifiers reject unknown external
   parameters).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from buildkit.core.check import Check, Status
from buildkit.core.errors import BuildkitError
from buildkit.core.printable import printable
from buildkit.oci.imageref import parse_image_ref
from buildkit.oci.registry import RegistryClient
from buildkit.release.lockfile import Lock
from buildkit.release.provenance import (PREDICATE_TYPE, build_definition, definition_differences,
                                         index_build_definition)
from buildkit.release.cosignformat import tag_for
from buildkit.release.referrersigning import ReferrerFindings, find_referrers
from buildkit.release.signing import attested_statement, check_signature
from buildkit.release.signkeys import load_public_key


def line(check: Check) -> str:
    """One check as verify-image prints it: ok or FAIL (a check here passes or fails), its name, its detail."""
    return f"{'FAIL' if check.failed else 'ok'}  {check.name}: {printable(check.detail)}"


def _expected(lock: Lock, digest: str, name: str) -> tuple[str, dict[str, Any]] | None:
    """(the lock's key of the entry that built digest, the buildDefinition it makes); None when none did."""
    key = lock.by_digest(digest)
    if key is not None:
        return key, build_definition(lock.entry(key, f"lock entry {key}"))
    found = lock.index_by_digest(digest)
    if found is not None:
        key, index = found
        first = lock.builds.get(index.platforms[0].entry)
        platforms = [(p.platform, p.manifest_digest) for p in index.platforms]
        return key, index_build_definition(name, platforms, commit=first.commit if first else "",
                                                 version=index.version)
    return None


def lock_check(statement: dict[str, Any], digest: str, lock_path: Path, name: str = "") -> Check:
    """The signed statement's buildDefinition against the one the lock's entry of digest makes."""
    found = _expected(Lock.read(lock_path), digest, name)
    if found is None:
        return Check("lock", Status.FAILED, f"no entry of {lock_path} built {digest}")
    key, expected = found
    differ = definition_differences(statement, expected)
    if differ:
        return Check("lock", Status.FAILED, f"the provenance's {', '.join(differ)} not as in {key} of {lock_path}")
    return Check("lock", Status.PASSED, f"the provenance's inputs are {key} of {lock_path}")


def verify_image(client: RegistryClient, ref_text: str, key_path: Path, lock_path: Path | None = None) -> list[Check]:
    key = load_public_key(key_path)
    ref = parse_image_ref(ref_text)
    reference = ref.digest or ref.tag or "latest"
    if client.head_manifest(ref.repository, reference) is None:  # (only to say "not there" in one line)
        return [Check("digest", Status.FAILED, f"{ref_text} is not in the registry")]
    # the manifest verified is the one a GET serves: its digest computed from the bytes received (checked against
    # the digest asked by, or the answer's Docker-Content-Digest), never what the HEAD said, so a registry whose
    # HEAD names one image while its GET serves another never passes
    _, _, digest = client.get_manifest(ref.repository, reference)
    checks = [Check("digest", Status.PASSED, f"{ref_text} is {digest}")]
    try:  # where cosign 3 looks (release/referrersigning.py); cosign's tags are where cosign 2 looks
        referred = find_referrers(client, ref.repository, digest, key)
    except BuildkitError as exc:
        referred = ReferrerFindings(f"the referrers ({exc})", (), ())
    places, why = [], ""
    try:
        check_signature(client, ref.repository, digest, key)
        places.append(f"cosign's tag {tag_for(digest, 'sig')}")
    except BuildkitError as exc:
        why = str(exc)
    if referred.signed:
        places.append(f"{' and '.join(referred.signatures)} through {referred.route}")
    checks.append(Check("signature", Status.PASSED, f"{digest} is signed by {key_path} ({'; '.join(places)})") if places
                  else Check("signature", Status.FAILED, f"{why}, nor through {referred.route}"))
    statement: dict[str, Any] | None = None
    places, why = [], ""
    try:
        statement = attested_statement(client, ref.repository, digest, key, PREDICATE_TYPE)
        places.append(f"cosign's tag {tag_for(digest, 'att')}")
    except BuildkitError as exc:
        why = str(exc)
    provenances = [s for s in referred.statements if s.get("predicateType") == PREDICATE_TYPE]
    if provenances:
        statement = statement or provenances[0]
        places.append(f"a sigstore bundle through {referred.route}")
    checks.append(Check("provenance", Status.PASSED, f"a signed SLSA provenance v1 of {digest} ({'; '.join(places)})")
                  if statement is not None
                  else Check("provenance", Status.FAILED, f"{why}, nor through {referred.route}"))
    if lock_path is not None:
        name = f"{ref.registry}/{ref.repository}"
        checks.append(lock_check(statement, digest, lock_path, name) if statement is not None
                      else Check("lock", Status.FAILED, "no provenance to compare with the lock"))
    return checks
