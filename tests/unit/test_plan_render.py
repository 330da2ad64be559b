import re

import pytest

from buildkit.plan.config import load_config
from buildkit.core.errors import ArchError, ConfigError
from buildkit.plan.buildplan import make_plan, make_request
from buildkit.plan.plantypes import Resolved
from buildkit.plan.request import SourceFacts
from buildkit.plan.render import render_dockerfile, templates_sha256
from buildkit.plan.tags import build_tags, check_tag, variant
from buildkit.plan.archs import get_arch

COMMIT = "905483277823858fdec17ff5c3750451cb1b7cdc"
FACTS = SourceFacts(url="https://example.invalid/fork", commit=COMMIT, commit_time=1767225600,
                    build_number=6123, patch_set_sha256="ab" * 32, patch_names=("0001-x.patch",))


def plan_for(**overrides):
    overrides.setdefault("build.build_platform", "linux/amd64")  # the same plan on any test machine
    cfg = load_config(None, env={}, overrides={k: (v, "test") for k, v in overrides.items()})
    return make_plan(make_request(cfg), Resolved(FACTS, templates_sha256(), "9.9.9"))


def test_sm120_dockerfile_has_120a_real_and_no_vmm():
    text = render_dockerfile(plan_for(**{"build.arch": "sm_120"}))
    assert "-DCMAKE_CUDA_ARCHITECTURES=120a-real" in text
    assert "-DGGML_CUDA_NO_VMM=ON" in text
    assert "-DGGML_NATIVE=OFF" in text and "-DGGML_CUDA=ON" in text
    assert "stubs" not in text  # NO_VMM needs no libcuda stub
    assert f"-DLLAMA_BUILD_COMMIT={COMMIT}" in text and "-DLLAMA_BUILD_NUMBER=6123" in text
    assert "FROM docker.io/nvidia/cuda:13.1.0-devel-ubuntu24.04 AS build" in text
    assert "FROM docker.io/nvidia/cuda:13.1.0-runtime-ubuntu24.04 AS base" in text
    assert "# syntax=" not in text


def test_every_target_stage_is_rendered_and_server_has_health_check():
    text = render_dockerfile(plan_for())
    for stage in ("build", "base", "full", "light", "server"):
        assert re.search(rf"^FROM \S+ AS {stage}$", text, re.M), stage
    server = text[text.index("AS server"):]
    assert 'ENTRYPOINT ["/app/llama-server"]' in server
    assert "LLAMA_ARG_HOST=0.0.0.0" in server and "HEALTHCHECK" in server
    assert "cp -P" in text  # shared libraries keep their symlinks


def test_vmm_off_links_against_the_stub():
    text = render_dockerfile(plan_for(**{"build.no_vmm": False}))
    assert "-DGGML_CUDA_NO_VMM=OFF" in text
    assert "ENV LIBRARY_PATH=/usr/local/cuda/lib64/stubs" in text
    assert "--allow-shlib-undefined" in text


def test_ccache_mount_is_keyed_per_arch_and_cuda_version():
    a = render_dockerfile(plan_for(**{"build.arch": "sm_120", "build.cuda_version": "13.1"}))
    b = render_dockerfile(plan_for(**{"build.arch": "sm_89", "build.cuda_version": "12.9"}))
    assert "id=llama-buildkit-ccache-cuda13.1-sm120-amd64" in a
    assert "id=llama-buildkit-ccache-cuda12.9-sm89-amd64" in b


def test_jobs_option():
    assert "-j 3 " in render_dockerfile(plan_for(**{"build.jobs": 3}))
    assert "-j $(nproc) " in render_dockerfile(plan_for())


def test_wheels_provider_uses_os_image_and_named_contexts():
    text = render_dockerfile(plan_for(**{"base.provider": "wheels", "base.os_image": "local/debian:bookworm"}))
    assert "FROM local/debian:bookworm AS build" in text
    assert "COPY --from=cuda-root / /usr/local/cuda/" in text
    assert "COPY --from=cuda-runtime --chown=0:0 /lib64/ /cuda/usr/local/cuda/lib64/" in text
    # the folder's time fixed, not the kept transfer's
    files = text[text.index("AS cuda-runtime-files"):text.index("AS base")]
    assert "RUN find /cuda -exec touch -h -d @0 {} +" in files
    assert "COPY --from=cuda-runtime-files /cuda/ /" in text[text.index("AS base"):]
    assert "nvidia/cuda" not in text


def test_cpu_template():
    plan = plan_for(**{"build.arch": "cpu", "base.os_image": "local/debian:bookworm"})
    text = render_dockerfile(plan)
    assert plan.request.variant == "cpu" and plan.request.cuda_version is None
    assert "GGML_CUDA" not in text and "cuda" not in text.lower().replace("ccache", "")
    assert "-DLLAMA_BUILD_WEBUI=OFF" in text


@pytest.mark.parametrize("arch,groups", [("cpu", ["cpu"]), ("sm_120", ["cuda", "cpu"])])
def test_the_backends_are_layers_of_their_own_largest_first(arch, groups):
    text = render_dockerfile(plan_for(**{"build.arch": arch, "base.os_image": "local/debian:bookworm"}))
    collect = text[text.index("RUN mkdir -p /app/bin /app/lib"):text.index("AS base")]
    for group in groups:
        assert f"find /app/lib -maxdepth 1 -name 'libggml-{group}*' -exec mv {{}} /app/libs/{group}/" in collect
    # moved before the times are fixed, so the folders are dated 0 as well
    assert collect.index("/app/libs/cpu/") < collect.index("find /app -exec touch -h -d @0")
    copies = re.findall(r"^COPY --from=build --chown=0:0 (\S+ \S+)$", text[text.index("AS base"):], re.M)
    # /app and /app/lib first, dated 0 (a COPY that made them would date /app with the commit, in every layer)
    assert copies[:len(groups) + 2] == ["/app/root/ /"] + [f"/app/libs/{g}/ /app/lib/" for g in groups] + \
        ["/app/lib/ /app/lib/"]
    assert "mkdir -p /app/root/app/lib " in collect


def test_sm86_with_cuda_11_0_is_refused():
    with pytest.raises(ArchError, match="11.1"):
        plan_for(**{"build.arch": "sm_86", "build.cuda_version": "11.0"})


def test_unknown_arch_is_refused_before_work():
    with pytest.raises(ArchError, match="choose one of"):
        make_request(load_config(None, env={}, overrides={"build.arch": ("sm_999", "--arch")}))


@pytest.mark.parametrize("key,value,message", [
    ("build.cmake_args", ["-DX=1; rm -rf /"], "not of the form -DNAME=VALUE"),
    ("build.cmake_args", ["-DX=$(id)"], "not of the form -DNAME=VALUE"),
    ("base.os_image", "ubuntu:24.04\nRUN evil", "not a valid image reference"),
    ("build.platform", "linux amd64", "os/arch"),
    ("image.name", "Bad Name", "not a valid repository name"),
    ("image.version", "1.0 && x", "not a valid version"),
])
def test_values_reaching_shell_lines_are_validated(key, value, message):
    overrides = {key: value, "base.provider": "wheels"}
    with pytest.raises(ConfigError, match=message):
        plan_for(**overrides)


def test_cmake_args_are_shell_quoted():
    text = render_dockerfile(plan_for(**{"build.cmake_args": ["-DGGML_CUDA_FA_ALL_QUANTS=ON"]}))
    assert "      -DGGML_CUDA_FA_ALL_QUANTS=ON" in text


def test_labels():
    labels = dict(plan_for().labels)
    assert labels["org.opencontainers.image.revision"] == COMMIT
    assert labels["org.opencontainers.image.created"] == "2026-01-01T00:00:00Z"
    assert labels["org.opencontainers.image.source"] == FACTS.url
    assert labels["org.opencontainers.image.version"] == "0.1.0"
    assert labels["org.opencontainers.image.licenses"] == "MIT"
    assert labels["org.llama-buildkit.arch"] == "sm_120"
    assert labels["org.llama-buildkit.cuda-version"] == "13.1"
    assert labels["org.llama-buildkit.patch-set"] == FACTS.patch_set_sha256
    assert "-DGGML_CUDA_NO_VMM=ON" in labels["org.llama-buildkit.flags"]
    assert labels["org.llama-buildkit.template"] == templates_sha256()


def test_template_hash_changes_with_any_template(tmp_path):
    from buildkit.core.paths import templates_dir
    for path in templates_dir().glob("*.j2"):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    before = templates_sha256(tmp_path)
    (tmp_path / "_runtime.j2").write_text((tmp_path / "_runtime.j2").read_text() + "\n# changed\n")
    assert templates_sha256(tmp_path) != before


def test_tags():
    v = variant(get_arch("sm_120"), "13.1")
    assert v == "cuda13.1-sm120"
    assert variant(get_arch("cpu"), None) == "cpu"
    assert build_tags("buun-llama-cpp", v, COMMIT) == (
        "buun-llama-cpp:cuda13.1-sm120", "buun-llama-cpp:sha-9054832-cuda13.1-sm120")
    with pytest.raises(ConfigError, match="not a valid Docker tag"):
        check_tag("1.0+build")
    with pytest.raises(ConfigError, match="not a valid Docker tag"):
        check_tag("x" * 129)


def test_ccache_can_be_turned_off():
    text = render_dockerfile(plan_for(**{"build.ccache": False}))
    assert "--mount=type=cache" not in text and "LAUNCHER=ccache" not in text and "CCACHE_DIR" not in text
    assert "-DCMAKE_CUDA_ARCHITECTURES=120a-real" in text


@pytest.mark.parametrize("arch", ["cpu", "sm_120"])
def test_ccache_statistics_are_this_builds_own(arch):
    """The compile step zeroes ccache's counters on the shared cache mount before CMake runs and
    prints them after the build, in the same RUN step: the summary's hit rate is this build's."""
    text = render_dockerfile(plan_for(**{"build.arch": arch, "build.ccache": True}))
    step = next(s for s in text.split("\nRUN ") if "cmake --build" in s)
    zero, configure = step.index("ccache --zero-stats"), step.index("cmake -G Ninja -S /src")
    build, show = step.index("cmake --build"), step.index("ccache --show-stats")
    assert "--mount=type=cache" in step and zero < configure < build < show
    off = render_dockerfile(plan_for(**{"build.arch": arch, "build.ccache": False}))
    assert "ccache --" not in off and "-DGGML_CCACHE=OFF" in off


@pytest.mark.parametrize("arch", ["cpu", "sm_120"])
def test_recache_compiles_every_object_again_and_changes_no_recorded_input(arch):
    """reproduce's plan (ccache_recache) keeps the ccache launcher, whose path rewriting the compiler
    sees, but reads nothing from the mount; the labels (inputs, build key source) stay the same."""
    from dataclasses import replace

    plan = plan_for(**{"build.arch": arch, "build.ccache": True})
    normal, again = render_dockerfile(plan), render_dockerfile(replace(plan, ccache_recache=True))
    assert "CCACHE_RECACHE" not in normal
    step = next(s for s in again.split("\nRUN ") if "cmake --build" in s)
    assert "CCACHE_RECACHE=1" in step and "CCACHE_BASEDIR=/src" in step and "LAUNCHER=ccache" in step
    assert [ln for ln in again.splitlines() if "CCACHE_RECACHE" not in ln] == \
        [ln for ln in normal.splitlines() if "CCACHE_DIR" not in ln]
    assert replace(plan, ccache_recache=True).labels == plan.labels
    off = plan_for(**{"build.arch": arch, "build.ccache": False})
    assert "CCACHE_RECACHE" not in render_dockerfile(replace(off, ccache_recache=True))


@pytest.mark.parametrize("provider,expected", [
    ("nvidia", "/app/lib:/usr/local/nvidia/lib:/usr/local/nvidia/lib64"),
    ("wheels", "/app/lib:/usr/local/cuda/lib64:/usr/local/nvidia/lib:/usr/local/nvidia/lib64"),
])
def test_cuda_images_keep_the_folders_kubernetes_mounts_the_driver_in(provider, expected):
    """NVIDIA's base sets LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64 (GKE mounts the
    driver there); the image's own ENV replaces it, so it must name them (the engine test runs the loader)."""
    text = render_dockerfile(plan_for(**{"base.provider": provider}))
    assert re.findall(r"^ENV LD_LIBRARY_PATH=(\S+)$", text, re.M) == [expected]
    cpu = render_dockerfile(plan_for(**{"build.arch": "cpu"}))
    assert re.findall(r"^ENV LD_LIBRARY_PATH=(\S+)$", cpu, re.M) == ["/app/lib"]
