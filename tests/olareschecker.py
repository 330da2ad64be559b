"""Olares' checker (beclab/oachecker at 4ea0dbd) re-implemented on a chart folder and its rendered objects,
for the tests of `buildkit run --format olares` (issue 50 item 3).

The chart is linted and rendered offline with Helm's own library (helm-python-sdk, a test extra), with the
values Olares injects at install (oachecker's dummy values, plus `userspace.appCommon`, which the GPU apps of
the market read). Then every rule of oachecker's Lint is checked, and the ones the market's GPU apps show:

* folder.go: the folder name is `[a-z0-9]{1,30}` and not reserved; Chart.yaml has apiVersion, name and version;
  values.yaml, templates/ and OlaresManifest.yaml exist; the names (folder, Chart.yaml, metadata) and the
  versions (metadata, Chart.yaml) agree;
* app.go's validation tags: olaresManifest.version set; metadata name 1-30, icon, description, title 1-30,
  version set; 1 to 10 entrances, each name `[a-zA-Z0-9-]*` (at most 63), host a DNS label, port > 0, title
  1-30 of letters, digits, spaces and '-'; resource quantities well formed;
* manifest.go: supportArch is not empty and each is one it knows; entrance names are unique; a template that
  uses .Values.userspace.appdata needs permission.appData (and, the same way, appCommon);
* resource.go: every container of a Deployment or StatefulSet sets cpu and memory requests and limits,
  requests <= limits; the sums within the manifest's envelope, required <= limited; one Deployment or
  StatefulSet named metadata.name. oachecker at 4ea0dbd reads the envelope at spec only; the market's
  0.12.0 GPU apps put it in spec.accelerator[] (mode nvidia), so every envelope the manifest gives is held;
* the market's GPU apps: the gpu-inject annotation; nvidia.com/gpumem a bare integer of MiB, the same in
  requests and limits, within the envelope's GPU memory; an entrance names a Service's host and port.

check_chart() answers the list of broken rules (empty: the chart passes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import helm_python
import yaml

ARCHS = {"amd64", "arm32v5", "arm32v6", "arm32v7", "arm64v8", "i386", "ppc64le", "s390x", "mips64le", "riscv64",
         "windows-amd64", "arm64"}
RESERVED = {"user", "system", "space", "default", "os", "kubesphere", "kube", "kubekey", "kubernetes", "gpu",
            "tapr", "bfl", "bytetrade", "project", "pod"}
QUANTITY = re.compile(r"^(?:\d+(?:\.\d+)?(?:[eE][-+]?(\d+|i))?(?:[kKMGTP]?i?|[mMGTPE])?|[kKMGTP]i|[mMGTPE])$")
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])$")
_SUFFIX = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
NAMESPACE = "app-namespace"


def injected_values(manifest: dict[str, Any]) -> dict[str, Any]:
    """The values Olares gives a chart at install: oachecker's dummy values, and userspace.appCommon."""
    return {
        "bfl": {"username": "bfl-username"}, "admin": "bfl-username", "user": {"zone": "user-zone"},
        "schedule": {"nodeName": "node"},
        "userspace": {"appdata": "appdata", "data": "userspace/Home", "appCommon": "/olares/userdata/Cache/common"},
        "os": {"appKey": "appKey", "appSecret": "appSecret"},
        "domain": {e["name"]: "random-string" for e in manifest.get("entrances") or []},
        "dep": {}, "postgres": {"databases": {}}, "redis": {}, "mongodb": {"databases": {}},
        "zinc": {"indexes": {}}, "mariadb": {"databases": {}}, "mysql": {"databases": {}},
        "minio": {"buckets": {}}, "rabbitmq": {"vhosts": {}}, "elasticsearch": {"indexes": {}},
        "nats": {"subjects": {}, "refs": {}}, "svcs": {}, "cluster": {}, "GPU": {},
        "oidc": {"client": {}, "issuer": "issuer"}, "olaresEnv": {},
    }


def quantity(text: Any) -> float:
    """A Kubernetes quantity as a number (cpu in cores, memory in bytes)."""
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(text))
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity: {text!r}")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


def render(folder: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """(lint errors, rendered objects) of the chart at folder, with the injected values."""
    manifest = yaml.safe_load((folder / "OlaresManifest.yaml").read_text())
    values = injected_values(manifest)
    report = helm_python.lint(str(folder), values, strict=True, namespace=NAMESPACE)
    errors = [m["error"] for m in report["messages"] if m["severity"] >= 2]
    with helm_python.Chart.load(folder) as chart:
        rendered = chart.render(values, name=folder.name, namespace=NAMESPACE, is_install=True)
    objects = [doc for text in rendered.values() for doc in yaml.safe_load_all(text) if doc]
    return errors, objects


def _containers(objects: Iterable[dict[str, Any]]) -> Iterable[tuple[dict[str, Any], dict[str, Any]]]:
    for obj in objects:
        if obj.get("kind") in ("Deployment", "StatefulSet"):
            for container in obj["spec"]["template"]["spec"].get("containers") or []:
                yield obj, container


def envelopes(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The envelopes the chart as rendered (GPU type nvidia, Olares' default) is held to: spec's, and the
    nvidia accelerator's (the nvidia-gb10 mode renders other requests: unified memory)."""
    found = [("spec", spec)] if any(k in spec for k in ("requiredMemory", "requiredCpu")) else []
    return found + [(f"spec.accelerator[{a.get('mode')}]", a) for a in spec.get("accelerator") or []
                    if a.get("mode") == "nvidia"]


def check_chart(folder: Path) -> list[str]:
    broken: list[str] = []
    name = folder.name
    if not re.fullmatch(r"[a-z0-9]{1,30}", name) or name in RESERVED:
        broken.append(f"folder name {name!r}")
    for needed in ("Chart.yaml", "values.yaml", "OlaresManifest.yaml"):
        if not (folder / needed).is_file():
            return broken + [f"missing {needed}"]
    if not (folder / "templates").is_dir():
        return broken + ["missing templates/"]
    chart = yaml.safe_load((folder / "Chart.yaml").read_text())
    manifest = yaml.safe_load((folder / "OlaresManifest.yaml").read_text())
    meta, spec = manifest.get("metadata") or {}, manifest.get("spec") or {}
    broken += [f"Chart.yaml has no {k}" for k in ("apiVersion", "name", "version") if not chart.get(k)]
    if not (chart.get("name") == name == meta.get("name")):
        broken.append(f"names differ: Chart.yaml {chart.get('name')}, folder {name}, manifest {meta.get('name')}")
    if str(meta.get("version")) != str(chart.get("version")):
        broken.append(f"versions differ: manifest {meta.get('version')}, Chart.yaml {chart.get('version')}")
    if not str(manifest.get("olaresManifest.version") or ""):
        broken.append("no olaresManifest.version")
    for key, most in (("name", 30), ("title", 30), ("icon", None), ("description", None), ("version", None)):
        value = str(meta.get(key) or "")
        if not value or (most and len(value) > most):
            broken.append(f"metadata.{key} {value!r}")
    entrances = manifest.get("entrances") or []
    if not 0 < len(entrances) <= 10:
        broken.append(f"{len(entrances)} entrances")
    for e in entrances:
        if not re.fullmatch(r"[a-z0-9A-Z-]*", str(e.get("name"))) or len(str(e.get("name"))) > 63:
            broken.append(f"entrance name {e.get('name')!r}")
        if not DNS_LABEL.match(str(e.get("host"))) or len(str(e.get("host"))) > 63:
            broken.append(f"entrance host {e.get('host')!r}")
        if not isinstance(e.get("port"), int) or e["port"] <= 0:
            broken.append(f"entrance port {e.get('port')!r}")
        if not re.fullmatch(r"[a-z0-9A-Z-\s]{1,30}", str(e.get("title") or "")):
            broken.append(f"entrance title {e.get('title')!r}")
    if len({e.get("name") for e in entrances}) != len(entrances):
        broken.append("entrance names repeat")
    archs = spec.get("supportArch") or []
    if not archs or not set(archs) <= ARCHS:
        broken.append(f"supportArch {archs}")
    for where, env in envelopes(spec):
        for key in ("requiredMemory", "requiredDisk", "requiredCpu", "limitedMemory", "limitedCpu"):
            if not QUANTITY.match(str(env.get(key, ""))):
                broken.append(f"{where}.{key} {env.get(key)!r}")
    if not envelopes(spec):
        broken.append("no envelope (spec.requiredMemory... or spec.accelerator)")
    templates = " ".join(p.read_text() for p in (folder / "templates").rglob("*.yaml"))
    permission = manifest.get("permission") or {}
    for uses, flag in ((".Values.userspace.appdata", "appData"), (".Values.userspace.appCommon", "appCommon")):
        if uses in templates and not permission.get(flag):
            broken.append(f"templates use {uses} without permission.{flag}")
    errors, objects = render(folder)
    broken += [f"helm lint: {e}" for e in errors]
    broken += check_objects(objects, manifest)
    return broken


def check_objects(objects: list[dict[str, Any]], manifest: dict[str, Any]) -> list[str]:
    broken: list[str] = []
    spec, meta = manifest.get("spec") or {}, manifest.get("metadata") or {}
    sums = {"requests.cpu": 0.0, "requests.memory": 0.0, "limits.cpu": 0.0, "limits.memory": 0.0}
    gpu = []
    for obj, c in _containers(objects):
        where = f"{obj['kind']} {obj['metadata']['name']}, container {c['name']}"
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            for what in ("cpu", "memory"):
                value = (res.get(part) or {}).get(what)
                if value is None or quantity(value) == 0:
                    broken.append(f"{where} sets no {what} {part[:-1]}")
                else:
                    sums[f"{part}.{what}"] += quantity(value)
        for what in ("cpu", "memory"):
            ask, most = (res.get("requests") or {}).get(what), (res.get("limits") or {}).get(what)
            if ask is not None and most is not None and quantity(ask) > quantity(most):
                broken.append(f"{where} requests more {what} than its limit")
        asked = [(res.get(p) or {}).get("nvidia.com/gpumem") for p in ("requests", "limits")]
        if any(a is not None for a in asked):
            if not all(isinstance(a, int) for a in asked) or asked[0] != asked[1]:
                broken.append(f"{where}: nvidia.com/gpumem {asked} is not one bare MiB integer in requests and limits")
            elif "applications.app.bytetrade.io/gpu-inject" not in (obj["metadata"].get("annotations") or {}):
                broken.append(f"{where} asks for nvidia.com/gpumem without the gpu-inject annotation")
            else:
                gpu.append(int(asked[0] or 0) << 20)
    for where, env in envelopes(spec):
        for have, limit in (("limits.cpu", "limitedCpu"), ("limits.memory", "limitedMemory"),
                            ("requests.cpu", "requiredCpu"), ("requests.memory", "requiredMemory")):
            if sums[have] > quantity(env.get(limit, 0)):
                broken.append(f"the containers' {have} ({sums[have]:g}) is over {where}.{limit} ({env.get(limit)})")
        for low, high in (("requiredCpu", "limitedCpu"), ("requiredMemory", "limitedMemory")):
            if quantity(env.get(low, 0)) > quantity(env.get(high, 0)):
                broken.append(f"{where}.{low} is over its {high}")
        gpu_need = env.get("requiredGPUMemory") or (spec.get("requiredGpu") if where == "spec" else None)
        if gpu and gpu_need is not None and sum(gpu) > quantity(gpu_need):
            broken.append(f"nvidia.com/gpumem {sum(gpu) >> 20} MiB is over {where}'s GPU memory ({gpu_need})")
    declared = [e.get("requiredGPUMemory") or e.get("requiredGpu") for _, e in envelopes(spec)]
    if gpu and not any(declared):
        broken.append("the containers ask for nvidia.com/gpumem and no envelope declares GPU memory")
    if manifest.get("olaresManifest.type", "app") == "app" and not any(
            o.get("kind") in ("Deployment", "StatefulSet") and o["metadata"]["name"] == meta.get("name")
            for o in objects):
        broken.append(f"no Deployment or StatefulSet named {meta.get('name')}")
    services = {(o["metadata"]["name"], p["port"]) for o in objects if o.get("kind") == "Service"
                for p in o["spec"].get("ports") or []}
    for e in manifest.get("entrances") or []:
        if (e.get("host"), e.get("port")) not in services:
            broken.append(f"entrance {e.get('name')} names no Service port ({e.get('host')}:{e.get('port')})")
    return broken
