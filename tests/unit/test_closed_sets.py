"""The closed sets written into documents, outputs and messages keep their values: a rename here changes
a JSON document, the nightly's summaries or a lock, so it must show in a diff of this test."""

from __future__ import annotations

import json
from typing import get_args

from buildkit.core.check import Status
from buildkit.flows.nightly.ciworkflow import LayerCache
from buildkit.flows.nightly.plan import (JobResult, KnownFrom, NightlyPlan, PlannedPrevious, PlannedVariant,
                                        VariantStatus)
from buildkit.flows.unit.buildunit import How
from buildkit.release.lock import Exporter
from buildkit.release.publish import Origin, PublishResult
from buildkit.plan.tags import BUMPS, Bump, TagKind
from buildkit.plan.tagset import ROLES, Role


def test_values_are_pinned() -> None:
    assert [s.value for s in Status] == ["passed", "warned", "failed", "skipped"]
    assert [s.value for s in VariantStatus] == ["passed", "failed", "skipped"]
    assert [h.value for h in How] == ["release", "loaded", "by-digest"]
    assert get_args(Origin) == ("built", "engine", "registry")
    assert get_args(Exporter) == ("oci", "load")
    assert ROLES == get_args(Role) == ("version", "sha", "build_key", "nightly", "variant", "latest", "extra")
    assert get_args(TagKind) == ("immutable", "moving")
    assert BUMPS == get_args(Bump) == ("patch", "minor", "major")
    assert get_args(KnownFrom) == ("lock", "registry")
    assert get_args(LayerCache) == ("registry", "gha", "none")


def test_members_write_as_their_values() -> None:
    """json.dumps, f-strings, str() and + give the value, as the bare strings did."""
    status = VariantStatus.FAILED
    assert json.dumps({"status": status}) == '{"status": "failed"}'
    assert f"{status}" == str(status) == "failed" and status + " (x)" == "failed (x)" and status == "failed"
    assert json.dumps([How.BY_DIGEST]) == '["by-digest"]'


def test_job_result_reads_its_status_back() -> None:
    data = {"id": "cpu", "unit": "cpu", "variant": "cpu", "platform": "linux/amd64", "commit": "c" * 40,
            "version": "0.1.0", "status": "failed", "built": False, "digest": "", "build_key": "", "tag": "",
            "build_seconds": None, "checks": [], "error": "x", "tests_tag": "", "tests_digest": ""}
    result = JobResult.from_dict({"result_version": 2, **data})
    assert result.status is VariantStatus.FAILED and result.to_dict() == {"result_version": 2, **data}
    try:
        JobResult.from_dict({"result_version": 2, **data, "status": "warned"})
    except Exception as exc:
        assert "status: expected one of passed, failed, skipped, got 'warned'" in str(exc)
    else:
        raise AssertionError("a job result of an unknown status was read")
    assert PublishResult.__dataclass_fields__["origin"].type == "Origin"


def test_a_plan_reads_its_known_from_back() -> None:
    previous = PlannedPrevious(commit=None, patch_set=None, digest="sha256:" + "a" * 64, version=None,
                               known_from="lock")
    variant = PlannedVariant(variant="cpu", arch="cpu", cuda_version=None, target="server", build=False, reason="",
                             previous=previous)
    plan = NightlyPlan(repository="r", url="u", branch="b", date="20261206", commit="c" * 40, old_commit=None,
                       patch_set_sha256="p", version="", build=False, variants=(variant,), units=(), excluded=())
    data = plan.to_dict()
    assert NightlyPlan.from_dict(data) == plan
    data["variants"][0]["previous"]["known_from"] = "cache"
    try:
        NightlyPlan.from_dict(data)
    except Exception as exc:
        assert "the plan.variants[0].previous.known_from: expected one of lock, registry, got 'cache'" in str(exc)
    else:
        raise AssertionError("a plan with an unknown known_from was read")
