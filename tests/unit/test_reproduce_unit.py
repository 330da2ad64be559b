"""reproduce without an engine: reading a record from labels and locks, missing inputs, argv of the reproducible
path."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from buildkit.engine.buildx import BuildOptions
from buildkit.engine.dockerengine import DockerEngine
from buildkit.flows.unit.buildspec import build_command
from buildkit.core.errors import ReproduceError
from buildkit.plan.inputs import INPUTS_LABEL, BaseImage
from buildkit.engine.baseimages import BaseSource
from buildkit.flows.unit.pipeline import from_refs, inputs_record
from buildkit.plan.buildplan import render_view
from buildkit.plan.render import RenderResult, render_dockerfile
from buildkit.flows.reproduce.record import from_labels, from_lock, select_entry
from buildkit.cli.reproducespecs import overrides_for
from test_plan_render import plan_for

DIGEST = "sha256:" + "ab" * 32


BASES = (BaseImage("buildkit-test/debian:bookworm", DIGEST),)


def labels_of(plan, bases=BASES) -> dict[str, str]:
    labels = dict(plan.labels)
    labels[INPUTS_LABEL] = json.dumps(inputs_record(plan, tuple(bases), None))
    return labels


def test_a_record_from_labels_has_every_input():
    plan = plan_for(**{"build.arch": "cpu", "base.os_image": "buildkit-test/debian:bookworm"})
    rec = from_labels(labels_of(plan), "image x", image_digest=DIGEST)
    assert rec.inputs.commit == plan.source.commit and rec.inputs.source_date_epoch == plan.source_date_epoch
    assert rec.inputs.cmake_args == plan.cmake_args and rec.inputs.template_sha256 == plan.template_sha256
    assert rec.inputs.base_images == (BaseImage("buildkit-test/debian:bookworm", DIGEST),)
    assert rec.inputs.arch == "cpu" and rec.inputs.provider == "cpu" and rec.inputs.jobs == plan.request.jobs
    overrides = overrides_for(rec)
    assert overrides["source.commit"][0] == plan.source.commit and overrides["build.arch"][0] == "cpu"
    assert overrides["base.os_image"][0] == "buildkit-test/debian:bookworm"


@pytest.mark.parametrize("drop,message", [
    ("org.opencontainers.image.revision", "commit is missing"),
    ("org.llama-buildkit.patch-set", "patch set hash is missing"),
    ("org.llama-buildkit.template", "template hash is missing"),
    ("org.opencontainers.image.created", "SOURCE_DATE_EPOCH"),
    (INPUTS_LABEL, "no org.llama-buildkit.inputs label"),
])
def test_a_missing_input_is_an_error(drop, message):
    labels = labels_of(plan_for(**{"build.arch": "cpu"}))
    del labels[drop]
    with pytest.raises(ReproduceError, match=message):
        from_labels(labels, "image x", image_digest=DIGEST)


def test_a_base_image_without_digest_cannot_be_reproduced():
    plan = plan_for(**{"build.arch": "cpu"})
    with pytest.raises(ReproduceError, match="without a digest"):
        from_labels(labels_of(plan, [BaseImage("ubuntu:24.04", "")]), "image x", image_digest=DIGEST)


def test_lock_entries_are_chosen_by_key(tmp_path):
    builds: dict[str, dict] = {"cpu/server": {}, "cuda13.1-sm120/server": {}}
    assert select_entry({"cpu/server": {"a": 1}}, None, tmp_path)[0] == "cpu/server"
    with pytest.raises(ReproduceError, match="choose one with --build"):
        select_entry(builds, None, tmp_path)
    with pytest.raises(ReproduceError, match="has no build 'x'"):
        select_entry(builds, "x", tmp_path)


def test_a_lock_without_recorded_labels_is_an_error(tmp_path):
    path = tmp_path / "buildkit.lock"
    path.write_text(json.dumps({"lock_version": 1, "builds": {"cpu/server": {"commit": "c" * 40}}}))
    with pytest.raises(ReproduceError, match="no recorded labels"):
        from_lock(path)
    with pytest.raises(ReproduceError, match="no such lock file"):
        from_lock(tmp_path / "nothing.lock")


def buildx_argv(plan, rendered, options, metadata_file) -> list[str]:
    return build_command(plan, rendered, options, metadata_file, DockerEngine())


def test_reproducible_argv_exports_oci_with_rewritten_timestamps(tmp_path):
    plan = plan_for(**{"build.arch": "cpu"})
    rendered = RenderResult(context_dir=tmp_path, dockerfile=tmp_path / "Dockerfile", dockerfile_sha256="0" * 64)
    argv = buildx_argv(plan, rendered, BuildOptions(reproducible=True, no_cache=True), tmp_path / "m.json")
    output = argv[argv.index("--output") + 1]
    assert output.startswith(f"type=oci,dest={tmp_path / 'image.oci.tar'},rewrite-timestamp=true")
    assert plan.tags[0] in output  # the tags travel as image names for docker load
    assert "--provenance=false" in argv and "--no-cache" in argv
    assert "--load" not in argv and "--tag" not in argv
    plain = buildx_argv(plan, rendered, BuildOptions(provenance=True), tmp_path / "m.json")
    assert "--load" in plain and "--provenance=true" in plain and "--output" not in plain


def test_registry_bases_are_pinned_by_digest_and_local_ones_named_by_content(tmp_path):
    plan = plan_for(**{"build.arch": "cpu", "base.os_image": "example.org/debian:bookworm"})
    registry = BaseSource("example.org/debian:bookworm", DIGEST)
    text = render_dockerfile(render_view(plan, from_refs((registry,))))
    assert f"FROM example.org/debian:bookworm@{DIGEST} AS build" in text
    assert f"FROM example.org/debian:bookworm@{DIGEST} AS base" in text
    assert registry.named_context() is None
    local = BaseSource("example.org/debian:bookworm", DIGEST, layout=tmp_path / "layout")
    text = render_dockerfile(render_view(plan, from_refs((local,))))
    name = "local-base-" + DIGEST.removeprefix("sha256:")[:12]
    assert f"FROM {name} AS build" in text and f"FROM {name} AS base" in text
    assert "example.org" not in "\n".join(line for line in text.splitlines() if line.startswith("FROM"))
    assert local.named_context() == (name, f"oci-layout://{tmp_path / 'layout'}@{DIGEST}")
    # a digest already in the reference is kept as it is
    assert BaseSource("a@" + DIGEST, DIGEST).from_ref == "a@" + DIGEST
    # an unresolved base (planning without an engine) is left as configured
    assert render_view(plan, from_refs((BaseSource("example.org/debian:bookworm", ""),))) == plan


def test_inputs_record_is_plain_json():
    plan = plan_for(**{"build.arch": "sm_120"})
    record = inputs_record(plan, (BaseImage("x", DIGEST),), {"wheels": [{"package": "nvidia-cublas", "sha256": "1"}]})
    assert json.loads(json.dumps(record)) == record
    assert record["cuda_wheels"] == ["1"] and record["base_images"] == [["x", DIGEST]]
    assert asdict(BaseImage("x", DIGEST)) == {"ref": "x", "digest": DIGEST}


def test_engine_only_base_is_named_by_digest_in_the_engine_on_its_own_builder(tmp_path):
    """The engine's own builder (driver docker) reads the image by a pinned name, so BuildKit keeps the
    base's layers; any other builder gets the OCI layout; planning (no builder given) pins nothing."""
    from buildkit.engine.api import ImageInfo
    from buildkit.engine.current import use_engine
    from buildkit.engine.baseimages import resolve_base_images
    from fakeengine import FakeEngine

    class OtherBuilder(FakeEngine):
        def inspect_builder(self, name: str = "") -> str:
            return f"Name: {name}\nDriver: docker-container\nStatus: running\n"

    layout = tmp_path / "base-images" / DIGEST.replace(":", "-")
    layout.mkdir(parents=True)
    (layout / ".complete").write_text("local/debian:12\n")  # exported before: no docker save
    pinned = "127.0.0.1:1/llama-buildkit/base:" + "ab" * 32
    for engine, builder, want in ((FakeEngine(), "", pinned), (OtherBuilder(), "remote", None),
                                  (FakeEngine(), None, None)):
        engine.images["local/debian:12"] = ImageInfo(id=DIGEST)
        with use_engine(engine):
            source, = resolve_base_images(["local/debian:12"], tmp_path, ask_registry=False, builder=builder,
                                          engine=engine)
        assert (source.ref, source.digest, source.layout) == ("local/debian:12", DIGEST, layout)
        if want:
            assert source.from_ref == pinned and source.named_context() is None
            assert ("tag", "local/debian:12", pinned) in engine.calls
        else:
            assert source.from_ref.startswith("local-base-") and source.named_context() is not None
            assert not [c for c in engine.calls if c[0] == "tag"]


def test_the_clean_rebuilds_own_ccache_mount_is_no_dockerfile_difference(tmp_path):
    """Issue 41: every `reproduce` of a build made with a warm ccache warned that "the rendered Dockerfile
    differs from the recorded one although every recorded input matches"; the only difference was the
    rebuild's own clean ccache mount (CCACHE_RECACHE, the mount's -clean id). Another difference still warns."""
    from dataclasses import replace
    from types import SimpleNamespace

    from buildkit.flows.reproduce.rebuild import _check_prepared
    from buildkit.plan.buildplan import clean_ccache_id, make_plan
    from buildkit.plan.plantypes import PlanOptions, Resolved
    from buildkit.plan.render import write_context

    plan = plan_for(**{"build.arch": "cpu", "base.os_image": "buildkit-test/debian:bookworm"})
    assert plan.request.ccache and not plan.ccache_recache
    (tmp_path / "warm").mkdir()
    recorded = write_context(plan, tmp_path / "warm")
    rec = replace(from_labels(labels_of(plan), "image x", image_digest=DIGEST),
                  dockerfile_sha256=recorded.dockerfile_sha256)
    clean = make_plan(plan.request, Resolved(plan.source, plan.template_sha256, plan.tool_version),
                      PlanOptions(clean_ccache=True))
    assert clean.ccache_recache and clean.ccache_id == clean_ccache_id(plan.ccache_id)
    assert (clean.labels, clean.build_key, clean.tags) == (plan.labels, plan.build_key, plan.tags)  # in no input
    (tmp_path / "clean").mkdir()
    rendered = write_context(clean, tmp_path / "clean")
    assert rendered.dockerfile_sha256 != recorded.dockerfile_sha256  # what reproduce renders does differ
    source = SimpleNamespace(commit=plan.source.commit, commit_time=plan.source_date_epoch)
    prepared = SimpleNamespace(source=source, plan=clean, rendered=rendered, build_key=clean.build_key)
    assert _check_prepared(rec, prepared, None) == []
    # a Dockerfile that differs in anything else is still named
    other = replace(clean, request=replace(clean.request, jobs=clean.request.jobs + 1))
    (tmp_path / "other").mkdir()
    prepared = SimpleNamespace(source=source, plan=other, rendered=write_context(other, tmp_path / "other"),
                               build_key="")
    assert any("rendered Dockerfile differs" in w for w in _check_prepared(rec, prepared, None))
