"""The command lines and bake targets made from build specs are the ones buildkit made from argv before
(issue 23): data/buildx_golden.json was recorded with main's buildx_argv / bake_target_from_argv / retag /
bake_argv (commit 0f42a04) for these cases. Label values come from the plan and are checked against it
rather than stored, so a change of labels does not touch the fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from buildkit.engine.bakefile import bake_target
from buildkit.engine.buildx import BuildOptions
from buildkit.engine.dockerargv import buildx_bake_argv
from buildkit.engine.dockerengine import DockerEngine
from buildkit.flows.buildspec import build_spec
from buildkit.plan.render import RenderResult
from test_plan_render import plan_for

GOLDEN = json.loads((Path(__file__).parent / "data" / "buildx_golden.json").read_text())
CTX = Path("/w/ctx")
LAYOUT = "oci-layout:///l/base@sha256:" + "a" * 64
CASES = {  # plan overrides, build options, named contexts, extra tags
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


def without_label_values(argv: list[str]) -> tuple[list[str], list[str]]:
    values = [a for i, a in enumerate(argv) if i and argv[i - 1] == "--label"]
    return [("<label>" if i and argv[i - 1] == "--label" else a) for i, a in enumerate(argv)], values


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

    argv, labels = without_label_values(DockerEngine().build_command(spec, options.session(metadata)))
    assert argv == golden["argv"]
    assert labels == [f"{key}={value}" for key, value in plan.labels]

    target = bake_target(spec)
    assert target.pop("labels") == dict(plan.labels)
    assert target == {k: v for k, v in golden["bake_target"].items() if k != "labels"}
    assert list(target) == [k for k in golden["bake_target"] if k != "labels"]  # docker-bake.json keeps its order
    if options.load:  # the matrix retags loaded images only (an OCI archive names them when it is loaded)
        retagged = bake_target(spec.with_tags(["img:v", "img:sha-v"]))
        retagged.pop("labels")
        assert json.dumps(retagged) == json.dumps({k: v for k, v in golden["bake_retagged"].items() if k != "labels"})

    bake = buildx_bake_argv("docker", Path("/w/bake.json"), ["a", "b"], options.session(Path("/w/bake-meta.json")))
    assert bake == golden["bake_argv"]
