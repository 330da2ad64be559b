"""`docker buildx build` argv -> a `docker buildx bake` file (bake's JSON form, docker-bake.json).

One target per variant. Variants of the same platform stay separate targets: buildx picks
builder nodes by platform, so only separate targets can land on separate nodes of a remote or
Kubernetes builder (`--builder`).

Each target is a translation of the exact `docker buildx build` argv that `buildkit build` runs
(`buildx.buildx_argv`), so bake and build cannot drift apart, and a flag bake cannot express is an
error rather than silently dropped. When the build goes through the reproducible OCI exporter
(`--output type=oci,dest=...,rewrite-timestamp=true`, see buildx.py), so does each bake target: its
archive carries the variant's tags as image names and is `docker load`-ed after the bake.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from buildkit.core.errors import BuildError

if TYPE_CHECKING:
    from buildkit.engine.buildx import BuildOptions

_SKIPPED_FLAGS = {"--metadata-file", "--progress", "--builder"}  # bake-level, given to `buildx bake` itself
_BOOLEAN_FLAGS = {"--load": ("output", "type=docker"), "--push": ("output", "type=registry"),
                  "--no-cache": ("no-cache", True), "--pull": ("pull", True)}
_LIST_FLAGS = {"--platform": "platforms", "--tag": "tags", "--cache-from": "cache-from", "--cache-to": "cache-to",
               "--output": "output", "--secret": "secret", "--ssh": "ssh", "--attest": "attest",
               "--annotation": "annotations"}
_MAP_FLAGS = {"--build-arg": "args", "--label": "labels", "--build-context": "contexts"}
_SCALAR_FLAGS = {"--target": "target", "--file": "dockerfile", "--network": "network", "--shm-size": "shm-size"}


def bake_target_from_argv(argv: Sequence[str]) -> dict:
    """The bake target that builds what `docker buildx build ARGV` builds."""
    args = list(argv)
    try:
        start = args.index("build") + 1
    except ValueError:
        raise BuildError(f"not a buildx build command: {' '.join(args[:4])}") from None
    target: dict = {}
    context: str | None = None
    i = start
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            if context is not None:
                raise BuildError(f"two build contexts in the buildx command: {context} and {arg}")
            context = arg
            i += 1
            continue
        flag, eq, inline = arg.partition("=")
        if flag in _BOOLEAN_FLAGS:
            field, value = _BOOLEAN_FLAGS[flag]
            if field == "output":
                target.setdefault("output", []).append(value)
            else:
                target[field] = value
            i += 1
            continue
        if eq:
            value, i = inline, i + 1
        else:
            if i + 1 >= len(args):
                raise BuildError(f"buildx flag {flag} has no value")
            value, i = args[i + 1], i + 2
        if flag in _SKIPPED_FLAGS:
            continue
        if flag in ("--provenance", "--sbom"):
            kind = flag[2:]
            low = value.strip().lower()
            attest = (f"type={kind},disabled=true" if low in ("false", "0") else
                      f"type={kind}" + ("" if low in ("true", "1", "") else "," + value))
            target.setdefault("attest", []).append(attest)
            continue
        if flag in _LIST_FLAGS:
            parts = value.split(",") if flag == "--platform" else [value]
            target.setdefault(_LIST_FLAGS[flag], []).extend(parts)
        elif flag in _MAP_FLAGS:
            name, sep, val = value.partition("=")
            if not sep:
                raise BuildError(f"buildx {flag} {value!r} is not NAME=VALUE")
            target.setdefault(_MAP_FLAGS[flag], {})[name] = val
        elif flag in _SCALAR_FLAGS:
            target[_SCALAR_FLAGS[flag]] = value
        else:
            raise BuildError(f"the buildx flag {flag} has no bake equivalent known to buildkit; "
                             "build this variant with `buildkit build` instead")
    if context is None:
        raise BuildError("the buildx command has no build context")
    target["context"] = context
    dockerfile = target.get("dockerfile")
    if dockerfile:
        try:  # bake reads a relative dockerfile against the context
            target["dockerfile"] = str(Path(dockerfile).relative_to(context))
        except ValueError:
            pass
    return target


def _csv_fields(value: str) -> list[str]:
    return next(csv.reader([value]))


def _csv_join(fields: Sequence[str]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(fields)
    return buf.getvalue()


def oci_dest(target: dict) -> str | None:
    """The archive an OCI exporter of this target writes (the reproducible path), else None."""
    for output in target.get("output", []):
        fields = dict(f.split("=", 1) for f in _csv_fields(output) if "=" in f)
        if fields.get("type") == "oci" and fields.get("dest"):
            return fields["dest"]
    return None


def retag(target: dict, tags: Sequence[str]) -> dict:
    """The target with these local tags: bake's tags, and the image names an OCI archive carries
    (which `docker load` turns into tags) when the build goes through the OCI exporter."""
    target = dict(target)
    outputs = []
    for output in target.get("output", []):
        fields = _csv_fields(output)
        if any(f == "type=oci" for f in fields):
            fields = [f for f in fields if not f.startswith("name=")] + ["name=" + ",".join(tags)]
            output = _csv_join(fields)
        outputs.append(output)
    if outputs:
        target["output"] = outputs
    if oci_dest(target) is None:
        target["tags"] = list(tags)
    else:
        target.pop("tags", None)  # the OCI exporter names the image itself
    return target


def target_tags(target: dict) -> tuple[str, ...]:
    """The local tags a target's image gets (bake tags, or the names in its OCI output)."""
    if target.get("tags"):
        return tuple(target["tags"])
    for output in target.get("output", []):
        for field in _csv_fields(output):
            if field.startswith("name="):
                return tuple(n for n in field[5:].split(",") if n)
    return ()


def bake_document(targets: dict[str, dict], group: str = "default") -> dict:
    """The docker-bake.json document: a default group naming every target."""
    return {"group": {group: {"targets": list(targets)}}, "target": dict(targets)}


def write_bake_file(path: Path, document: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    return path


def bake_argv(bake_file: Path, names: Sequence[str], options: BuildOptions, metadata_file: Path) -> list[str]:
    argv = [options.docker, "buildx", "bake"]
    if options.builder:
        argv += ["--builder", options.builder]
    argv += ["--file", str(bake_file), "--metadata-file", str(metadata_file), "--progress", options.progress]
    return argv + list(names)
