"""What a build is made of (pure): one model, `BuildInputs`, with one serialiser and one parser.

Every other form of a build's inputs is derived from it:

* the image labels: `to_labels` writes the OCI and org.llama-buildkit.* labels and the inputs label
  (JSON of what no other label carries); `from_labels` reads them back into an equal model;
* the build key (buildkey.py hashes `key_fields`);
* the lock entry's input fields (`lock_fields`; release/lock.py adds what the build produced), read
  back by `from_lock_entry`;
* reproduce's record (flows/reproduce.py), which holds a model.

A new input is one field here and its place in `to_labels` / `from_labels` (and `key_fields` in
buildkey.py when it changes the image's content).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping

from buildkit.core.errors import InputsError

if TYPE_CHECKING:
    from buildkit.plan.buildplan import BuildPlan, BuildRequest, SourceFacts

LABEL_PREFIX = "org.llama-buildkit."
OCI = "org.opencontainers.image."
BUILD_KEY_LABEL = LABEL_PREFIX + "build-key"
INPUTS_LABEL = LABEL_PREFIX + "inputs"
INPUTS_FORMAT = 1


@dataclass(frozen=True)
class BaseImage:
    ref: str
    digest: str  # repo digest where known, else the local image id, else ""


@dataclass(frozen=True)
class BuildInputs:
    """Every input of one build: what decides the image's content, and the options that shape it."""
    source_url: str
    commit: str
    build_number: int
    patches: tuple[str, ...]
    patch_set_sha256: str
    template_sha256: str
    tool_version: str
    source_date_epoch: int
    arch: str
    cuda_version: str | None
    target: str
    platform: str
    cpu_level: str
    variant: str  # derived from arch, CUDA version and CPU level; recorded as a label
    no_vmm: bool
    cmake_args: tuple[str, ...]  # every -D flag given to CMake
    extra_cmake_args: tuple[str, ...]  # the ones build.cmake_args added
    provider: str  # nvidia | wheels | cpu
    devel_image: str
    runtime_image: str
    jobs: int
    ccache: bool
    version: str
    title: str
    licenses: str
    base_images: tuple[BaseImage, ...] = ()  # with the digests they had; () before they are resolved
    cuda_wheels: tuple[str, ...] | None = None  # sha256 of each CUDA wheel (provider wheels), sorted
    cublas: bool | None = None  # whether the CUDA root holds cuBLAS (provider wheels)
    cpu_host: str | None = None  # cpu_level native: the build machine's CPU
    build_platform: str | None = None  # a cross build: where its compile ran (None: on the target platform)
    user: str = ""  # build.user (NAME:UID) the image runs as; "" = root

    # ------------------------------------------------------------------ labels (the serialiser)

    def plan_labels(self) -> tuple[tuple[str, str], ...]:
        """The labels every image carries, known from the config and the source alone."""
        return (
            (OCI + "source", self.source_url),
            (OCI + "revision", self.commit),
            (OCI + "version", self.version),
            (OCI + "created", oci_created(self.source_date_epoch)),
            (OCI + "title", self.title),
            (OCI + "licenses", self.licenses),
            (LABEL_PREFIX + "arch", self.arch),
            (LABEL_PREFIX + "cuda-version", self.cuda_version or "none"),
            (LABEL_PREFIX + "variant", self.variant),
            (LABEL_PREFIX + "target", self.target),
            (LABEL_PREFIX + "cpu-level", self.cpu_level),
            (LABEL_PREFIX + "flags", " ".join(self.cmake_args)),
            (LABEL_PREFIX + "build-number", str(self.build_number)),
            (LABEL_PREFIX + "patch-set", self.patch_set_sha256),
            (LABEL_PREFIX + "template", self.template_sha256),
            (LABEL_PREFIX + "tool-version", self.tool_version),
        )

    def record(self) -> dict:
        """The inputs label's document: every input the other labels do not carry."""
        record = {
            "format": INPUTS_FORMAT,
            "base_images": [[b.ref, b.digest] for b in self.base_images],
            "devel_image": self.devel_image,
            "runtime_image": self.runtime_image,
            "provider": self.provider,
            "platform": self.platform,
            "jobs": self.jobs,
            "ccache": self.ccache,
            "no_vmm": self.no_vmm,
            "cpu_level": self.cpu_level,
            "extra_cmake_args": list(self.extra_cmake_args),
            "patches": list(self.patches),
            "cuda_wheels": None if self.cuda_wheels is None else list(self.cuda_wheels),
            "cublas": self.cublas,
        }
        if self.cpu_host is not None:
            record["cpu_host"] = self.cpu_host
        if self.build_platform is not None:
            record["build_platform"] = self.build_platform
        if self.user:
            record["user"] = self.user
        return record

    def record_label(self) -> tuple[str, str]:
        return INPUTS_LABEL, json.dumps(self.record(), sort_keys=True, separators=(",", ":"))

    def to_labels(self, build_key: str = "") -> dict[str, str]:
        """Every label that records this build's inputs (and its build key, when given)."""
        labels = dict(self.plan_labels())
        if build_key:
            labels[BUILD_KEY_LABEL] = build_key
        labels.update((self.record_label(),))
        return labels

    # ------------------------------------------------------------------ the lock entry's fields

    def lock_fields(self) -> dict[str, Any]:
        """The fields of a lock entry (release/lock.py LockEntry) that are inputs."""
        return dict(source_url=self.source_url, commit=self.commit, build_number=self.build_number,
                    patches=self.patches, patch_set_sha256=self.patch_set_sha256,
                    template_sha256=self.template_sha256, base_images=self.base_images,
                    cuda_version=self.cuda_version, arch=self.arch, target=self.target, platform=self.platform,
                    no_vmm=self.no_vmm, cmake_args=self.cmake_args, source_date_epoch=self.source_date_epoch,
                    tool_version=self.tool_version, version=self.version, cpu_level=self.cpu_level,
                    variant=self.variant)


def oci_created(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def cuda_wheel_hashes(manifest: dict | None) -> list[str] | None:
    """The sha256 of every wheel a provider-wheels CUDA root was laid out from."""
    if manifest is None:
        return None
    return sorted(w.get("sha256", "") for w in manifest.get("wheels", []) if isinstance(w, dict))


def _cublas(provider: str, manifest: dict | None) -> bool | None:
    if manifest is None or provider != "wheels" or "wheels" not in manifest:
        return None
    return any(str(w.get("package", "")).startswith("nvidia-cublas") for w in manifest["wheels"] if isinstance(w, dict))


def request_inputs(request: "BuildRequest", source: "SourceFacts", *, template_sha256: str, tool_version: str,
                   cmake_args: tuple[str, ...]) -> BuildInputs:
    """The inputs known before the base images and the CUDA root are resolved."""
    return BuildInputs(
        source_url=source.url, commit=source.commit, build_number=source.build_number,
        patches=tuple(source.patch_names), patch_set_sha256=source.patch_set_sha256,
        template_sha256=template_sha256, tool_version=tool_version, source_date_epoch=source.commit_time,
        arch=request.arch.name, cuda_version=request.cuda_version, target=request.target,
        platform=request.platform, cpu_level=request.cpu_level.name, variant=request.variant,
        no_vmm=request.no_vmm, cmake_args=tuple(cmake_args), extra_cmake_args=tuple(request.extra_cmake_args),
        provider=request.provider, devel_image=request.devel_image, runtime_image=request.runtime_image,
        jobs=request.jobs, ccache=request.ccache, version=request.version, title=request.title,
        licenses=request.licenses, build_platform=request.build_platform if request.cross else None,
        user=request.user)


def plan_inputs(plan: "BuildPlan", base_images=(), cuda_manifest: dict | None = None,
                cpu_host: str | None = None) -> BuildInputs:
    """Every input of a planned build, once its base images (with digests) and CUDA root are known.
    cpu_host: for cpu_level native, the build machine's CPU (its code depends on it)."""
    from dataclasses import replace

    inputs = request_inputs(plan.request, plan.source, template_sha256=plan.template_sha256,
                            tool_version=plan.tool_version, cmake_args=plan.cmake_args)
    wheels = cuda_wheel_hashes(cuda_manifest)
    return replace(inputs, base_images=tuple(base_images), cuda_wheels=None if wheels is None else tuple(wheels),
                   cublas=_cublas(plan.request.provider, cuda_manifest), cpu_host=cpu_host)


# --------------------------------------------------------------------------- the parser

# The keys of the inputs label and what each must be (absent or null: the field that needs it says so).
_INPUT_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "format": ((int,), "an integer"), "base_images": ((list,), "a list of [ref, digest] pairs"),
    "devel_image": ((str,), "a string"), "runtime_image": ((str,), "a string"), "provider": ((str,), "a string"),
    "platform": ((str,), "a string"), "jobs": ((int,), "an integer"), "ccache": ((bool,), "true or false"),
    "no_vmm": ((bool,), "true or false"), "extra_cmake_args": ((list,), "a list of strings"),
    "patches": ((list,), "a list of strings"), "cuda_wheels": ((list,), "a list of strings"),
    "cublas": ((bool,), "true or false"), "image_name": ((str,), "a string"), "cpu_host": ((str,), "a string"),
    "cpu_level": ((str,), "a string"), "build_platform": ((str,), "a string"), "user": ((str,), "a string"),
}


def _record_of(labels: Mapping[str, str], where: str) -> dict:
    text = labels.get(INPUTS_LABEL)
    if not text:
        raise InputsError(f"{where} has no {INPUTS_LABEL} label (built by a buildkit without reproducible "
                          "builds); the inputs jobs, ccache, provider and base image digests are missing")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise InputsError(f"{where}: the {INPUTS_LABEL} label is not JSON") from None
    if not isinstance(data, dict):
        raise InputsError(f"{where}: the {INPUTS_LABEL} label is not a JSON object")
    for key, (kinds, expect) in _INPUT_TYPES.items():
        value = data.get(key)
        ok = value is None or (isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds))
        if ok and isinstance(value, list) and key != "base_images":
            ok = all(isinstance(v, str) for v in value)
        if ok and isinstance(value, list) and key == "base_images":
            ok = all(isinstance(p, list) and len(p) == 2 and all(isinstance(v, str) for v in p) for p in value)
        if not ok:
            raise InputsError(f"{where}: the {INPUTS_LABEL} label's key {key!r} must be {expect}, "
                              f"got {type(value).__name__}")
    return data


def need(data: Mapping[str, Any], key: str, where: str, what: str | None = None) -> Any:
    """data[key], or an InputsError naming the missing input."""
    value = data.get(key)
    if value is None or value == "":
        raise InputsError(f"{where}: the recorded input {what or key} is missing")
    return value


def _int(value: Any, where: str, name: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InputsError(f"{where}: the label {name} must be an integer, got {str(value)[:40]!r}") from None


def _epoch(created: str) -> int:
    try:
        return int(datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp())
    except (TypeError, ValueError):
        raise InputsError(f"the created label {created!r} is not a UTC time of the form 2024-01-02T00:00:00Z") \
            from None


def parse_bases(pairs: Any, where: str) -> tuple[BaseImage, ...]:
    """Base images from the inputs label ([ref, digest] pairs) or a lock entry ({ref, digest} objects)."""
    if not isinstance(pairs, (list, tuple)) or not pairs:
        raise InputsError(f"{where}: the recorded input base images is missing")
    out = []
    for pair in pairs:
        ref, digest = (pair.get("ref"), pair.get("digest")) if isinstance(pair, dict) else tuple(pair)
        out.append(BaseImage(ref=ref, digest=digest))
    return tuple(out)


def split_flags(text: str) -> tuple[str, ...]:
    """The flags label back into CMake's arguments: each starts with -D, and a value may hold spaces
    (-DCMAKE_CUDA_FLAGS=-Xcudafe=... -Xcicc=..., a cross CUDA build's), so it is split before each -D."""
    return tuple(a.strip() for a in re.split(r"\s+(?=-D)", text.strip()) if a.strip())


def from_labels(labels: Mapping[str, str], where: str) -> BuildInputs:
    """The model from an image's labels (to_labels' output, or a pushed image's config)."""
    if not isinstance(labels, Mapping):
        raise InputsError(f"{where}: the labels must be an object of strings, got {type(labels).__name__}")
    for name, value in labels.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InputsError(f"{where}: the label {str(name)[:80]!r} must be a string, got {type(value).__name__}")
    record = _record_of(labels, where)

    def label(name: str, what: str) -> str:
        return need(labels, name, where, what)

    cuda = labels.get(LABEL_PREFIX + "cuda-version")
    wheels = record.get("cuda_wheels")
    return BuildInputs(
        source_url=label(OCI + "source", "source URL"), commit=label(OCI + "revision", "commit"),
        build_number=_int(label(LABEL_PREFIX + "build-number", "build number"), where, LABEL_PREFIX + "build-number"),
        patches=tuple(record.get("patches") or ()),
        patch_set_sha256=label(LABEL_PREFIX + "patch-set", "patch set hash"),
        template_sha256=label(LABEL_PREFIX + "template", "template hash"),
        tool_version=label(LABEL_PREFIX + "tool-version", "tool version"),
        source_date_epoch=_epoch(label(OCI + "created", "created time (SOURCE_DATE_EPOCH)")),
        arch=label(LABEL_PREFIX + "arch", "arch"), cuda_version=None if cuda in (None, "", "none") else cuda,
        target=label(LABEL_PREFIX + "target", "target"), platform=need(record, "platform", where),
        cpu_level=labels.get(LABEL_PREFIX + "cpu-level") or record.get("cpu_level") or "all",
        variant=labels.get(LABEL_PREFIX + "variant", ""), no_vmm=bool(need(record, "no_vmm", where)),
        cmake_args=split_flags(label(LABEL_PREFIX + "flags", "CMake flags")),
        extra_cmake_args=tuple(record.get("extra_cmake_args") or ()),
        provider=need(record, "provider", where), devel_image=need(record, "devel_image", where),
        runtime_image=need(record, "runtime_image", where), jobs=int(need(record, "jobs", where)),
        ccache=bool(need(record, "ccache", where)), version=label(OCI + "version", "version"),
        title=labels.get(OCI + "title", ""), licenses=labels.get(OCI + "licenses", ""),
        base_images=parse_bases(record.get("base_images"), where),
        cuda_wheels=None if wheels is None else tuple(wheels), cublas=record.get("cublas"),
        cpu_host=record.get("cpu_host"), build_platform=record.get("build_platform"), user=record.get("user") or "")


def from_lock_entry(entry: Mapping[str, Any], where: str) -> BuildInputs:
    """The model from a lock entry: its own fields, and the labels it kept for the rest (they must
    be there: a lock written before labels were recorded lacks jobs, ccache and provider)."""
    from dataclasses import replace

    labels = entry.get("labels") or {}
    if not labels:
        raise InputsError(f"{where} has no recorded labels (written by a buildkit without reproducible builds); "
                          "the inputs jobs, ccache and provider are missing")
    inputs = from_labels(labels, where)
    inputs = replace(
        inputs, source_url=need(entry, "source_url", where, "source URL"), commit=need(entry, "commit", where),
        build_number=entry.get("build_number"),
        patch_set_sha256=need(entry, "patch_set_sha256", where, "patch set hash"),
        patches=tuple(entry.get("patches") or ()),
        template_sha256=need(entry, "template_sha256", where, "template hash"),
        base_images=parse_bases(entry.get("base_images"), where), cuda_version=entry.get("cuda_version"),
        arch=need(entry, "arch", where), target=need(entry, "target", where),
        platform=need(entry, "platform", where), no_vmm=bool(entry.get("no_vmm")),
        cmake_args=tuple(entry.get("cmake_args") or ()),
        source_date_epoch=int(need(entry, "source_date_epoch", where, "SOURCE_DATE_EPOCH")),
        tool_version=need(entry, "tool_version", where, "tool version"),
        version=entry.get("version") or inputs.version)
    if entry.get("cuda_root") and isinstance(entry["cuda_root"], dict):
        inputs = replace(inputs, cuda_wheels=tuple(cuda_wheel_hashes(entry["cuda_root"]) or ()))
    return inputs
