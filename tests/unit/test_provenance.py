"""release/provenance.py: every input of a lock entry reaches the SLSA provenance (issue 38)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from test_inputs import CASES, MANIFEST, _entry

from buildkit.plan.buildkey import key_of
from buildkit.plan.inputs import INPUTS
from buildkit.plan.plantypes import plan_inputs
from buildkit.release.lock import entry_dict
from buildkit.release.provenance import BUILD_TYPE, PREDICATE_TYPE, RunDetails, provenance_statement

DIGEST = "sha256:" + "12" * 32
RUN = RunDetails("inv-1", "2026-12-05T00:00:00Z", "2026-12-05T00:10:00Z", builder_commit="c" * 40)


def statement_of(name: str, cuda_root: dict | None = None) -> tuple[dict, dict]:
    make, bases, manifest, host, _ = CASES[name]
    inputs = plan_inputs(make(), bases, manifest, host)
    entry = replace(_entry(inputs, key_of(inputs)), cuda_root=cuda_root)
    return json.loads(provenance_statement(entry, DIGEST, "reg.example/x/y", RUN)), entry_dict(entry)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_input_of_the_lock_is_a_parameter_of_the_provenance(name):
    statement, lock = statement_of(name)
    definition = statement["predicate"]["buildDefinition"]
    params = {**definition["externalParameters"], **definition["internalParameters"]}
    lock_inputs = [i.name for i in INPUTS if i.lock]
    assert lock_inputs and set(lock_inputs) <= set(lock)
    missing = [n for n in lock_inputs if n not in params]
    assert missing == []
    assert all(params[n] == json.loads(json.dumps(lock[n])) for n in lock_inputs)
    assert definition["buildType"] == BUILD_TYPE and statement["predicateType"] == PREDICATE_TYPE
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["subject"] == [{"name": "reg.example/x/y", "digest": {"sha256": "12" * 32}}]


def test_the_artifacts_among_the_inputs_are_resolved_dependencies():
    statement, lock = statement_of("wheels", cuda_root=MANIFEST)
    deps = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    uris = {d.get("uri") for d in deps}
    digests = [d.get("digest") for d in deps]
    assert f"git+{lock['source_url']}@{lock['commit']}" in uris
    assert {"sha256": lock["patch_set_sha256"]} in digests and {"sha256": lock["template_sha256"]} in digests
    for base in lock["base_images"]:
        assert {"sha256": base["digest"].split(":")[1]} in digests
    for wheel in MANIFEST["wheels"]:
        assert {"sha256": wheel["sha256"]} in digests
    details = statement["predicate"]["runDetails"]
    assert details["builder"]["version"]["commit"] == "c" * 40
    assert details["metadata"] == {"invocationId": "inv-1", "startedOn": RUN.started_on, "finishedOn": RUN.finished_on}
    assert statement["predicate"]["buildDefinition"]["internalParameters"]["build_number"] == lock["build_number"]
