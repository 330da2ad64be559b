"""release/reproduced.py: the rebuilder's SLSA verification summary, checked against the in-toto models."""
import json

import pytest

from buildkit.core.errors import ReproduceError
from buildkit.release.reproduced import PREDICATE_TYPE, REPRODUCED, reproduction_statement

DIGEST = "sha256:" + "ab" * 32


def test_the_statement_names_the_digest_and_says_passed():
    doc = json.loads(reproduction_statement("127.0.0.1:5000/team/buun", DIGEST, time_verified="2026-12-05T10:00:00Z"))
    assert doc["_type"] == "https://in-toto.io/Statement/v1" and doc["predicateType"] == PREDICATE_TYPE
    assert doc["subject"] == [{"name": "127.0.0.1:5000/team/buun", "digest": {"sha256": "ab" * 32}}]
    predicate = doc["predicate"]
    assert predicate["verificationResult"] == "PASSED" and predicate["verifiedLevels"] == [REPRODUCED]
    assert predicate["resourceUri"] == f"docker://127.0.0.1:5000/team/buun@{DIGEST}"
    assert predicate["verifier"]["id"].startswith("https://github.com/llama-buildkit/buildkit/reproduce@")


@pytest.mark.parametrize("digest", ["sha256:abc", "sha512:" + "a" * 128, "", "ab" * 32])
def test_a_digest_that_is_not_sha256_is_refused(digest):
    with pytest.raises(ReproduceError):
        reproduction_statement("r/x", digest, time_verified="2026-12-05T10:00:00Z")


def test_a_bad_time_is_refused_by_the_vsa_model():
    with pytest.raises(ReproduceError, match="VSA v1"):  # the model checks the timestamp's form
        reproduction_statement("r/x", DIGEST, time_verified="yesterday")
