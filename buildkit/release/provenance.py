"""SLSA provenance v1 of a built image (issue 38): an in-toto Statement v1 (in-toto-attestation, the in-toto
project's own model and validator) whose subject is the pushed digest.

Generated from the input declarations, not written again by hand: every input a lock entry holds
(plan/inputs.py's inputs declared `lock`) is a parameter of the predicate, in its lock form: the request's
own choices under externalParameters, what buildkit decided under internalParameters; the inputs that are
artifacts are resolvedDependencies besides (the fork as git+URL@commit, a local one git+file:///path@commit; the
patch set and each patch with its own sha256; the template; each base image by digest; each CUDA wheel by
sha256; each Debian package of the build stage by purl, with its version and architecture).
docs/provenance.md documents the buildType and each field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import STATEMENT_TYPE_URI as STATEMENT_TYPE
from in_toto_attestation.v1.statement import Statement

import buildkit
from buildkit.core.giturls import vcs_uri
from buildkit.core.printable import printable
from buildkit.plan.inputs import INPUTS
from buildkit.release.lock import LockEntry, entry_dict
from buildkit.release.sbom import DebPackage, OsRelease, deb_purl

PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://github.com/llama-buildkit/buildkit/buildtypes/image/v1"
BUILDER_ID = "https://github.com/llama-buildkit/buildkit"

# The lock's inputs the user chose (buildkit.toml, the command line); every other lock input is internal.
EXTERNAL = frozenset({"source_url", "commit", "version", "arch", "cuda_version", "variant", "target", "cpu_level",
                      "platform", "no_vmm", "patches"})
# What the build produced and reproduce needs besides the inputs: internal parameters too.
PRODUCED_INPUTS = ("template", "dockerfile_sha256", "cmake_archs", "build_key")
_ABSENT = object()  # a parameter a signed statement lacks (never equal to a value)


def lock_input_names() -> tuple[str, ...]:
    return tuple(i.name for i in INPUTS if i.lock)


@dataclass(frozen=True)
class RunDetails:
    invocation_id: str
    started_on: str  # RFC 3339: when the build began and ended (the lock's build_started, build_finished); ""
    finished_on: str  # where not known, and then left out
    builder_commit: str = ""


def run_details(entry: LockEntry, invocation_id: str) -> RunDetails:
    """The run of entry's build: its times as the lock carries them (into a later push too); "" (left out of the
    statement) where the lock has none, never the signing time."""
    return RunDetails(invocation_id, entry.build_started, entry.build_finished)


def _dependencies(data: Mapping[str, Any]) -> list[ResourceDescriptor]:
    deps = [ResourceDescriptor(uri=vcs_uri(str(data["source_url"]), str(data["commit"])),
                               digest={"sha1": data["commit"]}, name="llama.cpp fork")]
    if data.get("patch_set_sha256"):
        deps.append(ResourceDescriptor(name="patch set", digest={"sha256": data["patch_set_sha256"]},
                                       annotations={"patches": list(data.get("patches") or [])}))
    digests = list(data.get("patch_sha256") or [])
    for position, (name, digest) in enumerate(zip(data.get("patches") or [], digests, strict=False), start=1):
        deps.append(ResourceDescriptor(name=str(name), digest={"sha256": str(digest)},
                                       annotations={"kind": "patch", "position": position}))
    deps += build_stage_packages(data.get("debian_packages"))
    if data.get("template_sha256"):
        deps.append(ResourceDescriptor(name=f"template {data.get('template', '')}".strip(),
                                       digest={"sha256": data["template_sha256"]}))
    if data.get("dockerfile_sha256"):
        deps.append(ResourceDescriptor(name="Dockerfile", digest={"sha256": data["dockerfile_sha256"]}))
    for ref, digest in (tuple(b.values()) if isinstance(b, dict) else tuple(b) for b in data.get("base_images") or []):
        algorithm, _, hexpart = str(digest).partition(":")
        deps.append(ResourceDescriptor(uri=f"docker://{ref}", digest={algorithm: hexpart} if hexpart else None,
                                       name="base image"))
    for wheel in (data.get("cuda_root") or {}).get("wheels") or []:
        name = wheel.get("filename") or wheel.get("package") or "CUDA wheel"
        deps.append(ResourceDescriptor(name=str(name), uri=str(wheel.get("url", "")),
                                       digest={"sha256": str(wheel["sha256"])}))
    return deps


def build_stage_packages(record: Any) -> list[ResourceDescriptor]:
    """The build stage's Debian packages of a lock entry's debian_packages, each with its purl (name, version,
    architecture, the stage's vendor and distro): the compilers and libraries the binaries were built with."""
    if not isinstance(record, Mapping) or not isinstance(record.get("build"), Mapping):
        return []
    archs = (record.get("architectures") or {}).get("build") or {}
    found = (record.get("os") or {}).get("build") or {}
    release = OsRelease(str(found.get("id") or ""), str(found.get("version_id") or ""))
    out = []
    for key, version in sorted(record["build"].items()):
        package = DebPackage(str(key).split(":")[0], str(version), str(archs.get(key) or ""))
        out.append(ResourceDescriptor(name=package.name, uri=deb_purl(package, release).to_string(),
                                      annotations={"kind": "build-stage package", "version": package.version,
                                                   "architecture": package.architecture}))
    return out


def run_metadata(run: RunDetails) -> dict[str, str]:
    """runDetails.metadata: the invocation, and the build's times where they are known (never made up)."""
    metadata = {"invocationId": run.invocation_id}
    metadata.update({k: v for k, v in (("startedOn", run.started_on), ("finishedOn", run.finished_on)) if v})
    return metadata


def build_definition(entry: LockEntry) -> dict[str, Any]:
    """The predicate's buildDefinition of the image built as entry describes (JSON-ready): what a verifier
    compares with a lock entry, field by field (definition_differences)."""
    data = entry_dict(entry)
    names = lock_input_names()
    external = {name: data[name] for name in names if name in EXTERNAL}
    internal = {name: data[name] for name in names if name not in EXTERNAL}
    internal.update({name: data[name] for name in PRODUCED_INPUTS if name in data})
    definition: dict[str, Any] = _plain({
        "buildType": BUILD_TYPE, "externalParameters": external, "internalParameters": internal,
        "resolvedDependencies": [json_format.MessageToDict(d.pb) for d in _dependencies(data)]})
    return definition


def provenance_statement(entry: LockEntry, digest: str, image_name: str, run: RunDetails) -> bytes:
    """The statement (JSON bytes) for the image digest built as entry describes."""
    builder: dict[str, Any] = {"id": BUILDER_ID, "version": {"llama-buildkit": buildkit.__version__}}
    if run.builder_commit:
        builder["version"]["commit"] = run.builder_commit
    predicate = {
        "buildDefinition": build_definition(entry),
        "runDetails": {"builder": builder, "metadata": run_metadata(run)},
    }
    algorithm, _, hexpart = digest.partition(":")
    subject = ResourceDescriptor(name=image_name, digest={algorithm: hexpart})
    predicate = _plain(predicate)
    Statement([subject.pb], PREDICATE_TYPE, predicate).validate()  # the library's check of the statement
    # written from the dict itself: protobuf's Struct would turn every integer into a float
    document = {"_type": STATEMENT_TYPE, "subject": [json_format.MessageToDict(subject.pb)],
                "predicateType": PREDICATE_TYPE, "predicate": predicate}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


INDEX_BUILD_TYPE = "https://github.com/llama-buildkit/buildkit/buildtypes/index/v1"


def index_build_definition(image_name: str, platforms: Sequence[tuple[str, str]], *, commit: str,
                           version: str) -> dict[str, Any]:
    """The buildDefinition of a multi-platform index over platforms ((platform, manifest digest), in order)."""
    name = image_name.rsplit("@", 1)[0]
    external = {"platforms": [p for p, _ in platforms], "commit": commit, "version": version}
    deps = [ResourceDescriptor(uri=f"docker://{name}@{d}", digest={"sha256": d.partition(":")[2]}, name=p)
            for p, d in platforms]
    definition: dict[str, Any] = _plain({"buildType": INDEX_BUILD_TYPE, "externalParameters": external,
                                         "resolvedDependencies": [json_format.MessageToDict(d.pb) for d in deps]})
    return definition


def index_provenance_statement(image_name: str, digest: str, platforms: Sequence[tuple[str, str]], *,
                               commit: str, version: str, run: RunDetails) -> bytes:
    """The statement of a multi-platform index: assembled, byte for byte, from its platforms' images, each a
    resolved dependency by digest (each image carries its own provenance, from its lock entry's inputs)."""
    builder: dict[str, Any] = {"id": BUILDER_ID, "version": {"llama-buildkit": buildkit.__version__}}
    predicate = _plain({
        "buildDefinition": index_build_definition(image_name, platforms, commit=commit, version=version),
        "runDetails": {"builder": builder, "metadata": run_metadata(run)},
    })
    algorithm, _, hexpart = digest.partition(":")
    subject = ResourceDescriptor(name=image_name, digest={algorithm: hexpart})
    Statement([subject.pb], PREDICATE_TYPE, predicate).validate()
    document = {"_type": STATEMENT_TYPE, "subject": [json_format.MessageToDict(subject.pb)],
                "predicateType": PREDICATE_TYPE, "predicate": predicate}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _plain(value: Any) -> Any:
    """JSON-ready (tuples as lists), for protobuf's Struct."""
    return json.loads(json.dumps(value))


def signed_definition(statement: Any) -> dict[str, Any] | None:
    """The buildDefinition of a signed statement, when it has one that is an object (a predicate that is null,
    a list or a string has none)."""
    predicate = statement.get("predicate") if isinstance(statement, dict) else None
    definition = predicate.get("buildDefinition") if isinstance(predicate, dict) else None
    return definition if isinstance(definition, dict) else None


def definition_differences(statement: Any, expected: Mapping[str, Any],
                           ignore: frozenset[str] = frozenset()) -> list[str]:
    """Each field of the signed statement's buildDefinition that is not the expected one, by name
    ("externalParameters.commit", "resolvedDependencies[3] (base image)"); a parameter the expected definition
    does not have is one too ("externalParameters.x (unknown)": SLSA's verifiers reject unknown external
    parameters). ignore: parameter names left out of the comparison. [] when they agree."""
    definition = signed_definition(statement)
    if definition is None:
        return ["predicate.buildDefinition (missing, or not an object)"]
    differ = [] if definition.get("buildType") == expected.get("buildType") else ["buildType"]
    for part in ("externalParameters", "internalParameters"):
        if part not in expected and part not in definition:
            continue
        got, want = definition.get(part), expected.get(part) or {}
        if not isinstance(got, dict):
            differ.append(f"{part} (not an object)")
            continue
        differ += [f"{part}.{name}" for name in want if name not in ignore and got.get(name, _ABSENT) != want[name]]
        differ += [f"{part}.{printable(str(name))[:60]} (unknown)" for name in got if name not in want]
    got_deps, want_deps = definition.get("resolvedDependencies"), expected.get("resolvedDependencies") or []
    if not isinstance(got_deps, list):
        differ.append("resolvedDependencies (not a list)")
    elif len(got_deps) != len(want_deps):
        differ.append(f"resolvedDependencies ({len(got_deps)}, not {len(want_deps)})")
    else:
        differ += [f"resolvedDependencies[{i}] ({printable(str(w.get('name', '')))[:60]})"
                   for i, (g, w) in enumerate(zip(got_deps, want_deps, strict=True)) if g != w]
    return differ
