"""`buildkit run --print --format k8s`: the Kubernetes objects that serve a runtime profile (pure).

The same server as `docker run` (profiles.ServerSpec): a Deployment of one llama-server container, the
image pinned by digest (a tag can move under a running Deployment), the profile's arguments, the
`nvidia.com/gpu` limit (NVIDIA's device plugin; GKE's driver installer mounts the driver under
/usr/local/nvidia, which the CUDA images keep in LD_LIBRARY_PATH), the model files from the volume
`models` (a PersistentVolumeClaim NAME-models that holds them, each mounted read-only where `docker
run` mounts it; the volume holds them as /models does: the model at its root, the draft under draft/,
so a draft of the model's file name has a subPath of its own), and probes on llama-server's /health:
a startup probe that allows 10 minutes for the model to load (/health answers 503 until then), then
readiness and liveness. A ClusterIP Service publishes the port. Both go out as one v1 List in JSON
(json.dumps), which `kubectl apply -f` takes and which is YAML too, so nothing needs a YAML library.
"""

from __future__ import annotations

import json
import re
from typing import Any

from buildkit.core.errors import ConfigError
from buildkit.oci.imageref import InvalidReference, parse_image_ref
from buildkit.plan.profiles import CONTAINER_PORT, MODEL_DIR, ServerSpec, gpu_device_requests, server_command

GPU_RESOURCE = "nvidia.com/gpu"
MODELS_VOLUME = "models"
HEALTH_PATH = "/health"
STARTUP_SECONDS = 600  # the startup probe's allowance for loading the model
# an RFC 1123 label (Deployment and Service names), matched whole: `$` would let a trailing newline through
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def object_name(name: str, profile: str) -> str:
    """--name as given (it must be an RFC 1123 label), else llama-server[-PROFILE] made into one."""
    if name:
        if not _NAME.fullmatch(name):
            raise ConfigError(f"--name {name!r}: a Kubernetes name is 1 to 63 of a-z, 0-9 and '-', "
                              "starting and ending with a letter or digit")
        return name
    text = re.sub(r"[^a-z0-9-]+", "-", f"llama-server-{profile}".lower() if profile else "llama-server")
    return text[:63].strip("-")


def pinned_image(ref: str, repo_digests: tuple[str, ...]) -> str:
    """ref by digest: as given when it has one, else the engine's repo digest of its repository."""
    try:
        parsed = parse_image_ref(ref)
    except InvalidReference as exc:
        raise ConfigError(f"--image {ref!r} is not a valid image reference ({exc.why})") from None
    if parsed.digest:
        return ref
    for candidate in repo_digests:
        try:
            if parse_image_ref(candidate).name == parsed.name:
                return candidate
        except InvalidReference:
            continue
    raise ConfigError(f"image {ref} has no digest in the local engine (not there, or the classic image store, "
                      "which has one only for images pushed or pulled): a cluster pulls it by digest, so push it "
                      "(buildkit build --push) or pass --image REPOSITORY@sha256:DIGEST")


def gpu_count(gpus: str) -> int:
    """The nvidia.com/gpu limit for a docker --gpus value: a count, the devices named, all = 1 (a pod
    asks for a number; raise it in the manifest for more)."""
    requests = gpu_device_requests(gpus)
    if not requests:
        return 0
    request = requests[0]
    return len(request["DeviceIDs"]) if request["DeviceIDs"] else max(request["Count"], 1)


def escaped(arg: str) -> str:
    """arg as Kubernetes gives it back after expanding args and env values: it turns $(VAR) into VAR's
    value and $$ into $, so every $ is written $$ ("pa$$word" reaches the server as pa$$word)."""
    return arg.replace("$", "$$")


def sub_path(inside: str) -> str:
    """The file's path in the models volume: its path under MODEL_DIR (target.gguf, draft/target.gguf)."""
    rel = inside.removeprefix(MODEL_DIR + "/")
    if rel == inside or any(part in ("", ".", "..") for part in rel.split("/")):
        raise ConfigError(f"{inside!r} is not a file under {MODEL_DIR}: give the model as a file path")
    return rel


def manifest(spec: ServerSpec, *, image: str, name: str, gpus: int) -> dict[str, Any]:
    """A v1 List: the Deployment (and a Service) serving spec with the image pinned by digest."""
    port = spec.host_port or CONTAINER_PORT
    labels = {"app.kubernetes.io/name": "llama-server", "app.kubernetes.io/instance": name}
    probe = {"httpGet": {"path": HEALTH_PATH, "port": "http"}, "periodSeconds": 10, "timeoutSeconds": 5}
    container = {
        "name": "llama-server",
        "image": image,
        "args": [escaped(a) for a in server_command(spec, port=port)],
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "volumeMounts": [{"name": MODELS_VOLUME, "mountPath": inside, "subPath": sub_path(inside),
                          "readOnly": True} for _, inside in spec.mounts()],
        "startupProbe": {**probe, "failureThreshold": STARTUP_SECONDS // 10},
        "readinessProbe": {**probe, "failureThreshold": 3},
        "livenessProbe": {**probe, "failureThreshold": 6},
    }
    if gpus:
        container["resources"] = {"limits": {GPU_RESOURCE: str(gpus)}}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [container],
                         "volumes": [{"name": MODELS_VOLUME, "persistentVolumeClaim": {
                             "claimName": f"{name}-models", "readOnly": True}}]},
            },
        },
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": labels, "ports": [{"name": "http", "port": port, "targetPort": "http"}]},
    }
    return {"apiVersion": "v1", "kind": "List", "items": [deployment, service]}


def manifest_text(spec: ServerSpec, *, image: str, name: str, gpus: int) -> str:
    return json.dumps(manifest(spec, image=image, name=name, gpus=gpus), indent=2)
