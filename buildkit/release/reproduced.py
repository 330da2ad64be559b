"""An independent rebuilder's word (issue 38, `reproduce --attest`): an in-toto Statement v1 whose predicate is
a SLSA Verification Summary (VSA v1) saying that the rebuilder rebuilt the image from its recorded inputs and
got the same manifest digest. Signed with the rebuilder's own key and attached beside the builder's
provenance in cosign's format, so `cosign verify-attestation --type https://slsa.dev/verification_summary/v1`
checks it. The in-toto project's models (in-toto-attestation) validate both the statement and the VSA.
"""

from __future__ import annotations

import json

from google.protobuf import json_format
from in_toto_attestation.predicates.vsa.v1 import vsa_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import STATEMENT_TYPE_URI as STATEMENT_TYPE
from in_toto_attestation.v1.statement import Statement

import buildkit
from buildkit.core.errors import ReproduceError
from buildkit.release.provenance import BUILDER_ID

PREDICATE_TYPE = "https://slsa.dev/verification_summary/v1"
VERIFIER_ID = BUILDER_ID + "/reproduce"
POLICY_URI = BUILDER_ID + "/blob/main/docs/reproducibility.md#an-independent-rebuilders-word"
# A custom verifiedLevels value (the VSA allows them): a rebuild from the recorded inputs, bit for bit.
REPRODUCED = "LLAMABUILDKIT_REPRODUCED_BIT_FOR_BIT"


def reproduction_statement(image_name: str, digest: str, *, time_verified: str) -> bytes:
    """The statement (JSON bytes): subject image_name@digest, rebuilt and found identical at time_verified."""
    algorithm, _, hexpart = digest.partition(":")
    if algorithm != "sha256" or len(hexpart) != 64:
        raise ReproduceError(f"{digest!r} is not a sha256 digest; nothing to attest")
    predicate = {
        # (the library's VSA v1 model has the verifier's id only: its version is in the id)
        "verifier": {"id": f"{VERIFIER_ID}@{buildkit.__version__}"},
        "timeVerified": time_verified,
        "resourceUri": f"docker://{image_name}@{digest}",
        "policy": {"uri": POLICY_URI},
        "verificationResult": "PASSED",
        "verifiedLevels": [REPRODUCED],
        "slsaVersion": "1.0",
    }
    # the VSA's own schema, unknown fields refused; its model (in-toto-attestation 0.9) types verifiedLevels as
    # one string where the spec has an array of them: checked with the one level written
    try:
        json_format.ParseDict({**predicate, "verifiedLevels": REPRODUCED}, vsa_pb2.VerificationSummary())
    except json_format.ParseError as exc:
        raise ReproduceError(f"the verification summary does not fit SLSA's VSA v1: {exc}") from None
    subject = ResourceDescriptor(name=image_name, digest={algorithm: hexpart})
    Statement([subject.pb], PREDICATE_TYPE, predicate).validate()
    document = {"_type": STATEMENT_TYPE, "subject": [json_format.MessageToDict(subject.pb)],
                "predicateType": PREDICATE_TYPE, "predicate": predicate}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


__all__ = ["PREDICATE_TYPE", "REPRODUCED", "reproduction_statement"]
