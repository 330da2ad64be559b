"""A nightly is up to date only when its image was built from the head commit with the current patch set
and every input its config decides is what the config makes now (issue 23 item 1). The registry is a
dict that counts requests, the branch head is given; the images' labels are the ones a real plan writes,
so what the nightly reads back is what a build records."""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from dataclasses import asdict, replace

import pytest

from buildkit import __version__
from buildkit.core.paths import templates_sha256
from buildkit.flows.nightly import run as nightly
from buildkit.flows.nightly import jobs as nightlyjobs
from buildkit.flows.nightly.run import Previous, VariantStatus, is_current, one_per_key, run_nightly
from buildkit.plan.patchqueue import patch_dir
from buildkit.flows.nightly.previous import config_of, stale_reason, update_nightly_record
from buildkit.oci.registry import ManifestInfo
from buildkit.plan.buildplan import make_plan
from buildkit.plan.plantypes import Resolved
from buildkit.plan.request import SourceFacts
from buildkit.plan.config import load_config
from buildkit.plan.configinputs import CONFIG_INPUTS, config_decided
from buildkit.plan.inputs import INPUTS, LABEL_PREFIX, BaseImage
from buildkit.plan.plantypes import plan_inputs
from buildkit.cli.nightlyspecs import nightly_spec, variant_specs
from buildkit.flows.nightly.spec import at_head, on_engine, with_build
from buildkit.cli.unitspecs import variant_spec
from buildkit.plan.matrix import matrix_variants
from buildkit.release.lock import entry_from_dict
from buildkit.release.lockfile import update_lock
from buildkit.source.patches import load_patch_queue
from fakeengine import FakeEngine

HEAD = "c0ffee" + "0" * 34
URL = "https://example.invalid/fork"
REPO = "registry.test/t/llama"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DEBIAN = (BaseImage("debian:bookworm", "sha256:" + "cd" * 32),)

CONFIG_DECIDED = {"source_url", "title", "licenses", "arch", "cuda_version", "variant", "target", "cpu_level",
                  "template_sha256", "tool_version", "devel_image", "runtime_image", "provider", "platform", "jobs",
                  "ccache", "no_vmm", "extra_cmake_args", "user", "description", "url", "base_name",
                  "apt_snapshot"}


def config(tmp_path, **overrides):
    values = {"source.url": URL, "source.branch": "master", "image.name": REPO, "matrix.archs": ["cpu"],
              "matrix.targets": ["server"], "lock.path": str(tmp_path / "buildkit.lock"), **overrides}
    return load_config(None, env={}, overrides={k: (v, "test") for k, v in values.items()})


class Registry:
    """One repository on a dict: {tag: the image's labels}; every request is counted."""

    host = "registry.test"

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.tags: dict[str, str] = {}
        self.requests: list[str] = []

    def push(self, tag: str, labels: dict[str, str]) -> str:
        config = json.dumps({"config": {"Labels": labels}}).encode()
        config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
        manifest = json.dumps({"schemaVersion": 2, "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                                              "digest": config_digest, "size": len(config)}}).encode()
        digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        self.blobs.update({config_digest: config, digest: manifest})
        self.tags[tag] = digest
        return digest

    def head_manifest(self, repo: str, reference: str) -> ManifestInfo | None:
        self.requests.append(f"HEAD {reference}")
        digest = self.tags.get(reference)
        return None if digest is None else ManifestInfo(digest, MANIFEST, len(self.blobs[digest]))

    def get_manifest(self, repo: str, reference: str) -> tuple[bytes, str, str]:
        self.requests.append(f"GET manifest {reference}")
        return self.blobs[reference], MANIFEST, reference

    def get_blob(self, repo: str, digest: str) -> bytes:
        self.requests.append(f"GET blob {digest}")
        return self.blobs[digest]

    def list_tags(self, repo: str) -> list[str]:
        self.requests.append("GET tags")
        return list(self.tags)


@pytest.fixture
def registry(monkeypatch):
    """The registry the nightly and its plan job talk to; the branch's head is HEAD."""
    reg = Registry()

    @contextmanager
    def client_for(host):
        yield reg

    for module in (nightly, nightlyjobs):
        monkeypatch.setattr(module, "client_for", client_for)
        monkeypatch.setattr(module, "ls_remote_head", lambda url, branch, auth=None: HEAD)
    return reg


def patch_set(cfg) -> str:
    return load_patch_queue(patch_dir(cfg), required=False).sha256


def built_inputs(cfg, *, tool_version: str = __version__):
    """What a nightly of cfg's one variant records: the inputs of its plan at HEAD with the current patches."""
    (variant,) = one_per_key(variant_specs(cfg, FakeEngine())[0])
    facts = SourceFacts(url=URL, commit=HEAD, commit_time=1767225600, build_number=7,
                        patch_set_sha256=patch_set(cfg), patch_names=())
    plan = make_plan(variant.request, Resolved(facts, templates_sha256(), tool_version))
    return variant.key, plan_inputs(plan, DEBIAN)


def publish(registry: Registry, cfg, **kwargs) -> str:
    """The nightly of cfg's variant in the registry, built from HEAD: its key."""
    key, inputs = built_inputs(cfg, **kwargs)
    registry.push(f"nightly-{key}", inputs.to_labels("b" * 64))
    return key


def plan(cfg) -> dict:
    """The plan's JSON form (plan.json)."""
    runners = {"amd64": "ubuntu-latest", "arm64": "ubuntu-24.04-arm"}
    return nightlyjobs.plan_nightly(nightly_spec(cfg, FakeEngine()), runners=runners).to_dict()


def build_nothing(spec, client, repository, summary, variants, todo, *args, **kwargs):
    """_build_and_publish standing in: every variant to build passes."""
    summary.variants = [nightly._result_for(v, VariantStatus.PASSED, commit=HEAD) for v in todo]


# ---------------------------------------------------------------- the classification

@pytest.mark.parametrize("version", ["0.1.1-nightly.20261202", "v1.2.3"])
def test_a_variant_at_the_head_is_its_config_with_that_commit_and_version(tmp_path, version):
    """What the night builds (at_head) is the variant resolved again with source.commit and image.version set, as
    plan/matrix.Variant.with_values made it: the same request (labels, build key), source pin and unit spec."""
    cfg = config(tmp_path, **{"matrix.archs": ["cpu", "sm_120"], "build.platform": "linux/amd64,linux/arm64"})
    engine = FakeEngine()
    spec = nightly_spec(cfg, engine)
    assert len(spec.variants) == len(matrix_variants(cfg)[0]) == 4
    for v, resolved in zip(matrix_variants(cfg)[0], spec.variants, strict=True):
        again = v.with_values("nightly", source__commit=HEAD, image__version=version)
        built = with_build(at_head(resolved, HEAD, version), on_engine(spec.build, engine))
        assert built == variant_spec(again, engine) and built.spec.build.reproducible  # (containerd's store)


def test_the_config_decided_inputs_are_generated_from_the_declarations():
    assert {i.name for i in CONFIG_INPUTS} == CONFIG_DECIDED
    assert [i for i in INPUTS if config_decided(i)] == list(CONFIG_INPUTS)  # every input is classified by its `of`
    assert {i.name for i in INPUTS} - CONFIG_DECIDED == {  # made from the source, resolved, or per build
        "commit", "version", "source_date_epoch", "cmake_args", "build_number", "patch_set_sha256", "patches",
        "base_images", "cuda_wheels", "cublas", "cpu_host", "build_platform"}


def test_config_inputs_are_the_values_a_plan_records(tmp_path):
    cfg = config(tmp_path, **{"build.cpu_level": "x86-64-v3", "build.user": "app", "build.cmake_args": ["-DX=1"]})
    _, inputs = built_inputs(cfg)
    (variant,) = one_per_key(variant_specs(cfg, FakeEngine())[0])
    assert config_of(variant, URL) == {i.name: getattr(inputs, i.name) for i in CONFIG_INPUTS}


# ---------------------------------------------------------------- up to date, or built and why

def test_same_commit_patches_and_config_is_up_to_date(tmp_path, registry):
    cfg = config(tmp_path)
    publish(registry, cfg)
    got = plan(cfg)
    assert not got["build"] and got["matrix"] == {"include": []}
    assert [(v["build"], v["reason"]) for v in got["variants"]] == [(False, "")]
    summary = run_nightly(nightly_spec(cfg, FakeEngine()), date="20261202", engine=FakeEngine())
    assert summary.up_to_date and [(v.status, v.reason) for v in summary.variants] == [("skipped", "")]


@pytest.mark.parametrize("change, reason", [
    ({"build.jobs": 8, "build.user": "app"}, 'config changed: jobs 0 -> 8, user "" -> app:10001'),
    ({"build.cmake_args": ["-DGGML_X=ON"]}, 'config changed: extra_cmake_args [] -> ["-DGGML_X=ON"]'),
    ({"image.title": "mine", "build.no_vmm": False},
     "config changed: title buun-llama-cpp -> mine, no_vmm true -> false"),
])
def test_a_changed_config_rebuilds_the_same_commit_and_says_why(tmp_path, registry, monkeypatch, change, reason):
    key = publish(registry, config(tmp_path))
    cfg = config(tmp_path, **change)
    got = plan(cfg)
    assert got["build"] and [(v["variant"], v["reason"]) for v in got["variants"]] == [(key, reason)]
    assert [u["reason"] for u in got["matrix"]["include"]] == [reason]
    monkeypatch.setattr(nightly, "_build_and_publish", build_nothing)
    summary = run_nightly(nightly_spec(cfg, FakeEngine()), date="20261202", engine=FakeEngine())
    assert not summary.up_to_date
    assert [(v.status, v.reason) for v in summary.variants] == [(VariantStatus.PASSED, reason)]
    assert summary.to_dict()["variants"][0]["reason"] == reason
    assert f"| `{key}` | passed ({reason.replace('|', chr(92) + '|')})" in summary.to_markdown()


def test_another_buildkit_version_or_template_rebuilds(tmp_path, registry):
    cfg = config(tmp_path)
    publish(registry, cfg, tool_version="0.0.1")
    assert [v["reason"] for v in plan(cfg)["variants"]] == [f"buildkit 0.0.1 -> {__version__}"]
    _, inputs = built_inputs(cfg)
    older = Previous(HEAD, patch_set(cfg), "sha256:x", "v", "registry", replace(inputs, template_sha256="0" * 64))
    (variant,) = one_per_key(variant_specs(cfg, FakeEngine())[0])
    assert stale_reason(older, HEAD, patch_set(cfg), config_of(variant, URL)) == "template changed"


def test_an_image_older_than_a_later_input_is_up_to_date(tmp_path, registry):
    """An image of a buildkit before build.user (a `later` input, absent: "") with every other value the same."""
    cfg = config(tmp_path)
    key, inputs = built_inputs(cfg)
    labels = inputs.to_labels("b" * 64)
    record = json.loads(labels[LABEL_PREFIX + "inputs"])
    assert "user" not in record and "cpu_host" not in record  # left out while "" / None, as older buildkits wrote it
    record.pop("extra_cmake_args")  # absent: ()
    labels[LABEL_PREFIX + "inputs"] = json.dumps(record)
    registry.push(f"nightly-{key}", labels)
    assert [(v["build"], v["reason"]) for v in plan(cfg)["variants"]] == [(False, "")]
    user = config(tmp_path, **{"build.user": "app"})
    assert [v["reason"] for v in plan(user)["variants"]] == ['config changed: user "" -> app:10001']


def test_the_commit_and_the_patch_set_still_decide_first(tmp_path):
    cfg = config(tmp_path)
    _, inputs = built_inputs(cfg)
    (variant,) = one_per_key(variant_specs(cfg, FakeEngine())[0])
    wanted, patches = config_of(variant, URL), patch_set(cfg)
    prev = Previous(HEAD, patches, "sha256:x", "v", "lock", inputs)
    assert is_current(prev, HEAD, patches, wanted)
    assert stale_reason(prev, "b" * 40, patches, wanted) == "new commit c0ffee000000 -> bbbbbbbbbbbb"
    assert stale_reason(prev, HEAD, "p2", wanted) == "patch set changed"
    assert stale_reason(None, HEAD, patches, wanted) == "no nightly image yet"
    assert stale_reason(replace(prev, inputs=None, unread="no inputs label"), HEAD, patches, wanted) == \
        "what it was built with cannot be read (no inputs label)"


# ---------------------------------------------------------------- the quiet night's requests

def lock_of_nightly(cfg, registry: Registry, key: str, inputs) -> None:
    """buildkit.lock as a nightly leaves it: the entry of the published image, and the nightly record."""
    digest = registry.tags[f"nightly-{key}"]
    fields = {k: [asdict(b) for b in v] if k == "base_images" else list(v) if isinstance(v, tuple) else v
              for k, v in inputs.lock_fields().items()}
    entry = {**fields, "ref": f"{REPO}:x", "template": "cpu.Dockerfile.j2", "dockerfile_sha256": "d" * 64,
             "cuda_root": None, "cmake_archs": None, "image_name": REPO, "image_digest": digest, "image_id": digest,
             "tags": [], "labels": inputs.to_labels("b" * 64)}
    update_lock(cfg.lock.path, lambda lock: lock.with_entry(entry_from_dict(entry), f"{inputs.variant}/server"))
    update_nightly_record(cfg.lock.path, URL, "master", key, {"commit": HEAD, "patch_set_sha256": patch_set(cfg),
                                                             "digest": digest, "version": "v", "date": "20261201"})


def test_a_quiet_night_asks_the_registry_as_often_as_before(tmp_path, registry):
    cfg = config(tmp_path)
    key, inputs = built_inputs(cfg)
    registry.push(f"nightly-{key}", inputs.to_labels("b" * 64))
    # no lock: the image's labels, read once, say everything
    run = run_nightly(nightly_spec(cfg, FakeEngine()), date="20261202", engine=FakeEngine())
    assert run.up_to_date and run.variants[0].known_from == "registry"
    assert [r.split()[0] + " " + r.split()[1] for r in registry.requests] == [
        "HEAD nightly-cpu", "GET manifest", "GET blob"]
    registry.requests.clear()
    lock_of_nightly(cfg, registry, key, inputs)
    # the lock's record and entry: one request
    run = run_nightly(nightly_spec(cfg, FakeEngine()), date="20261202", engine=FakeEngine())
    assert run.up_to_date and run.variants[0].known_from == "lock"
    assert registry.requests == [f"HEAD nightly-{key}"]
    registry.requests.clear()
    changed = config(tmp_path, **{"build.cmake_args": ["-DX=1"]})  # the lock's entry says what changed
    assert [v["reason"] for v in plan(changed)["variants"]] == ['config changed: extra_cmake_args [] -> ["-DX=1"]']
    assert registry.requests == [f"HEAD nightly-{key}", "GET tags"]
