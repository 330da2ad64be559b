"""A `docker buildx bake` file (bake's JSON form, docker-bake.json) of build specs, and reading one back.

One target per variant. Variants of the same platform stay separate targets: buildx picks
builder nodes by platform, so only separate targets can land on separate nodes of a remote or
Kubernetes builder (`--builder`).

Each target is made from the same BuildSpec that `buildkit build` runs (specs.py), field by field,
so bake and build cannot drift apart. When the build goes through the reproducible OCI exporter
(`--output type=oci,dest=...,rewrite-timestamp=true`, see buildx.py), so does each bake target: its
archive carries the variant's tags as image names and is `docker load`-ed after the bake.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from buildkit.core.wholefile import write_whole
from buildkit.engine.dockerargv import annotation_values, spec_outputs
from buildkit.engine.specs import BuildSpec


def bake_target(spec: BuildSpec) -> dict[str, Any]:
    """The bake target that builds what `docker buildx build` builds for spec."""
    target: dict[str, Any] = {}
    if spec.platform:
        target["platforms"] = spec.platform.split(",")
    if spec.target:
        target["target"] = spec.target
    pairs = (("args", spec.build_args), ("labels", spec.labels))
    target.update({key: dict(values) for key, values in pairs if values})
    if spec.annotations:
        target["annotations"] = annotation_values(spec)
    if spec.tags and spec.oci_archive is None:  # else the OCI exporter names the image itself
        target["tags"] = list(spec.tags)
    lists = (("contexts", dict(spec.named_contexts)), ("cache-from", list(spec.cache_from)),
             ("cache-to", list(spec.cache_to)))
    target.update({key: values for key, values in lists if values})
    if spec.provenance is not None:
        target["attest"] = ["type=provenance" if spec.provenance else "type=provenance,disabled=true"]
    if spec.no_cache:
        target["no-cache"] = True
    outputs = spec_outputs(spec)
    if spec.oci_archive is None:
        outputs += ["type=docker"] * spec.load + ["type=registry"] * spec.push
    if outputs:
        target["output"] = outputs
    try:  # bake reads a relative dockerfile against the context
        target["dockerfile"] = str(Path(spec.dockerfile).relative_to(spec.context))
    except ValueError:
        target["dockerfile"] = str(spec.dockerfile)
    target["context"] = str(spec.context)
    return target


def _csv_fields(value: str) -> list[str]:
    return next(csv.reader([value]))


def oci_dest(target: dict[str, Any]) -> str | None:
    """The archive an OCI exporter of this target writes (the reproducible path), else None."""
    for output in target.get("output", []):
        fields = dict(f.split("=", 1) for f in _csv_fields(output) if "=" in f)
        if fields.get("type") == "oci" and fields.get("dest"):
            return fields["dest"]
    return None


def target_tags(target: dict[str, Any]) -> tuple[str, ...]:
    """The local tags a target's image gets (bake tags, or the names in its OCI output)."""
    if target.get("tags"):
        return tuple(target["tags"])
    for output in target.get("output", []):
        for field in _csv_fields(output):
            if field.startswith("name="):
                return tuple(n for n in field[5:].split(",") if n)
    return ()


def bake_document(targets: dict[str, dict[str, Any]], group: str = "default") -> dict[str, Any]:
    """The docker-bake.json document: a default group naming every target."""
    return {"group": {group: {"targets": list(targets)}}, "target": dict(targets)}


def write_bake_file(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, json.dumps(document, indent=2, sort_keys=False) + "\n")
    return path
