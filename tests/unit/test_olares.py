"""Issue 50 items 1 and 3: `buildkit run --format olares --out DIR` writes an Olares Application Chart for the
image by digest, sized from the models' GGUF headers; Helm's library (helm-python-sdk) lints and renders it
offline, Olares' checker rules (tests/olareschecker.py) and the Kubernetes schemas hold it, and a chart that
breaks a rule fails them."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner
from fakeengine import FakeEngine
from olareschecker import check_chart, render
from test_vram import fork_models

from buildkit.cli.main import main
from buildkit.core.ggufheader import read_header
from buildkit.engine.api import ImageInfo
from buildkit.engine.current import use_engine
from buildkit.plan.inputs import INPUTS_LABEL
from buildkit.plan.llamaargs import parse_server_args
from buildkit.plan.starter import DFLASH_PROFILE, toml_value
from buildkit.plan.vram import MiB, estimate

DIGEST = "sha256:" + "ab" * 32
IMAGE = "registry.example.com/you/buun-llama-cpp"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("fork-models")
    fork_models().main(["--out", str(out)])
    return out / "qwen35-tiny.gguf", out / "dflash-draft-tiny.gguf"


def engine_with_image(user: str = "") -> FakeEngine:
    engine = FakeEngine()
    record = {"platform": "linux/amd64", "user": user}
    engine.images[f"{IMAGE}:cuda13.1-sm120"] = ImageInfo(
        id="sha256:" + "1" * 64, repo_digests=(f"{IMAGE}@{DIGEST}",),
        labels={INPUTS_LABEL: json.dumps(record), "org.opencontainers.image.version": "0.1.0",
                "org.llama-buildkit.variant": "cuda13.1-sm120",
                "org.opencontainers.image.source": "https://github.com/spiritbuun/buun-llama-cpp"})
    return engine


def write_chart(tmp_path: Path, models, *extra: str, args=None, user: str = "") -> tuple[Path, str]:
    (tmp_path / "buildkit.toml").write_text(
        "schema_version = 1\n[profiles.dflash]\ngpus = \"all\"\nneeds_draft = true\n"
        f"args = {toml_value(args if args is not None else DFLASH_PROFILE['args'])}\n")
    with use_engine(engine_with_image(user)):
        result = CliRunner().invoke(main, [
            "run", "--config", str(tmp_path / "buildkit.toml"), "--profile", "dflash",
            "--image", f"{IMAGE}:cuda13.1-sm120", "--model", str(models[0]), "--model-draft", str(models[1]),
            "--format", "olares", "--out", str(tmp_path / "out"), "--gpu-memory", "24", *extra])
    assert result.exit_code == 0, result.output
    folders = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    assert len(folders) == 1
    return folders[0], result.output


def load(folder: Path, name: str):
    return yaml.safe_load((folder / name).read_text())


@pytest.mark.parametrize("version", ["0.12.0", "0.11.0"])
def test_the_app_passes_helm_olares_checker_and_the_kubernetes_schemas(tmp_path, models, version):
    folder, output = write_chart(tmp_path, models, "--olares-manifest", version, "--owner", "someone")
    assert check_chart(folder) == []
    errors, objects = render(folder)
    assert errors == [] and [o["kind"] for o in objects] == ["Deployment", "Service"]
    for obj in objects:
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == [
        "Chart.yaml", "OlaresManifest.yaml", "i18n/en-US/OlaresManifest.yaml", "i18n/zh-CN/OlaresManifest.yaml",
        "owners", "templates/llama-server.yaml", "values.yaml"]
    assert load(folder, "owners") == {"owners": ["someone"]}
    assert "GPU memory, estimated from the models' GGUF headers" in output


def test_what_the_app_declares(tmp_path, models):
    folder, _ = write_chart(tmp_path, models)
    manifest = load(folder, "OlaresManifest.yaml")
    assert (manifest["olaresManifest.version"], manifest["apiVersion"]) == ("0.12.0", "v3")
    assert folder.name == manifest["metadata"]["name"] == load(folder, "Chart.yaml")["name"] == "buunllamacppdflash"
    expected = estimate(read_header(models[0]), parse_server_args(DFLASH_PROFILE["args"]), read_header(models[1]))
    gpu_mib = -(-expected.total // MiB)
    (accelerator,) = manifest["spec"]["accelerator"]
    assert accelerator["mode"] == "nvidia" and accelerator["requiredGPUMemory"] == f"{gpu_mib}Mi"
    assert accelerator["limitedGPUMemory"] == f"{24 * 1024}Mi"
    _, (deployment, service) = render(folder)
    assert deployment["metadata"]["annotations"]["applications.app.bytetrade.io/gpu-inject"] == "true"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"{IMAGE}@{DIGEST}"
    for part in ("requests", "limits"):
        assert container["resources"][part]["nvidia.com/gpumem"] == gpu_mib
    assert container["args"] == ["--host", "0.0.0.0", "--port", "8080", "--model", "/models/qwen35-tiny.gguf",
                                 "--model-draft", "/models/dflash-draft-tiny.gguf", *DFLASH_PROFILE["args"]]
    (volume,) = deployment["spec"]["template"]["spec"]["volumes"]
    assert volume["hostPath"]["path"] == "/olares/userdata/Cache/common/huggingface/buunllamacppdflash"
    assert container["volumeMounts"] == [{"name": "models", "mountPath": "/models", "readOnly": True}]
    assert container["startupProbe"]["httpGet"]["path"] == "/health"
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] == 600
    assert "securityContext" not in deployment["spec"]["template"]["spec"] and "runAsUser" not in manifest["spec"]
    assert manifest["entrances"][0]["host"] == service["metadata"]["name"]


def test_the_older_manifest_form(tmp_path, models):
    folder, _ = write_chart(tmp_path, models, "--olares-manifest", "0.11.0")
    manifest = load(folder, "OlaresManifest.yaml")
    assert manifest["apiVersion"] == "v2" and "accelerator" not in manifest["spec"]
    assert manifest["spec"]["requiredGpu"].endswith("Mi") and manifest["spec"]["limitedGpu"] == f"{24 * 1024}Mi"


def test_an_image_with_a_user_that_is_not_root_runs_under_olares_uid(tmp_path, models):
    folder, _ = write_chart(tmp_path, models, user="llama:10001")
    assert load(folder, "OlaresManifest.yaml")["spec"]["runAsUser"] is True
    _, (deployment, _service) = render(folder)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True}
    assert {"name": "HOME", "value": "/tmp"} in pod["containers"][0]["env"]


def test_arguments_reach_the_server_as_given(tmp_path, models):
    """`{{` would be a Helm action and `$(X)` a Kubernetes expansion: each reaches llama-server as written."""
    hostile = ["--spec-type", "dflash", "--alias", "{{ .Values.secret }} `x` $(HOME) $$", "--jinja"]
    folder, _ = write_chart(tmp_path, models, args=hostile)
    _, (deployment, _service) = render(folder)
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a.replace("$$", "$") for a in args[8:]] == hostile  # Kubernetes gives `$$` back as `$`
    assert check_chart(folder) == []


def _edit(folder: Path, name: str, change) -> None:
    path = folder / name
    docs = list(yaml.safe_load_all(path.read_text()))
    change(docs)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False, width=1 << 16))


def _container(docs):
    return docs[0]["spec"]["template"]["spec"]["containers"][0]


BREAKS = {
    "no cpu limit": ("templates/llama-server.yaml", lambda d: _container(d)["resources"]["limits"].pop("cpu"),
                     "sets no cpu limit"),
    "no memory request": ("templates/llama-server.yaml",
                          lambda d: _container(d)["resources"]["requests"].pop("memory"), "sets no memory request"),
    "request over limit": ("templates/llama-server.yaml",
                           lambda d: _container(d)["resources"]["requests"].update(cpu="8"),
                           "requests more cpu than its limit"),
    "deployment renamed": ("templates/llama-server.yaml", lambda d: d[0]["metadata"].update(name="other"),
                           "no Deployment or StatefulSet named"),
    "gpumem differs": ("templates/llama-server.yaml",
                       lambda d: _container(d)["resources"]["limits"].update({"nvidia.com/gpumem": 1}),
                       "not one bare MiB integer"),
    "no gpu-inject": ("templates/llama-server.yaml", lambda d: d[0]["metadata"].pop("annotations"),
                      "without the gpu-inject annotation"),
    "envelope too small": ("OlaresManifest.yaml",
                           lambda d: d[0]["spec"]["accelerator"][0].update(limitedMemory="1Mi", requiredMemory="1Mi"),
                           "is over spec.accelerator[nvidia].limitedMemory"),
    "gpu envelope too small": ("OlaresManifest.yaml",
                               lambda d: d[0]["spec"]["accelerator"][0].update(requiredGPUMemory="1Mi"),
                               "GPU memory (1Mi)"),
    "title too long": ("OlaresManifest.yaml", lambda d: d[0]["metadata"].update(title="x" * 31), "metadata.title"),
    "unknown arch": ("OlaresManifest.yaml", lambda d: d[0]["spec"].update(supportArch=["sparc"]), "supportArch"),
    "no appCommon permission": ("OlaresManifest.yaml", lambda d: d[0].update(permission={}),
                                "without permission.appCommon"),
    "entrance to nowhere": ("OlaresManifest.yaml", lambda d: d[0]["entrances"][0].update(port=9999),
                            "names no Service port"),
    "versions differ": ("Chart.yaml", lambda d: d[0].update(version="9.9.9"), "versions differ"),
    "a template error": ("templates/llama-server.yaml", lambda d: d[0]["metadata"].update(name="{{ .Values.nope.x }}"),
                         "helm lint"),
}


@pytest.mark.parametrize("what", sorted(BREAKS))
def test_a_chart_that_breaks_a_rule_fails(tmp_path, models, what):
    folder, _ = write_chart(tmp_path, models)
    name, change, message = BREAKS[what]
    _edit(folder, name, change)
    broken = check_chart(folder) if what != "a template error" else _lint_errors(folder)
    assert any(message in line for line in broken), broken


def _lint_errors(folder: Path) -> list[str]:
    import helm_python

    report = helm_python.lint(str(folder), {"userspace": {"appCommon": "/x"}}, strict=True)
    return [f"helm lint: {m['error']}" for m in report["messages"] if m["severity"] >= 2]


@pytest.mark.parametrize("args,message", [
    (["--format", "olares"], "error: --format olares writes a chart: add --out DIR"),
    (["--out", "x"], "error: --out, --owner and --models-folder are --format olares's"),
    (["--format", "olares", "--out", "x", "--name", "Bad-Name"], "error: --name 'Bad-Name': an Olares app name"),
    (["--format", "olares", "--out", "x", "--name", "gpu"], "error: --name 'gpu': an Olares app name"),
    (["--format", "olares", "--out", "x", "--models-folder", "../up"], "error: models folder '../up'"),
])
def test_olares_errors_are_one_line(tmp_path, models, args, message):
    (tmp_path / "buildkit.toml").write_text("schema_version = 1\n")
    with use_engine(engine_with_image()):
        result = CliRunner().invoke(main, ["run", "--config", str(tmp_path / "buildkit.toml"), "--image",
                                           f"{IMAGE}:cuda13.1-sm120", "--model", str(models[0]), *args,
                                           "--", "-ngl", "99"])
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1].startswith(message), result.output


def test_the_model_and_the_draft_need_two_names(tmp_path, models):
    twin = tmp_path / "twin"
    twin.mkdir()
    (twin / models[0].name).write_bytes(models[1].read_bytes())
    (tmp_path / "buildkit.toml").write_text("schema_version = 1\n")
    with use_engine(engine_with_image()):
        result = CliRunner().invoke(main, ["run", "--config", str(tmp_path / "buildkit.toml"), "--image",
                                           f"{IMAGE}:cuda13.1-sm120", "--model", str(models[0]), "--model-draft",
                                           str(twin / models[0].name), "--format", "olares", "--out", str(tmp_path),
                                           "--", "--spec-type", "dflash"])
    assert result.exit_code == 1 and "both named qwen35-tiny.gguf" in result.output
