"""plan/inputs.py: the one model of a build's inputs, its labels, its lock fields and its build key."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from buildkit.core.errors import InputsError
from buildkit.flows.unit.pipeline import inputs_record
from buildkit.flows.reproduce.record import from_lock
from buildkit.plan.buildkey import build_key, key_of
from buildkit.plan.buildplan import make_plan, make_request
from buildkit.plan.plantypes import Resolved
from buildkit.plan.request import SourceFacts
from buildkit.plan.config import load_config
from buildkit.plan.inputs import BaseImage, from_labels
from buildkit.plan.plantypes import plan_inputs
from buildkit.release.lock import LockEntry
from buildkit.release.lockfile import Lock, write_lock_entry

COMMIT = "905483277823858fdec17ff5c3750451cb1b7cdc"
FACTS = SourceFacts(url="https://example.invalid/fork", commit=COMMIT, commit_time=1767225600,
                    build_number=6123, patch_set_sha256="ab" * 32, patch_names=("0001-x.patch",))
MANIFEST = {"wheels": [{"package": "nvidia-cublas-cu13", "sha256": "b" * 64},
                       {"package": "nvidia-cuda-nvcc", "sha256": "a" * 64}]}
DEBIAN = (BaseImage("buildkit-test/debian:bookworm", "sha256:" + "cd" * 32),)
NVIDIA = (BaseImage("docker.io/nvidia/cuda:13.1.0-devel-ubuntu24.04", "sha256:" + "01" * 32),
          BaseImage("docker.io/nvidia/cuda:13.1.0-runtime-ubuntu24.04", "sha256:" + "02" * 32))


def plan(**overrides):
    cfg = load_config(None, env={}, overrides={k: (v, "test") for k, v in overrides.items()})
    return make_plan(make_request(cfg), Resolved(FACTS, "7" * 64, "9.9.9"))


CASES = {  # name: (plan, bases, CUDA manifest, cpu_host, the build key the code before the model gave)
    "cpu": (lambda: plan(**{"build.arch": "cpu", "build.cmake_args": ["-DX=1"]}), DEBIAN, None, None,
            "eb4317283bacdc1a4c9a4da83bea50fdb9d58f8c9da83971a5889f420caab7fb"),
    "wheels": (lambda: plan(**{"build.arch": "sm_120", "base.provider": "wheels", "build.target": "full"}),
               DEBIAN, MANIFEST, None, "e2e0ebc040995f34e7560b1d716502c90451c0df0749fe0286ea791fe0a28306"),
    "nvidia": (lambda: plan(**{"build.arch": "sm_90", "build.no_vmm": False}), NVIDIA, None, None,
               "9cdbf8d1df49aea3937b5d635a84b064ae758c7df88b2608936e396f5ef710ba"),
    "native": (lambda: plan(**{"build.arch": "cpu", "build.cpu_level": "native"}), DEBIAN, None,
               "GenuineIntel 6/85", "75956c84afaf4d80d4c967e96c61b94d94569b4c2904f4c7ceb914ee516e59b8"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_build_key_is_the_one_existing_tags_and_locks_carry(name):
    make, bases, manifest, host, expected = CASES[name]
    p = make()
    assert key_of(plan_inputs(p, bases, manifest, host)) == expected
    assert build_key(p, bases, manifest, cpu_host=host) == expected


def test_the_inputs_label_is_the_one_existing_images_carry():
    record = inputs_record(CASES["wheels"][0](), DEBIAN, MANIFEST)
    assert json.dumps(record, sort_keys=True, separators=(",", ":")) == (
        '{"base_images":[["buildkit-test/debian:bookworm","sha256:' + "cd" * 32 + '"]],"ccache":true,'
        '"cpu_level":"all","cublas":true,"cuda_wheels":["' + "a" * 64 + '","' + "b" * 64 + '"],'
        '"devel_image":"docker.io/library/ubuntu:24.04","extra_cmake_args":[],"format":1,"jobs":0,"no_vmm":true,'
        '"patches":["0001-x.patch"],"platform":"linux/amd64","provider":"wheels",'
        '"runtime_image":"docker.io/library/ubuntu:24.04"}')


@pytest.mark.parametrize("name", sorted(CASES))
def test_model_to_labels_to_model_is_the_same_model(name):
    make, bases, manifest, host, _ = CASES[name]
    inputs = plan_inputs(make(), bases, manifest, host)
    labels = inputs.to_labels(key_of(inputs))
    assert from_labels(labels, "image x") == inputs
    # the plan made with what was resolved has the model's labels (one serialiser) and its key
    plan = make()
    resolved = make_plan(plan.request, Resolved(plan.source, plan.template_sha256, plan.tool_version, base_images=bases,
                                                cuda_manifest=manifest, cpu_host=host))
    assert dict(resolved.labels) == labels and resolved.build_key == key_of(inputs) and resolved.inputs == inputs


def _entry(inputs, key: str) -> LockEntry:
    return LockEntry(**inputs.lock_fields(), ref="main", template="t.j2", dockerfile_sha256="d" * 64,
                     cuda_root=None, cmake_archs=None, image_name="x/y", image_digest="sha256:" + "e" * 64,
                     image_id="sha256:" + "f" * 64, tags=("x/y:cpu",), build_key=key,
                     labels=inputs.to_labels(key))


@pytest.mark.parametrize("name", ["cpu", "nvidia", "native"])
def test_model_to_lock_to_model_is_the_same_model(name, tmp_path):
    make, bases, manifest, host, expected = CASES[name]
    inputs = plan_inputs(make(), bases, manifest, host)
    entry = _entry(inputs, key_of(inputs))
    assert entry.inputs() == inputs
    path = tmp_path / "buildkit.lock"
    write_lock_entry(path, entry)
    again = Lock.read(path).entry(entry.key)
    assert again == entry and again.inputs() == inputs and key_of(again.inputs()) == expected
    rec = from_lock(path)
    assert rec.inputs == inputs and rec.build_key == expected


def test_a_lock_with_a_wheel_manifest_takes_the_wheels_from_it():
    make, bases, manifest, host, _ = CASES["wheels"]
    inputs = plan_inputs(make(), bases, manifest, host)
    entry = replace(_entry(inputs, key_of(inputs)), cuda_root=MANIFEST)
    assert entry.inputs() == inputs and entry.inputs().cuda_wheels == ("a" * 64, "b" * 64)


def test_a_lock_file_as_written_before_the_model_still_loads(tmp_path):
    inputs = plan_inputs(CASES["cpu"][0](), DEBIAN)
    labels = dict(CASES["cpu"][0]().labels)
    labels["org.llama-buildkit.inputs"] = json.dumps(inputs_record(CASES["cpu"][0](), DEBIAN, None))
    old = {"source_url": FACTS.url, "ref": "main", "commit": COMMIT, "build_number": 6123,
           "patches": ["0001-x.patch"], "patch_set_sha256": "ab" * 32, "template": "cpu.Dockerfile.j2",
           "template_sha256": "7" * 64, "dockerfile_sha256": "d" * 64,
           "base_images": [{"ref": DEBIAN[0].ref, "digest": DEBIAN[0].digest}], "cuda_version": None,
           "cuda_root": None, "arch": "cpu", "cmake_archs": None, "target": "server", "platform": "linux/amd64",
           "no_vmm": True, "cmake_args": list(inputs.cmake_args), "source_date_epoch": 1767225600,
           "tool_version": "9.9.9", "image_name": "x/y", "image_digest": "sha256:" + "e" * 64,
           "image_id": "sha256:" + "f" * 64, "tags": ["x/y:cpu"], "variant": "cpu", "version": "0.1.0",
           "build_key": "k", "pushed": [], "labels": labels, "exporter": "oci", "bench": None, "build_seconds": 1.5}
    path = tmp_path / "buildkit.lock"
    path.write_text(json.dumps({"lock_version": 1, "builds": {"cpu/server": old}}))
    assert Lock.read(path).entry("cpu/server").inputs() == inputs
    assert from_lock(path).inputs == inputs


def test_a_record_without_the_inputs_label_is_one_error():
    labels = plan_inputs(CASES["cpu"][0](), DEBIAN).to_labels()
    del labels["org.llama-buildkit.inputs"]
    with pytest.raises(InputsError, match="no org.llama-buildkit.inputs label"):
        from_labels(labels, "image x")
