"""Resolve, then plan, once (issue 49): make_plan is pure and gives the final plan (inputs, build key, labels,
tags with the build-key tag, the ccache mount, the apt pins) from what was resolved; a lock entry is made
from a plan and what its build produced by LockEntry.of only; flows amend no plan."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from buildkit.plan.aptpins import AptPins
from buildkit.plan.buildkey import key_of
from buildkit.plan.buildplan import clean_ccache_id, make_plan, render_view
from buildkit.plan.plantypes import PlanOptions, Resolved
from buildkit.plan.inputs import BaseImage
from buildkit.plan.plantypes import plan_inputs
from buildkit.plan.render import render_dockerfile
from buildkit.plan.tags import build_key_tag
from buildkit.release.lock import BuildOutcome, LockEntry, entry_dict
from buildkit.release.lockfile import write_lock_entry
from test_plan_render import plan_for

FLOWS = Path(__file__).parents[2] / "buildkit" / "flows"
DIGEST = "sha256:" + "b" * 64
MANIFEST = {"wheels": [{"package": "nvidia-cublas-cu13", "sha256": "a" * 64}]}


def _resolved(plan, **changes) -> Resolved:
    base = BaseImage(plan.request.runtime_image, DIGEST)
    return replace(Resolved(plan.source, plan.template_sha256, plan.tool_version, base_images=(base,)), **changes)


def test_make_plan_is_pure_and_gives_the_final_plan():
    plan = plan_for(**{"build.arch": "sm_120", "base.provider": "wheels"})
    resolved = _resolved(plan, cuda_manifest=MANIFEST, cpu_host=None)
    options = PlanOptions(extra_tags=("x",))
    made = make_plan(plan.request, resolved, options)
    assert made == make_plan(plan.request, resolved, options)  # the same arguments, the same plan
    # key, labels and inputs as the stages made them before: the inputs of plan and what was resolved
    inputs = plan_inputs(plan, resolved.base_images, MANIFEST, None)
    assert made.inputs == inputs and made.build_key == key_of(inputs) and made.cuda_manifest == MANIFEST
    assert made.labels == tuple(inputs.to_labels(made.build_key).items())
    image = plan.request.image_name
    assert made.tags == (*plan.tags[:2], f"{image}:x", f"{image}:{build_key_tag(made.build_key, 'cuda13.1-sm120')}")
    assert made.tags[-1] != plan.tags[-1]  # other base digests and CUDA wheels: another key
    assert make_plan(plan.request, resolved, replace(options, shared_tags=False)).tags == made.tags[-1:]


def test_a_clean_build_and_apt_pins_change_how_it_is_made_not_what():
    plan = plan_for(**{"build.arch": "cpu"})
    resolved = _resolved(plan)
    warm = make_plan(plan.request, resolved)
    pins = AptPins(build=(("libc6", "2.36-9"),), runtime=(("libc6", "2.36-9"),))
    clean = make_plan(plan.request, resolved, PlanOptions(clean_ccache=True, apt_pins=pins))
    assert clean.ccache_recache and clean.ccache_id == clean_ccache_id(warm.ccache_id) and clean.apt_pins == pins
    assert (clean.labels, clean.build_key, clean.tags) == (warm.labels, warm.build_key, warm.tags)
    # the FROM names are a render-time view: the plan keeps the configured names
    named = f"{plan.request.runtime_image}@{DIGEST}"
    view = render_view(clean, ((plan.request.runtime_image, named),), pinned=False)
    assert view.apt_pins is None and view.request.devel_image == named and clean.request.devel_image != named
    assert f"FROM {named} AS build" in render_dockerfile(view)


def test_lock_entry_of_a_plan_and_its_outcome(tmp_path):
    plan = plan_for(**{"build.arch": "cpu"})
    made = make_plan(plan.request, _resolved(plan, source=replace(plan.source, ref="master",
                                                                  patch_sha256=("c" * 64,))))
    outcome = BuildOutcome(dockerfile_sha256="d" * 64, image_digest="sha256:" + "e" * 64, image_id="sha256:1",
                           tags=made.tags, exporter="oci", build_seconds=12.3, build_started="2026-01-01T00:00:00Z",
                           build_finished="2026-01-01T00:00:12Z", debian_packages={"build": {}, "runtime": {}})
    entry = LockEntry.of(made, outcome)
    # the fields the pipeline's lock_entry wrote before, one by one
    req = made.request
    before = LockEntry(**made.inputs.lock_fields(), ref="master", template=req.template, dockerfile_sha256="d" * 64,
                       cuda_root=None, cmake_archs=req.arch.cmake_archs, image_name=req.image_name,
                       build_key=made.build_key, image_digest=outcome.image_digest, image_id="sha256:1",
                       tags=made.tags, labels=dict(made.labels), exporter="oci", build_seconds=12.3,
                       patch_sha256=("c" * 64,), build_started=outcome.build_started,
                       build_finished=outcome.build_finished, debian_packages=outcome.debian_packages)
    assert entry == before and entry.inputs() == made.inputs
    write_lock_entry(tmp_path / "buildkit.lock", entry)
    written = json.loads((tmp_path / "buildkit.lock").read_text())["builds"][entry.key]
    assert written == json.loads(json.dumps(entry_dict(before)))
    # an image the registry has (nothing built here): its digest, no engine id, no times
    found = LockEntry.of(made, BuildOutcome(dockerfile_sha256="d" * 64, image_digest=DIGEST))
    assert (found.image_id, found.tags, found.exporter, found.build_seconds, found.build_started) == ("", (), "load",
                                                                                                      0.0, "")


def test_flows_amend_no_plan_and_make_lock_entries_through_lock_entry_of():
    for path in FLOWS.rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"replace\((\w+\.)?(plan|prepared|pr)\s*,", text), path  # a plan made again: make_plan
        assert not re.search(r"\bLockEntry\(", text), path  # LockEntry.of, in release/lock.py
