"""Each input declared once (plan/inputs.py): what a user gets from the declarations. A lock written
before them still loads with its build key; a rebuild from a record writes the recorded labels again,
with and without the labels issue 24 added; the new labels' values."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from buildkit.core.errors import ConfigError
from buildkit.flows.reproduce.record import Recorded, from_lock
from buildkit.cli.reproducespecs import overrides_for
from buildkit.plan.buildkey import key_of
from buildkit.plan.buildplan import make_plan, make_request
from buildkit.plan.plantypes import Resolved
from buildkit.plan.config import load_config
from buildkit.plan.inputs import OCI, from_labels
from buildkit.plan.plantypes import plan_inputs
from buildkit.release.lockfile import Lock, write_lock_entry
from test_inputs import CASES, FACTS, NVIDIA, plan

NEW_LABELS = (OCI + "description", OCI + "url", OCI + "base.name", OCI + "base.digest")

# buildkit.lock as the buildkit before the declarations wrote it (commit 7aca0ae), for the "nvidia"
# case of test_inputs.py; its build key is the one test_inputs.py pins.
LOCK_BEFORE = r'''{
  "builds": {
    "cuda13.1-sm90/server": {
      "arch": "sm_90",
      "base_images": [
        {
          "digest": "sha256:0101010101010101010101010101010101010101010101010101010101010101",
          "ref": "docker.io/nvidia/cuda:13.1.0-devel-ubuntu24.04"
        },
        {
          "digest": "sha256:0202020202020202020202020202020202020202020202020202020202020202",
          "ref": "docker.io/nvidia/cuda:13.1.0-runtime-ubuntu24.04"
        }
      ],
      "bench": null,
      "build_key": "9cdbf8d1df49aea3937b5d635a84b064ae758c7df88b2608936e396f5ef710ba",
      "build_number": 6123,
      "build_seconds": 12.5,
      "cmake_archs": "90-real",
      "cmake_args": [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DGGML_NATIVE=OFF",
        "-DGGML_BACKEND_DL=ON",
        "-DGGML_CPU_ALL_VARIANTS=ON",
        "-DGGML_BACKEND_DIR=/app/lib",
        "-DGGML_SSE42=OFF",
        "-DGGML_AVX=OFF",
        "-DGGML_AVX2=OFF",
        "-DGGML_BMI2=OFF",
        "-DGGML_AVX_VNNI=OFF",
        "-DGGML_FMA=OFF",
        "-DGGML_F16C=OFF",
        "-DGGML_AVX512=OFF",
        "-DGGML_AVX512_VBMI=OFF",
        "-DGGML_AVX512_VNNI=OFF",
        "-DGGML_AVX512_BF16=OFF",
        "-DGGML_AMX_TILE=OFF",
        "-DGGML_AMX_INT8=OFF",
        "-DGGML_AMX_BF16=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_UI=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DLLAMA_BUILD_WEBUI=OFF",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=ON",
        "-DLLAMA_BUILD_COMMIT=905483277823858fdec17ff5c3750451cb1b7cdc",
        "-DLLAMA_BUILD_NUMBER=6123",
        "-DGGML_CUDA=ON",
        "-DCMAKE_CUDA_ARCHITECTURES=90-real",
        "-DGGML_CUDA_NO_VMM=OFF",
        "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined"
      ],
      "commit": "905483277823858fdec17ff5c3750451cb1b7cdc",
      "cpu_level": "all",
      "cuda_root": null,
      "cuda_version": "13.1",
      "dockerfile_sha256": "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd",
      "exporter": "oci",
      "image_digest": "sha256:eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee",
      "image_id": "sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
      "image_name": "x/y",
      "labels": {
        "org.llama-buildkit.arch": "sm_90",
        "org.llama-buildkit.build-key": "9cdbf8d1df49aea3937b5d635a84b064ae758c7df88b2608936e396f5ef710ba",
        "org.llama-buildkit.build-number": "6123",
        "org.llama-buildkit.cpu-level": "all",
        "org.llama-buildkit.cuda-version": "13.1",
        "org.llama-buildkit.flags": "-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_BACKEND_DIR=/app/lib -DGGML_SSE42=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_BMI2=OFF -DGGML_AVX_VNNI=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_WEBUI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=ON -DLLAMA_BUILD_COMMIT=905483277823858fdec17ff5c3750451cb1b7cdc -DLLAMA_BUILD_NUMBER=6123 -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_CUDA_NO_VMM=OFF -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined",
        "org.llama-buildkit.inputs": "{\"base_images\":[[\"docker.io/nvidia/cuda:13.1.0-devel-ubuntu24.04\",\"sha256:0101010101010101010101010101010101010101010101010101010101010101\"],[\"docker.io/nvidia/cuda:13.1.0-runtime-ubuntu24.04\",\"sha256:0202020202020202020202020202020202020202020202020202020202020202\"]],\"ccache\":true,\"cpu_level\":\"all\",\"cublas\":null,\"cuda_wheels\":null,\"devel_image\":\"docker.io/nvidia/cuda:13.1.0-devel-ubuntu24.04\",\"extra_cmake_args\":[],\"format\":1,\"jobs\":0,\"no_vmm\":false,\"patches\":[\"0001-x.patch\"],\"platform\":\"linux/amd64\",\"provider\":\"nvidia\",\"runtime_image\":\"docker.io/nvidia/cuda:13.1.0-runtime-ubuntu24.04\"}",
        "org.llama-buildkit.patch-set": "abababababababababababababababababababababababababababababababab",
        "org.llama-buildkit.target": "server",
        "org.llama-buildkit.template": "7777777777777777777777777777777777777777777777777777777777777777",
        "org.llama-buildkit.tool-version": "9.9.9",
        "org.llama-buildkit.variant": "cuda13.1-sm90",
        "org.opencontainers.image.created": "2026-01-01T00:00:00Z",
        "org.opencontainers.image.licenses": "MIT",
        "org.opencontainers.image.revision": "905483277823858fdec17ff5c3750451cb1b7cdc",
        "org.opencontainers.image.source": "https://example.invalid/fork",
        "org.opencontainers.image.title": "buun-llama-cpp",
        "org.opencontainers.image.version": "0.1.0"
      },
      "no_vmm": false,
      "patch_set_sha256": "abababababababababababababababababababababababababababababababab",
      "patches": [
        "0001-x.patch"
      ],
      "platform": "linux/amd64",
      "pushed": [
        "registry.example/x/y:0.1.0-cuda13.1-sm90"
      ],
      "ref": "main",
      "source_date_epoch": 1767225600,
      "source_url": "https://example.invalid/fork",
      "tags": [
        "x/y:cuda13.1-sm90"
      ],
      "target": "server",
      "template": "cuda.Dockerfile.j2",
      "template_sha256": "7777777777777777777777777777777777777777777777777777777777777777",
      "tool_version": "9.9.9",
      "variant": "cuda13.1-sm90",
      "version": "0.1.0"
    }
  },
  "lock_version": 1
}
'''  # noqa: E501  (a lock of an earlier buildkit, as written)


def _lock(tmp_path, text: str = LOCK_BEFORE):
    path = tmp_path / "buildkit.lock"
    path.write_text(text)
    return path


def test_a_lock_written_before_the_declarations_loads_with_its_inputs_and_key(tmp_path):
    path = _lock(tmp_path)
    entry = Lock.read(path).entry("cuda13.1-sm90/server")
    make, bases, manifest, host, key = CASES["nvidia"]
    # the inputs it recorded; the labels issue 24 added are not in it
    assert entry.inputs() == replace(plan_inputs(make(), bases, manifest, host), description="", url="", base_name="")
    assert key_of(entry.inputs()) == key == entry.build_key
    assert entry.pushed == ("registry.example/x/y:0.1.0-cuda13.1-sm90",) and entry.build_seconds == 12.5
    rec = from_lock(path)
    assert rec.inputs == entry.inputs() and rec.image_digest == "sha256:" + "e" * 64
    # written back by this buildkit, it is the same document
    write_lock_entry(path, entry)
    assert json.loads(path.read_text()) == json.loads(LOCK_BEFORE)


def _rebuilt_labels(rec: Recorded) -> dict[str, str]:
    """The labels a rebuild of rec gets: the config reproduce makes from it, planned with its sources."""
    cfg = load_config(None, env={}, overrides=overrides_for(rec))
    again = make_plan(make_request(cfg), Resolved(FACTS, rec.inputs.template_sha256, rec.inputs.tool_version))
    inputs = plan_inputs(again, rec.inputs.base_images, None, rec.inputs.cpu_host)
    return inputs.to_labels(key_of(inputs))


@pytest.mark.parametrize("when", ["before issue 24", "now"])
def test_a_rebuild_from_a_record_writes_exactly_the_recorded_labels(when):
    if when == "now":
        inputs = plan_inputs(CASES["nvidia"][0](), NVIDIA)
        labels = inputs.to_labels(key_of(inputs))
        assert set(NEW_LABELS) <= set(labels)
    else:
        labels = json.loads(LOCK_BEFORE)["builds"]["cuda13.1-sm90/server"]["labels"]
        assert not set(NEW_LABELS) & set(labels)
    rec = Recorded(origin="image x", inputs=from_labels(labels, "image x"), image_name="x/y",
                   image_digest="sha256:" + "e" * 64, labels=labels)
    assert _rebuilt_labels(rec) == labels


def test_the_image_labels_of_issue_24():
    inputs = plan_inputs(CASES["nvidia"][0](), NVIDIA)
    labels = inputs.to_labels()
    assert labels[OCI + "description"] == "llama.cpp server image of https://example.invalid/fork for cuda13.1-sm90"
    assert labels[OCI + "url"] == "https://example.invalid/fork"
    assert labels[OCI + "base.name"] == "docker.io/nvidia/cuda:13.1.0-runtime-ubuntu24.04"
    assert labels[OCI + "base.digest"] == "sha256:" + "02" * 32  # the runtime stage's, not the devel stage's
    assert from_labels(labels, "image x") == inputs


def test_description_and_url_are_metadata_not_in_the_build_key():
    make, bases, _, _, key = CASES["cpu"]
    other = plan(**{"build.arch": "cpu", "build.cmake_args": ["-DX=1"], "image.url": "https://example.invalid/x",
                    "image.description": "{target} of {variant}", "image.base_labels": False})
    inputs = plan_inputs(other, bases)
    labels = inputs.to_labels()
    assert labels[OCI + "description"] == "server of cpu" and labels[OCI + "url"] == "https://example.invalid/x"
    assert OCI + "base.name" not in labels and OCI + "base.digest" not in labels
    assert key_of(inputs) == key
    empty = plan_inputs(plan(**{"build.arch": "cpu", "image.description": "", "image.url": ""}), bases).to_labels()
    assert OCI + "description" not in empty and OCI + "url" not in empty


def test_a_description_of_several_lines_is_refused():
    cfg = load_config(None, env={}, overrides={"image.description": ("two\nlines", "test")})
    with pytest.raises(ConfigError, match="image.description must be a single line"):
        make_request(cfg)
