"""The command lines and bake targets made from specs are the ones buildkit made as argv before (issue 23):
what `buildkit build --print` and `buildkit run --print` show, the bake targets and the bake command.

data/buildx_golden.json was recorded with main's buildx_argv / bake_target_from_argv / retag / bake_argv
(commit 0f42a04) for CASES; label values come from the plan and are checked against it rather than stored,
so a change of labels does not touch the fixture. Issue 24 added, by hand, the manifest annotations to it:
`--annotation <annotation>` after the labels (one for each non-empty org.opencontainers.image.* label of
the plan) and a bake target's `annotations` after its `labels`; their values, like the labels', are
checked against the plan's labels. Issue 49 (the plan made once, with its build key) added, by hand, the
plan's two labels of its key (build-key, inputs) and its build-key tag, whose key is `<key>` there (it
changes with the templates). RUN_GOLDEN was recorded with main's plan.profiles.docker_run_argv for
RUN_CASES."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from buildkit.engine.bakefile import bake_target
from buildkit.engine.buildx import BuildOptions
from buildkit.engine.dockerargv import buildx_bake_argv
from buildkit.engine.dockerengine import DockerEngine
from buildkit.flows.unit.buildspec import build_spec
from buildkit.flows.serve.serving import run_spec
from buildkit.plan.profiles import Profile, make_spec
from buildkit.plan.render import RenderResult
from test_plan_render import plan_for

GOLDEN = json.loads((Path(__file__).parent / "data" / "buildx_golden.json").read_text())
CTX = Path("/w/ctx")
LAYOUT = "oci-layout:///l/base@sha256:" + "a" * 64
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], tuple[tuple[str, Path | str], ...], tuple[str, ...]]] = {
    # plan overrides, build options, named contexts, extra tags
    "cpu-load": ({"build.arch": "cpu"}, {}, (), ()),
    "cuda-builder-cache": ({"build.arch": "sm_120"},
                           dict(builder="multi", progress="plain", cache_from=("type=registry,ref=r/c:{variant}",),
                                cache_to=("type=registry,ref=r/c:{variant},mode=max",), provenance=True),
                           (("cuda-root", "/r/cuda"), ("base", LAYOUT)), ("extra:1",)),
    "cuda-reproducible-nocache": ({"build.arch": "sm_89"},
                                  dict(reproducible=True, no_cache=True, oci_archive=Path("/w/out/image.oci.tar")),
                                  (("cuda-root", "/r/cuda"),), ()),
    "cross-arm64-reproducible": ({"build.arch": "cpu", "build.platform": "linux/arm64"},
                                 dict(reproducible=True, progress="plain"), (), ("x:y",)),
    "cross-reproducible-noload": ({"build.arch": "cpu", "build.platform": "linux/arm64"},
                                  dict(reproducible=True, load=False), (), ()),
    "cpu-push": ({"build.arch": "cpu"}, dict(push=True, load=False, builder="b"), (), ()),
}


PLACEHOLDERS = {"--label": "<label>", "--annotation": "<annotation>"}


def without_values(argv: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """argv with the labels' and annotations' values as placeholders, and the values by flag."""
    values: dict[str, list[str]] = {flag: [] for flag in PLACEHOLDERS}
    out = []
    for i, a in enumerate(argv):
        flag = argv[i - 1] if i else ""
        if flag in PLACEHOLDERS:
            values[flag].append(a)
            a = PLACEHOLDERS[flag]
        out.append(a)
    return out, values


def oci_labels(plan) -> list[tuple[str, str]]:
    """The labels the manifest annotations repeat: the OCI-standard ones that say something."""
    return [(key, value) for key, value in plan.labels if key.startswith("org.opencontainers.image.") and value]


def without_metadata(target: dict) -> dict:
    return {k: v for k, v in target.items() if k not in ("labels", "annotations")}


def keyless(value: Any, key: str) -> Any:
    """value with the build key, as its tag bk-<key>-<variant> names it, as `<key>`."""
    return json.loads(json.dumps(value).replace(f"bk-{key[:24]}-", "bk-<key>-"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_specs_make_the_command_lines_and_bake_targets_argv_made(name):
    overrides, opts, named, extra = CASES[name]
    golden = GOLDEN[name]
    plan = plan_for(**overrides)
    rendered = RenderResult(context_dir=CTX, dockerfile=CTX / "Dockerfile", dockerfile_sha256="0" * 64,
                            named_contexts=named)
    options = BuildOptions(**opts)
    metadata = Path("/w/meta/metadata.json")
    spec = build_spec(plan, rendered, options, metadata, extra)

    argv, values = without_values(DockerEngine().build_command(spec, options.session(metadata)))
    assert keyless(argv, plan.build_key) == golden["argv"]
    assert values["--label"] == [f"{key}={value}" for key, value in plan.labels]
    annotations = [f"manifest:{key}={value}" for key, value in oci_labels(plan)]
    assert values["--annotation"] == annotations

    target = bake_target(spec)
    assert target["labels"] == dict(plan.labels)
    assert target["annotations"] == annotations
    assert list(target) == list(golden["bake_target"])  # docker-bake.json keeps its order
    assert keyless(without_metadata(target), plan.build_key) == without_metadata(golden["bake_target"])
    if options.load:  # the matrix retags loaded images only (an OCI archive names them when it is loaded)
        retagged = without_metadata(bake_target(spec.with_tags(["img:v", "img:sha-v"])))
        assert json.dumps(retagged) == json.dumps(without_metadata(golden["bake_retagged"]))

    bake = buildx_bake_argv("docker", Path("/w/bake.json"), ["a", "b"], options.session(Path("/w/bake-meta.json")))
    assert bake == golden["bake_argv"]


PROFILE = Profile(name="p", args=("--spec-type", "dflash", "-c", "4096"), gpus="all", port=9000)
RUN_CASES: dict[str, tuple[dict[str, Any], bool]] = {  # make_spec arguments, detach
    "profile-defaults": (dict(image="img:1", model="/m/target.gguf", model_draft="/m/d.gguf", profile=PROFILE), False),
    "detached-bound-named": (dict(image="img:1", model="/m/t.gguf", profile=PROFILE, gpus="device=0,1", host_port=8181,
                                  bind="127.0.0.1", name="srv", labels=(("a", "b"), ("c", "d=e"))), True),
    "any-port-no-gpu": (dict(image="img:1", model="/m/t.gguf", gpus="none", host_port=None, use_profile_port=False,
                             bind="0.0.0.0"), False),
    "any-port-no-bind": (dict(image="img:1", model="/m/t.gguf", host_port=None, use_profile_port=False,
                              extra_args=("--threads", "2")), False),
}
RUN_GOLDEN = {
    "profile-defaults":
        "docker run --rm --gpus all --publish 9000:8080 --volume /m/target.gguf:/models/target.gguf:ro "
        "--volume /m/d.gguf:/models/draft/d.gguf:ro img:1 --host 0.0.0.0 --port 8080 --model /models/target.gguf "
        "--model-draft /models/draft/d.gguf --spec-type dflash -c 4096",
    "detached-bound-named":
        "docker run --rm --detach --name srv --label a=b --label c=d=e --gpus device=0,1 "
        "--publish 127.0.0.1:8181:8080 --volume /m/t.gguf:/models/t.gguf:ro img:1 --host 0.0.0.0 --port 8080 "
        "--model /models/t.gguf --spec-type dflash -c 4096",
    "any-port-no-gpu":
        "docker run --rm --publish 0.0.0.0:8080 --volume /m/t.gguf:/models/t.gguf:ro img:1 --host 0.0.0.0 "
        "--port 8080 --model /models/t.gguf",
    "any-port-no-bind":
        "docker run --rm --publish 8080 --volume /m/t.gguf:/models/t.gguf:ro img:1 --host 0.0.0.0 --port 8080 "
        "--model /models/t.gguf --threads 2",
}


@pytest.mark.parametrize("name", sorted(RUN_CASES))
def test_run_specs_make_the_docker_run_commands_argv_made(name):
    arguments, detach = RUN_CASES[name]
    spec = make_spec(check_files=False, **arguments)
    assert shlex.join(DockerEngine().run_command(run_spec(spec, detach=detach))) == RUN_GOLDEN[name]


def test_the_annotations_are_the_resolved_plans_oci_labels_and_hold_no_time_of_the_build():
    """What buildx annotates the manifest with, once the base images are known: every OCI label with
    its value (base.digest too), no buildkit label, and the created time is the commit's."""
    from buildkit.plan.buildplan import make_plan
    from buildkit.plan.plantypes import Resolved
    from buildkit.plan.inputs import BaseImage
    from buildkit.plan.labelforms import oci_created

    plan = plan_for(**{"build.arch": "cpu", "image.url": ""})
    base = BaseImage(plan.request.runtime_image, "sha256:" + "b" * 64)
    assert plan.request.devel_image == base.ref  # cpu: one base image for both stages
    plan = make_plan(plan.request, Resolved(plan.source, plan.template_sha256, plan.tool_version, base_images=(base,)))
    rendered = RenderResult(context_dir=CTX, dockerfile=CTX / "Dockerfile", dockerfile_sha256="0" * 64)
    spec = build_spec(plan, rendered, BuildOptions(reproducible=True), Path("/w/meta/metadata.json"))
    oci = "org.opencontainers.image."
    annotations = dict(spec.annotations)
    assert annotations == {key: value for key, value in plan.labels if key.startswith(oci) and value}
    assert annotations[oci + "base.name"] == base.ref and annotations[oci + "base.digest"] == base.digest
    assert annotations[oci + "created"] == oci_created(plan.source_date_epoch)
    assert annotations[oci + "revision"] == plan.source.commit
    assert oci + "url" not in annotations  # image.url = "": no label, no annotation
    assert set(annotations) == {oci + k for k in ("source", "revision", "version", "created", "title", "licenses",
                                                  "description", "base.name", "base.digest")}
