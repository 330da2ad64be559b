"""`buildkit verify-image REF --key PUB [--lock]` (issue 38): one result per check, each a line.

1. the digest the registry serves for REF (a tag is resolved; a digest must be served as is);
2. a signature of that digest by the key, in cosign's tag scheme (release/signing.py) or as an OCI 1.1
   referrer (release/referrersigning.py); the line says where each was found;
3. a provenance attestation by the key whose subject is that digest, in either place;
4. with a lock: a lock entry of that digest, and the provenance's parameters equal to its inputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from buildkit.core.errors import BuildkitError
from buildkit.oci.imageref import parse_image_ref
from buildkit.oci.registry import RegistryClient
from buildkit.release.lock import entry_dict, entry_from_dict, read_lock
from buildkit.release.provenance import PREDICATE_TYPE, lock_input_names
from buildkit.release.cosignformat import tag_for
from buildkit.release.referrersigning import ReferrerFindings, find_referrers
from buildkit.release.signing import attested_statement, check_signature
from buildkit.release.signkeys import load_public_key


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok' if self.ok else 'FAIL'}  {self.name}: {self.detail}"


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def lock_check(statement: dict[str, Any], digest: str, lock_path: Path) -> Check:
    builds = read_lock(lock_path).get("builds", {})
    entries = [entry_from_dict(data, f"lock entry {key}") for key, data in sorted(builds.items())
               if isinstance(data, dict) and data.get("image_digest") == digest]
    if not entries:
        return Check("lock", False, f"no entry of {lock_path} built {digest}")
    definition = statement.get("predicate", {}).get("buildDefinition", {})
    params = {**(definition.get("externalParameters") or {}), **(definition.get("internalParameters") or {})}
    lock = entry_dict(entries[0])
    differ = [name for name in lock_input_names() if params.get(name, None) != _json(lock.get(name))
              or name not in params]
    if differ:
        return Check("lock", False, f"the provenance's {', '.join(differ)} not as in {entries[0].key} of {lock_path}")
    return Check("lock", True, f"the provenance's inputs are {entries[0].key} of {lock_path}")


def verify_image(client: RegistryClient, ref_text: str, key_path: Path, lock_path: Path | None = None) -> list[Check]:
    key = load_public_key(key_path)
    ref = parse_image_ref(ref_text)
    reference = ref.digest or ref.tag or "latest"
    info = client.head_manifest(ref.repository, reference)
    if info is None or (ref.digest and info.digest != ref.digest):
        return [Check("digest", False, f"{ref_text} is not in the registry")]
    digest = info.digest
    checks = [Check("digest", True, f"{ref_text} is {digest}")]
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
    checks.append(Check("signature", True, f"{digest} is signed by {key_path} ({'; '.join(places)})") if places
                  else Check("signature", False, f"{why}, nor through {referred.route}"))
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
    checks.append(Check("provenance", True, f"a signed SLSA provenance v1 of {digest} ({'; '.join(places)})")
                  if statement is not None else Check("provenance", False, f"{why}, nor through {referred.route}"))
    if lock_path is not None:
        checks.append(lock_check(statement, digest, lock_path) if statement is not None
                      else Check("lock", False, "no provenance to compare with the lock"))
    return checks
