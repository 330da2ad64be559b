"""The build matrix and its bake file (pure), `buildkit bake --print`, and running bake on the real engine."""

from __future__ import annotations

import io
import json
from pathlib import Path

import docker
import pytest

from buildkit.engine.bake import run_bake
from buildkit.engine.dockerengine import DockerEngine
from buildkit.engine.bakefile import bake_target, target_tags, write_bake_file
from buildkit.engine.specs import BuildSpec
from buildkit.plan.matrix import bake_target_name, matrix_variants
from buildkit.engine.buildx import BuildOptions
from buildkit.plan.config import load_config
from buildkit.core.errors import ArchError, ConfigError
from forkrepo import make_fork_repo
from cliutil import write_project

ROOT = Path(__file__).resolve().parents[2]


def cfg_with(**values):
    overrides = {k.replace("__", "."): (v, "test") for k, v in values.items()}
    return load_config(None, env={}, overrides=overrides)


# ---------------------------------------------------------------- matrix

def test_matrix_is_archs_times_cuda_versions_times_targets():
    cfg = cfg_with(matrix__archs=["cpu", "sm_120", "sm_89"], matrix__cuda_versions=["12.8", "13.1"],
                   matrix__targets=["server", "full"])
    variants, excluded = matrix_variants(cfg)
    keys = [v.key for v in variants]
    assert keys == ["cpu", "cpu-full",
                    "cuda12.8-sm120", "cuda12.8-sm120-full", "cuda13.1-sm120", "cuda13.1-sm120-full",
                    "cuda12.8-sm89", "cuda12.8-sm89-full", "cuda13.1-sm89", "cuda13.1-sm89-full"]
    assert excluded == []
    full = next(v for v in variants if v.key == "cuda13.1-sm120-full")
    assert full.request.target == "full" and full.request.cuda_version == "13.1" and full.cfg["build.arch"] == "sm_120"
    assert len({v.target_name for v in variants}) == len(variants)
    assert bake_target_name("cuda13.1-sm120") == "cuda13_1-sm120"


def test_matrix_leaves_out_what_a_cuda_version_cannot_build_and_refuses_unknown_archs():
    variants, excluded = matrix_variants(cfg_with(matrix__archs=["sm_120", "sm_86"],
                                                  matrix__cuda_versions=["12.4", "13.1"]))
    assert [v.key for v in variants] == ["cuda13.1-sm120", "cuda12.4-sm86", "cuda13.1-sm86"]
    assert excluded and excluded[0][0] == "sm_120 with CUDA 12.4" and "12.8" in excluded[0][1]
    with pytest.raises(ArchError, match="sm_99"):
        matrix_variants(cfg_with(matrix__archs=["sm_99"]))
    with pytest.raises(ConfigError, match="empty"):
        matrix_variants(cfg_with(matrix__archs=["sm_120"], matrix__cuda_versions=["12.4"]))
    with pytest.raises(ConfigError, match="matrix.targets"):
        matrix_variants(cfg_with(matrix__targets=["huge"]))


# ---------------------------------------------------------------- build spec -> bake target

SPEC = BuildSpec(context=Path("/w/ctx"), dockerfile=Path("/w/ctx/Dockerfile"), platform="linux/amd64",
                 target="server", build_args=(("SOURCE_DATE_EPOCH", "1704153600"),), labels=(("a", "b=c"),),
                 tags=("img:cpu", "img:sha-1-cpu"), named_contexts=(("cuda-root", "/cache/root"),),
                 cache_from=("type=local,src=/c",), cache_to=("type=local,dest=/c,mode=max",), provenance=False,
                 no_cache=True, load=True)


def test_a_bake_target_is_the_translation_of_the_build_spec():
    target = bake_target(SPEC)
    assert target == {
        "platforms": ["linux/amd64"], "target": "server", "args": {"SOURCE_DATE_EPOCH": "1704153600"},
        "labels": {"a": "b=c"}, "tags": ["img:cpu", "img:sha-1-cpu"], "contexts": {"cuda-root": "/cache/root"},
        "cache-from": ["type=local,src=/c"], "cache-to": ["type=local,dest=/c,mode=max"],
        "attest": ["type=provenance,disabled=true"], "no-cache": True, "output": ["type=docker"],
        "dockerfile": "Dockerfile", "context": "/w/ctx"}


def test_retagging_renames_the_images_of_an_oci_output():
    spec = BuildSpec(context=Path("/w/ctx"), dockerfile=Path("/w/ctx/Dockerfile"), tags=("img:cpu", "img:sha-1-cpu"),
                     oci_archive=Path("/w/image.oci.tar"), load=True)
    target = bake_target(spec.with_tags(["img:cpu-full", "img:sha-1-cpu-full"]))
    assert "tags" not in target
    assert target["output"] == ['type=oci,dest=/w/image.oci.tar,rewrite-timestamp=true,'
                                '"name=img:cpu-full,img:sha-1-cpu-full"']
    assert target_tags(target) == ("img:cpu-full", "img:sha-1-cpu-full")
    plain = bake_target(SPEC.with_tags(["img:x"]))
    assert plain["tags"] == ["img:x"] and target_tags(plain) == ("img:x",)


# ---------------------------------------------------------------- the real engine

@pytest.mark.docker
def test_bake_loads_several_targets_and_a_failing_one_does_not_stop_the_others(tmp_path, busybox_image):
    """The docker driver: one bake with --load (type=docker) of several targets loads each. BuildKit
    cancels the whole bake when one target fails; run_bake then bakes the others alone."""
    (tmp_path / "Dockerfile").write_text(f"""FROM {busybox_image} AS ok
ARG N=0
RUN echo "ok-$N-{tmp_path.name}" > /ok && sleep 2
FROM {busybox_image} AS bad
RUN echo "x.cu:3:2: error: #error broken on purpose" && exit 2
""")
    suffix = tmp_path.name.lower().replace("_", "-")

    def target(name, stage, n=None):
        t = {"context": str(tmp_path), "dockerfile": "Dockerfile", "target": stage, "platforms": ["linux/amd64"],
             "tags": [f"buildkit-test/bake-{name}:{suffix}"], "output": ["type=docker"]}
        if n is not None:
            t["args"] = {"N": str(n)}
        return t

    client = docker.from_env()
    bake_file = write_bake_file(tmp_path / "docker-bake.json", {
        "group": {"default": {"targets": ["a", "b"]}},
        "target": {"a": target("a", "ok", 1), "b": target("b", "ok", 2), "bad": target("bad", "bad")}})
    try:
        together = run_bake(DockerEngine(), bake_file, ["a", "b"], BuildOptions(progress="plain"), tmp_path / "w1",
                            stream=io.StringIO())
        assert all(o.ok and not o.isolated for o in together.values())
        for name in ("a", "b"):
            image, result = client.images.get(f"buildkit-test/bake-{name}:{suffix}"), together[name].result
            assert result is not None and image.id == result.digest
        for name in ("a", "b"):
            client.images.remove(f"buildkit-test/bake-{name}:{suffix}")
        log = io.StringIO()
        outcomes = run_bake(DockerEngine(), bake_file, ["a", "bad", "b"], BuildOptions(progress="plain"),
                            tmp_path / "w2", stream=log)
        assert outcomes["bad"].ok is False and not outcomes["bad"].isolated  # failed by itself: not retried
        assert outcomes["bad"].error == ("build failed: [bad bad 2/2] x.cu:3:2: error: #error broken on purpose "
                                         "(exit code 2)")
        assert outcomes["a"].ok and outcomes["b"].ok and outcomes["a"].isolated
        assert "baking a, b again one by one" in log.getvalue()  # the bake of all three failed as a whole
        for name in ("a", "b"):
            result = outcomes[name].result
            assert result is not None and client.images.get(f"buildkit-test/bake-{name}:{suffix}").id == result.digest
    finally:
        for name in ("a", "b", "bad"):
            try:
                client.images.remove(f"buildkit-test/bake-{name}:{suffix}")
            except docker.errors.ImageNotFound:
                pass


@pytest.mark.docker
def test_bake_print_shows_one_target_per_variant(tmp_path, git_daemon, debian_base_image, cli):
    repo = tmp_path / "fork"
    _, commit = make_fork_repo(repo, ROOT / "examples" / "tiny-fork")
    write_project(tmp_path, patches=False,
                  source={"url": git_daemon.url_for(repo), "commit": commit},
                  image={"name": "buildkit-test/bake-print"},
                  base={"os_image": debian_base_image},
                  matrix={"archs": ["cpu"], "targets": ["server", "full"]})
    proc = cli("bake", "--print", "--file", "out/docker-bake.json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert document == json.loads((tmp_path / "out" / "docker-bake.json").read_text())
    assert document["group"]["default"]["targets"] == ["cpu", "cpu-full"]
    server, full = document["target"]["cpu"], document["target"]["cpu-full"]
    assert server["platforms"] == full["platforms"] == ["linux/amd64"]  # same platform, separate targets
    assert (server["target"], full["target"]) == ("server", "full")
    assert server["context"] != full["context"] and Path(server["context"], "Dockerfile").is_file()
    assert server["labels"]["org.opencontainers.image.revision"] == commit
    server_key = server["labels"]["org.llama-buildkit.build-key"]
    full_key = full["labels"]["org.llama-buildkit.build-key"]
    assert target_tags(server) == ("buildkit-test/bake-print:cpu", f"buildkit-test/bake-print:sha-{commit[:7]}-cpu",
                                   f"buildkit-test/bake-print:bk-{server_key[:24]}-cpu")
    assert target_tags(full) == ("buildkit-test/bake-print:cpu-full",
                                 f"buildkit-test/bake-print:sha-{commit[:7]}-cpu-full",
                                 f"buildkit-test/bake-print:bk-{full_key[:24]}-cpu-full")
