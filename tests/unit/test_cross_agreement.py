"""Cross builds keep host and device in agreement (pure): nvcc's front ends are told the target's plain
char, a tree using long double in its CUDA sources is refused, a base image lacking a platform the build
runs it on is refused before any work, and an emulated build machine is only run when asked for."""

import json

import pytest

from buildkit.core.errors import BaseImageError, ConfigError
from buildkit.engine.baseimages import BaseSource, check_base_platforms, offered_platforms
from buildkit.flows.unit.pipeline import base_platforms, check_cuda_sources
from buildkit.oci.ocilayout import sha256_digest
from buildkit.plan.inputs import BaseImage, from_labels
from buildkit.plan.plantypes import plan_inputs
from buildkit.plan.platforms import cuda_char_flags, judge_build_machine
from buildkit.plan.render import render_dockerfile
from buildkit.source.cudasource import long_double_uses

from test_plan_render import plan_for

AMD64_ON_ARM64 = {"build.build_platform": "linux/arm64", "build.platform": "linux/amd64"}
ARM64_ON_AMD64 = {"build.build_platform": "linux/amd64", "build.platform": "linux/arm64"}
SIGNED = "-DCMAKE_CUDA_FLAGS=-Xcudafe=--signed_chars -Xcicc=--signed_chars"
UNSIGNED = "-DCMAKE_CUDA_FLAGS=-Xcudafe=--unsigned_chars -Xcicc=--unsigned_chars"
WHEELS = {"base.provider": "wheels", "base.os_image": "debian:bookworm"}


def cuda_flags(plan) -> list[str]:
    return [a for a in plan.cmake_args if a.startswith("-DCMAKE_CUDA_FLAGS=")]


def test_the_seed_direction_tells_nvcc_that_char_is_signed():
    plan = plan_for(**{"build.arch": "sm_120", **WHEELS}, **AMD64_ON_ARM64)
    assert cuda_flags(plan) == [SIGNED]
    assert SIGNED in dict(plan.labels)["org.llama-buildkit.flags"]  # recorded in the flags label
    assert f"'{SIGNED}'" in render_dockerfile(plan)  # one shell word in the compile step


def test_an_arm64_image_built_on_amd64_gets_unsigned_char():
    for provider in ({"base.provider": "nvidia"}, WHEELS):
        assert cuda_flags(plan_for(**{"build.arch": "sm_121", **provider}, **ARM64_ON_AMD64)) == [UNSIGNED]


def test_native_and_cpu_builds_get_no_char_flags():
    assert cuda_flags(plan_for(**{"build.arch": "sm_120"})) == []
    assert cuda_flags(plan_for(**{"build.arch": "sm_121", "build.build_platform": "linux/arm64"})) == []
    assert cuda_flags(plan_for(**{"build.arch": "cpu"}, **ARM64_ON_AMD64)) == []
    assert cuda_char_flags("linux/amd64", "linux/amd64") == ()


def test_a_users_cuda_flags_are_kept_after_the_char_flags():
    plan = plan_for(**{"build.arch": "sm_121", "build.cmake_args": ["-DCMAKE_CUDA_FLAGS=-lineinfo", "-DFOO=1"]},
                    **ARM64_ON_AMD64)
    assert cuda_flags(plan) == [UNSIGNED + " -lineinfo"]
    assert plan.cmake_args[-1] == "-DFOO=1"


def test_the_flags_label_with_a_spaced_value_reads_back_the_same():
    plan = plan_for(**{"build.arch": "sm_120", **WHEELS}, **AMD64_ON_ARM64)
    inputs = plan_inputs(plan, (BaseImage("debian:bookworm", "sha256:" + "1" * 64),))
    back = from_labels(inputs.to_labels("k"), "test")
    assert back.cmake_args == plan.cmake_args
    assert back == inputs


def test_an_emulated_build_machine_runs_only_when_asked():
    with pytest.raises(ConfigError, match="--emulate-build-platform"):
        judge_build_machine("linux/arm64", "linux/amd64", "linux/amd64")
    line = judge_build_machine("linux/arm64", "linux/amd64", "linux/amd64", emulate=True)
    assert line is not None and "emulated" in line and "tests and CI" in line
    assert judge_build_machine("linux/amd64", "linux/arm64", "linux/amd64", emulate=True) is None  # native here
    plan = plan_for(**{"build.arch": "sm_120", "build.emulate_build_platform": True, **WHEELS}, **AMD64_ON_ARM64)
    assert plan.request.emulate_build_platform
    assert "FROM --platform=linux/arm64 debian:bookworm AS build" in render_dockerfile(plan)
    plain = plan_for(**{"build.arch": "sm_120", **WHEELS}, **AMD64_ON_ARM64)
    assert plain.labels == plan.labels  # where the compile runs is not an input


def test_long_double_in_cuda_sources_is_found_outside_comments(tmp_path):
    (tmp_path / "ggml" / "cuda").mkdir(parents=True)
    (tmp_path / "ggml" / "cuda" / "a.cu").write_text(
        "// long double in a comment\nconst char *s = \"long double\";\n/* long\n double */\n"
        "__device__ long   double f();\n")
    (tmp_path / "ggml" / "cuda" / "b.cuh").write_text("template <class T> T g(long double x);\n")
    (tmp_path / "ggml" / "host.cpp").write_text("long double h();\n")  # not CUDA: the host compiler folds it
    assert long_double_uses(tmp_path) == [("ggml/cuda/a.cu", 5), ("ggml/cuda/b.cuh", 1)]


def test_a_cross_cuda_build_refuses_long_double_before_it_starts(tmp_path):
    (tmp_path / "k.cu").write_text("__global__ void k(long double *x) {}\n")
    cross = plan_for(**{"build.arch": "sm_120", **WHEELS}, **AMD64_ON_ARM64).request
    with pytest.raises(ConfigError, match=r"k\.cu:1.*build machine's format"):
        check_cuda_sources(cross, tmp_path)
    check_cuda_sources(plan_for(**{"build.arch": "sm_120"}).request, tmp_path)  # native: nothing to refuse
    check_cuda_sources(plan_for(**{"build.arch": "cpu"}, **AMD64_ON_ARM64).request, tmp_path)  # no nvcc


def _layout(tmp_path, platforms: list[str]) -> tuple:
    """An OCI layout of one index with an entry (and a config) per platform; returns (layout, digest)."""
    blobs = tmp_path / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(doc: dict) -> str:
        data = json.dumps(doc).encode()
        digest = sha256_digest(data)
        (blobs / digest.split(":")[1]).write_bytes(data)
        return digest

    entries = []
    for p in platforms:
        os_, arch = p.split("/")[:2]
        config = put({"os": os_, "architecture": arch})
        manifest = put({"schemaVersion": 2, "config": {"digest": config}, "layers": []})
        entries.append({"digest": manifest, "platform": {"os": os_, "architecture": arch}})
    entries.append({"digest": put({}), "platform": {"os": "unknown", "architecture": "unknown"},
                    "annotations": {"vnd.docker.reference.type": "attestation-manifest"}})
    return tmp_path, put({"schemaVersion": 2, "manifests": entries})


def test_a_base_image_without_the_platform_is_refused_naming_what_it_has(tmp_path):
    layout, digest = _layout(tmp_path, ["linux/amd64"])
    assert offered_platforms(layout, digest) == ("linux/amd64",)
    source = BaseSource("127.0.0.1:1/debian:bookworm", digest, layout)
    request = plan_for(**{"build.arch": "cpu", "build.platform": "linux/arm64",
                          "build.build_platform": "linux/arm64"}).request
    with pytest.raises(BaseImageError, match=r"127\.0\.0\.1:1/debian:bookworm offers linux/amd64, not linux/arm64"):
        check_base_platforms((source,), *base_platforms(request))
    check_base_platforms((source,), *base_platforms(plan_for(**{"build.arch": "cpu"}).request))  # amd64: fine


def test_a_cross_build_needs_both_platforms_of_its_base(tmp_path):
    request = plan_for(**{"build.arch": "cpu"}, **ARM64_ON_AMD64).request
    assert base_platforms(request)[0] == ("linux/arm64", "linux/amd64")
    both, digest = _layout(tmp_path / "both", ["linux/amd64", "linux/arm64"])
    check_base_platforms((BaseSource("multi", digest, both),), *base_platforms(request))
    one, digest1 = _layout(tmp_path / "one", ["linux/arm64"])
    with pytest.raises(BaseImageError, match="not linux/amd64.*build stage runs on linux/amd64"):
        check_base_platforms((BaseSource("arm-only", digest1, one),), *base_platforms(request))


def test_doctor_says_what_the_seed_direction_is_and_what_buildkit_does():
    from buildkit.core.check import Status
    from buildkit.flows.doctor.check import Variant
    from buildkit.flows.doctor.platformcheck import judge_cross_cuda

    seed = judge_cross_cuda([Variant("cuda13.1-sm120", (13, 1), "sm_120", "linux/amd64", "linux/arm64", "nvidia")])
    assert seed is not None and seed.status == Status.PASSED and seed.name == "cross-cuda"
    assert "not the direction NVIDIA documents" in seed.detail
    assert "-Xcudafe=--signed_chars -Xcicc=--signed_chars" in seed.detail and "long double" in seed.detail
    assert "verified" in seed.detail
    spark = judge_cross_cuda([Variant("cuda13.1-sm121", (13, 1), "sm_121", "linux/arm64", "linux/amd64", "wheels")])
    assert spark is not None and "the direction NVIDIA documents" in spark.detail and "--unsigned_chars" in spark.detail
    native = [Variant("cuda13.1-sm120", (13, 1), "sm_120", "linux/amd64", "linux/amd64"),
              Variant("cpu", None, "cpu", "linux/arm64", "linux/amd64", "cpu")]
    assert judge_cross_cuda(native) is None  # nothing to say: no cross CUDA variant
