"""`buildkit run --print --format k8s`: the Deployment (and Service) of a profile, checked against the
Kubernetes API's own OpenAPI schemas (kubernetes-validate bundles them; strict: no unknown field)."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest
from click.testing import CliRunner

from buildkit.cli.main import main
from buildkit.engine.api import ImageInfo
from buildkit.engine.current import use_engine
from fakeengine import FakeEngine
from test_profiles import DFLASH

REPO = "registry.example.com/you/buun-llama-cpp"
DIGEST = "sha256:" + "ab" * 32
CUDA_IMAGE = ImageInfo(id="sha256:" + "1" * 64, tags=(f"{REPO}:cuda13.1-sm120",), repo_digests=(f"{REPO}@{DIGEST}",),
                       labels={"org.llama-buildkit.cuda-version": "13.1"})
CPU_IMAGE = ImageInfo(id="sha256:" + "2" * 64, tags=(f"{REPO}:cpu",), repo_digests=(f"{REPO}@{DIGEST}",),
                      labels={"org.llama-buildkit.cuda-version": "none"})


@pytest.fixture()
def project(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "target.gguf").write_bytes(b"GGUF")
    (tmp_path / "buildkit.toml").write_text(DFLASH)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def k8s(*args: str, images: dict[str, ImageInfo] | None = None):
    engine = FakeEngine()
    engine.images.update(images if images is not None else {f"{REPO}:cuda13.1-sm120": CUDA_IMAGE,
                                                             f"{REPO}:cpu": CPU_IMAGE})
    with use_engine(engine):
        return CliRunner().invoke(main, ["run", *args])


def objects(result) -> dict[str, dict]:
    """The printed List, every item valid for the Kubernetes API (strict), by kind."""
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["apiVersion"] == "v1" and document["kind"] == "List"
    for item in document["items"]:
        kubernetes_validate.validate(item, kubernetes_validate.latest_version(), strict=True)
    return {item["kind"]: item for item in document["items"]}


def container(items: dict[str, dict]) -> dict:
    (only,) = items["Deployment"]["spec"]["template"]["spec"]["containers"]
    return only


def test_the_dflash_profile_as_a_deployment(project):
    items = objects(k8s("--profile", "dflash", "--image", f"{REPO}:cuda13.1-sm120", "--model-draft",
                        "/elsewhere/draft.gguf", "--print", "--format", "k8s", "--", "--threads", "4"))
    c = container(items)
    assert c["image"] == f"{REPO}@{DIGEST}"  # by digest: a tag can move under a running Deployment
    assert c["args"][:8] == ["--host", "0.0.0.0", "--port", "8080", "--model", "/models/target.gguf",
                             "--model-draft", "/models/draft/draft.gguf"]
    assert c["args"][8:10] == ["--spec-type", "dflash"] and c["args"][-2:] == ["--threads", "4"]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "1"}}  # the profile's gpus = "all"
    assert c["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}
    volumes = items["Deployment"]["spec"]["template"]["spec"]["volumes"]
    assert volumes == [{"name": "models", "persistentVolumeClaim": {"claimName": "llama-server-dflash-models",
                                                                     "readOnly": True}}]
    assert [(m["mountPath"], m["subPath"]) for m in c["volumeMounts"]] == [
        ("/models/target.gguf", "target.gguf"), ("/models/draft/draft.gguf", "draft/draft.gguf")]
    assert all(m["readOnly"] and m["name"] == "models" for m in c["volumeMounts"])
    service = items["Service"]
    assert service["spec"]["selector"] == items["Deployment"]["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http"}]


def test_the_port_of_the_profile_and_no_gpu_for_a_cpu_image(project):
    items = objects(k8s("--profile", "cpu", "--image", f"{REPO}:cpu", "--model", "m.gguf", "--print",
                        "--format", "k8s", "--name", "chat"))
    c = container(items)
    assert "resources" not in c and c["ports"][0]["containerPort"] == 9000 and "9000" in c["args"]
    assert items["Deployment"]["metadata"]["name"] == items["Service"]["metadata"]["name"] == "chat"


@pytest.mark.parametrize("gpus,limit", [("2", "2"), ("device=0,1,3", "3"), ("none", None)])
def test_the_gpu_limit_follows_gpus(project, gpus, limit):
    c = container(objects(k8s("--image", f"{REPO}:cuda13.1-sm120", "--model", "m.gguf", "--gpus", gpus,
                              "--print", "--format", "k8s")))
    assert c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu") == limit


def test_a_cuda_image_gets_a_gpu_without_a_profile(project):
    c = container(objects(k8s("--image", f"{REPO}:cuda13.1-sm120", "--model", "m.gguf", "--print", "--format", "k8s")))
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "1"}}


def test_an_image_given_by_digest_needs_no_engine_and_dollars_stay_literal(project):
    ref = f"{REPO}:cpu@{DIGEST}"
    c = container(objects(k8s("--image", ref, "--model", "m.gguf", "--print", "--format", "k8s", "--",
                              "--alias", "$(HOSTNAME)", images={})))
    assert c["image"] == ref and c["args"][-2:] == ["--alias", "$$(HOSTNAME)"]  # Kubernetes expands $(VAR)


@pytest.mark.parametrize("args,message", [
    (["--image", f"{REPO}:other", "--model", "m.gguf", "--print", "--format", "k8s"],
     f"error: image {REPO}:other has no digest in the local engine"),
    (["--image", f"{REPO}:cpu", "--model", "m.gguf", "--format", "k8s"], "error: --format k8s prints a manifest"),
    (["--image", f"{REPO}:cpu", "--model", "m.gguf", "--print", "--format", "k8s", "--name", "Chat_1"],
     "error: --name 'Chat_1': a Kubernetes name"),
    (["--image", f"{REPO}:cpu", "--model", "m.gguf", "--print", "--format", "k8s", "--detach"],
     "error: --detach and --bind are docker run's"),
])
def test_k8s_errors_are_one_line(project, args, message):
    result = k8s(*args)
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(message), result.output
