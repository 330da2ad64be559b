"""`buildkit run --format olares --out DIR`: an Olares Application Chart that serves a runtime profile (pure).

An Olares app is a Helm chart with an `OlaresManifest.yaml` beside its Chart.yaml (beclab/apps; Olares'
manifest specification). What is written, modelled on the market's GPU apps of the user's own family
(beclab/apps llamacppqwen3627bggufv3, ollamamuseglimmer30bdflashv3) and held to the rules of Olares'
checker (beclab/oachecker) by the tests:

* `OlaresManifest.yaml`: `olaresManifest.version` 0.12.0 with `apiVersion: v3` (the market's current
  form; `spec.accelerator[]` carries the GPU envelope, `requiredGPUMemory`/`limitedGPUMemory`), or the
  older 0.11.0 / v2 form the market still holds many apps in (`spec.requiredGpu`/`limitedGpu`); the CPU,
  memory and disk envelope at `spec` (what the checker reads) and, for 0.12.0, in the accelerator entry.
  `metadata.name` is `[a-z][a-z0-9]*`, at most 30 characters: the chart's folder and Chart.yaml name.
* `templates/llama-server.yaml`: a Deployment named as the app (the checker wants one), annotated
  `applications.app.bytetrade.io/gpu-inject` and asking for `nvidia.com/gpumem` (MiB, a bare integer) in
  requests and limits (Olares' webhook adds the GPU itself); the image by digest; the model and the
  draft model side by side in one hostPath folder under `.Values.userspace.appCommon` (values.yaml's
  `models.folder`), mounted read-only at /models; the profile's arguments (every `$` doubled for
  Kubernetes, every `{{` written so Helm gives it back); a startup probe on /health that allows 10
  minutes for the model to load; cpu and memory requests and limits. A Service and one entrance.
* an image built with `build.user` runs as a user that is not root: the manifest says `runAsUser: true`
  (Olares then runs the app as UID 1000) and the pod asks for that user (runAsUser/runAsGroup 1000,
  runAsNonRoot) with HOME=/tmp, since the image's home belongs to its own UID; llama-server only reads
  the models, which must be readable by UID 1000.
* `owners` and `i18n/{en-US,zh-CN}/OlaresManifest.yaml` stubs (the English texts, to translate).

Every file is a document of plain data dumped by PyYAML; the only Helm expressions are the values Olares
injects at install (`.Release.Namespace`, `.Values.userspace.appCommon`) and values.yaml's folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from buildkit.core.errors import ConfigError
from buildkit.plan.k8s import HEALTH_PATH, STARTUP_SECONDS, escaped
from buildkit.plan.profiles import CONTAINER_PORT, MODEL_DIR, ServerSpec

ManifestVersion = Literal["0.12.0", "0.11.0"]
MANIFEST_VERSIONS: tuple[ManifestVersion, ...] = ("0.12.0", "0.11.0")
GPU_INJECT = "applications.app.bytetrade.io/gpu-inject"
GPU_MEMORY_RESOURCE = "nvidia.com/gpumem"  # MiB, a bare integer (HAMi's unit)
OLARES_UID = 1000                           # what `runAsUser: true` makes Olares run an app as
DEFAULT_ICON = "https://app.cdn.olares.com/appstore/default/defaulticon.webp"
CONTAINER = "llama-server"
NAME = re.compile(r"[a-z][a-z0-9]{0,29}")
RESERVED = ("user", "system", "space", "default", "os", "kubesphere", "kube", "kubekey", "kubernetes", "gpu",
            "tapr", "bfl", "bytetrade", "project", "pod")  # oachecker's reserved folder names
TITLE = re.compile(r"[a-zA-Z0-9 -]{1,30}")   # an entrance title, as the checker takes it
MiB = 1 << 20
LOCALES = ("en-US", "zh-CN")


@dataclass(frozen=True)
class Resources:
    """One container's requests and limits, and the app's envelope made of them."""

    cpu_request: str = "1"
    cpu_limit: str = "4"
    memory_request: int = 0   # bytes
    memory_limit: int = 0
    gpu_memory: int = 0       # bytes the app needs of the GPU (requests = limits, as the webhook wants)
    gpu_limit: int = 0        # the GPU's memory, the envelope's limit (0: the same as gpu_memory)
    disk_request: str = "50Mi"
    disk_limit: str = "1Gi"


@dataclass(frozen=True)
class OlaresApp:
    name: str
    title: str
    description: str
    image: str              # by digest
    spec: ServerSpec
    resources: Resources
    version: str            # the chart's version (metadata.version, Chart.yaml version)
    version_name: str       # what it serves (spec.versionName, Chart.yaml appVersion)
    archs: tuple[str, ...]  # Olares' supportArch: the image's platform, as Docker names it
    source_code: str = ""
    non_root: bool = False  # the image runs as a user that is not root (build.user)
    owners: tuple[str, ...] = ()
    icon: str = DEFAULT_ICON
    manifest_version: ManifestVersion = "0.12.0"
    sizing: str = ""        # the estimate's lines, for the full description


def app_name(given: str, image: str, profile: str) -> str:
    """--name as given (checked), else the image's repository name and the profile made into one."""
    if given:
        if not NAME.fullmatch(given) or given in RESERVED:
            raise ConfigError(f"--name {given!r}: an Olares app name is 1 to 30 of a-z and 0-9, starting with a "
                              f"letter, and not one of {', '.join(RESERVED)}")
        return given
    repository = image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    text = re.sub(r"[^a-z0-9]", "", (repository + profile).lower()).lstrip("0123456789")[:30]
    return text if text and text not in RESERVED else "llamaserver"


def _mi(n: int) -> str:
    return f"{-(-n // MiB)}Mi"


def _helm_literal(text: str) -> str:
    """text as a Helm template gives it back: each `{{` written as an action that prints it."""
    return text.replace("{{", "{{`{{`}}")


def _mount_args(spec: ServerSpec) -> list[str]:
    """llama-server's arguments with both models read from the one folder at /models."""
    args = ["--host", "0.0.0.0", "--port", str(CONTAINER_PORT), "--model", f"{MODEL_DIR}/{spec.model.name}"]
    if spec.model_draft is not None:
        if spec.model_draft.name == spec.model.name:
            raise ConfigError(f"the model and the draft model are both named {spec.model.name}: an Olares app keeps "
                              "them side by side in one folder, so they need two names")
        args += ["--model-draft", f"{MODEL_DIR}/{spec.model_draft.name}"]
    return args + list(spec.args)


def deployment(app: OlaresApp) -> dict[str, Any]:
    r = app.resources
    labels = {"io.kompose.service": app.name, "app.kubernetes.io/name": CONTAINER}
    probe = {"httpGet": {"path": HEALTH_PATH, "port": "http"}, "periodSeconds": 10, "timeoutSeconds": 5}
    gpu_mib = -(-r.gpu_memory // MiB)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": _helm_literal(app.image),
        "imagePullPolicy": "IfNotPresent",
        "args": [_helm_literal(escaped(a)) for a in _mount_args(app.spec)],
        "ports": [{"name": "http", "containerPort": CONTAINER_PORT, "protocol": "TCP"}],
        "volumeMounts": [{"name": "models", "mountPath": MODEL_DIR, "readOnly": True}],
        "startupProbe": {**probe, "failureThreshold": STARTUP_SECONDS // 10},
        "readinessProbe": {**probe, "failureThreshold": 3},
        "livenessProbe": {**probe, "failureThreshold": 6},
        "resources": {
            "requests": {"cpu": r.cpu_request, "memory": _mi(r.memory_request), GPU_MEMORY_RESOURCE: gpu_mib},
            "limits": {"cpu": r.cpu_limit, "memory": _mi(r.memory_limit), GPU_MEMORY_RESOURCE: gpu_mib},
        },
    }
    pod: dict[str, Any] = {
        "containers": [container],
        "volumes": [{"name": "models", "hostPath": {
            "path": "{{ .Values.userspace.appCommon }}/{{ .Values.models.folder }}", "type": "DirectoryOrCreate"}}],
    }
    if app.non_root:
        container["env"] = [{"name": "HOME", "value": "/tmp"}]
        pod["securityContext"] = {"runAsUser": OLARES_UID, "runAsGroup": OLARES_UID, "runAsNonRoot": True}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app.name, "namespace": "{{ .Release.Namespace }}", "labels": labels,
                     "annotations": {GPU_INJECT: "true"}},
        "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": pod}},
    }


def service(app: OlaresApp) -> dict[str, Any]:
    labels = {"io.kompose.service": app.name, "app.kubernetes.io/name": CONTAINER}
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": service_name(app), "namespace": "{{ .Release.Namespace }}", "labels": labels},
            "spec": {"type": "ClusterIP", "selector": labels,
                     "ports": [{"name": "http", "port": CONTAINER_PORT, "targetPort": "http"}]}}


def service_name(app: OlaresApp) -> str:
    return f"{app.name}-svc"


def _envelope(r: Resources) -> dict[str, str]:
    return {"requiredCpu": r.cpu_request, "limitedCpu": r.cpu_limit, "requiredMemory": _mi(r.memory_request),
            "limitedMemory": _mi(r.memory_limit), "requiredDisk": r.disk_request, "limitedDisk": r.disk_limit}


def full_description(app: OlaresApp) -> str:
    lines = [f"{app.description}", "", f"Image: `{app.image}`", "",
             f"llama-server arguments: `{' '.join(app.spec.args)}`", "",
             f"Models: put `{app.spec.model.name}`"
             + (f" and `{app.spec.model_draft.name}`" if app.spec.model_draft else "")
             + " into the app-common folder named in values.yaml (models.folder).", ""]
    if app.sizing:
        lines += ["GPU memory, estimated from the models' GGUF headers:", "", "```", app.sizing, "```", ""]
    return "\n".join(lines)


def manifest(app: OlaresApp) -> dict[str, Any]:
    r = app.resources
    title = _title(app.title)
    required_gpu, limited_gpu = _mi(r.gpu_memory), _mi(max(r.gpu_limit, r.gpu_memory))
    spec: dict[str, Any] = {
        "versionName": app.version_name,
        "fullDescription": full_description(app),
        "upgradeDescription": f"{app.version}: {app.version_name}, written by buildkit for {app.image}",
        "developer": "llama-buildkit",
        "submitter": app.owners[0] if app.owners else "llama-buildkit",
        "locale": list(LOCALES),
        **({"sourceCode": app.source_code} if app.source_code else {}),
        **_envelope(r),
        "supportArch": list(app.archs),
        "onlyAdmin": True,
    }
    if app.non_root:
        spec["runAsUser"] = True
    document: dict[str, Any] = {
        "olaresManifest.version": app.manifest_version,
        "olaresManifest.type": "app",
        "apiVersion": "v3" if app.manifest_version == "0.12.0" else "v2",
        "metadata": {"name": app.name, "icon": app.icon, "description": app.description, "appid": app.name,
                     "title": title, "version": app.version, "categories": ["AI"]},
        "entrances": [{"name": app.name, "host": service_name(app), "port": CONTAINER_PORT, "title": title,
                       "icon": app.icon, "authLevel": "internal", "openMethod": "window"}],
        "permission": {"appCommon": True},
        "spec": spec,
        "options": {"apiTimeout": 0, "dependencies": [
            {"name": "olares", "type": "system",
             "version": ">=1.12.6-0" if app.manifest_version == "0.12.0" else ">=1.11.0-0"}]},
    }
    if app.manifest_version == "0.12.0":
        document["workloadReplicas"] = {app.name: 1}
        spec["accelerator"] = [{"mode": "nvidia", **_envelope(r), "requiredGPUMemory": required_gpu,
                                "limitedGPUMemory": limited_gpu}]
    else:
        spec["requiredGpu"], spec["limitedGpu"] = required_gpu, limited_gpu
    return document


def _title(text: str) -> str:
    """A title the checker takes (letters, digits, spaces and '-', at most 30)."""
    cleaned = " ".join(re.sub(r"[^a-zA-Z0-9 -]+", " ", text).split())[:30].strip()
    return cleaned if TITLE.fullmatch(cleaned or "-") else "llama-server"


class _Dumper(yaml.SafeDumper):  # type: ignore[misc]  # PyYAML ships no types
    """PyYAML's safe dumper without anchors (a label map used twice is written twice) and with text of
    several lines as a literal block."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _text)


def _dump(document: Any) -> str:
    return str(yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120))


def chart_files(app: OlaresApp, models_folder: str) -> dict[str, str]:
    """{path inside the chart folder: text} of the whole chart."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*", models_folder) or ".." in models_folder.split("/"):
        raise ConfigError(f"models folder {models_folder!r}: a relative path of letters, digits, '.', '_' and '-' "
                          "inside the app-common folder")
    docs = manifest(app)
    i18n = {"metadata": {"title": docs["metadata"]["title"], "description": app.description},
            "spec": {"fullDescription": docs["spec"]["fullDescription"],
                     "upgradeDescription": docs["spec"]["upgradeDescription"]}}
    files = {
        "Chart.yaml": _dump({"apiVersion": "v2", "name": app.name, "description": app.description,
                             "type": "application", "version": app.version, "appVersion": app.version_name,
                             "icon": app.icon}),
        "values.yaml": _dump({"models": {"folder": models_folder}}),
        "OlaresManifest.yaml": _dump(docs),
        "owners": _dump({"owners": list(app.owners)}),
        "templates/llama-server.yaml": str(yaml.dump_all([deployment(app), service(app)], Dumper=_Dumper,
                                                         sort_keys=False, allow_unicode=True, width=1 << 16)),
    }
    for locale in LOCALES:
        files[f"i18n/{locale}/OlaresManifest.yaml"] = _dump(i18n)
    return files
