"""`buildkit reproduce`: rebuild a recorded build with exactly its inputs and compare digests.

The record is a lock entry (buildkit.lock) or the labels of an image (pushed, or in the local
engine). Both become a `Recorded`: commit, patch set (hash and names), template hash, base images
with digests, CUDA version and wheels, arch, CMake flags, SOURCE_DATE_EPOCH, tool version and the
options that shape the Dockerfile (jobs, ccache, provider, VMM).

Before building, every input is checked against what is here now: the patch files must hash to the
recorded patch set, the templates to the recorded template hash, the base images must be at their
recorded digests, the CUDA wheels must be the recorded ones, and the fetched commit must have the
recorded committer time. A mismatch, or an input the record lacks, is an error naming it; only a
different tool version is a warning. The rebuild runs from a clean state (`--no-cache`; ccache as
recorded, which for a reproducible build is off) through the OCI exporter with rewrite-timestamp
and without provenance, into an archive; nothing in the engine or the lock changes.

Same manifest digest: reproduced. Otherwise the original is opened (the local engine's copy, else
the registry's) and `imagediff` says which layers and, inside them, which files differ.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from buildkit import __version__
from buildkit.engine.baseimages import engine_digest
from buildkit.plan.buildkey import cuda_wheel_hashes
from buildkit.engine.buildx import BuildOptions, buildx_argv, check_buildx, run_build
from buildkit.plan.config import ResolvedConfig, load_config
from buildkit.core.errors import BuildkitError, ReproduceError
from buildkit.oci.imagediff import ImageDiff, diff_images
from buildkit.oci.imageref import name_of
from buildkit.release.lock import BaseImage, read_lock
from buildkit.engine.api import get_engine
from buildkit.oci.ocilayout import OciArchive, open_image
from buildkit.source.patches import load_patch_queue
from buildkit.flows.pipeline import INPUTS_LABEL, _cuda_manifest, patch_dir, prepare
from buildkit.plan.buildplan import BUILD_KEY_LABEL, LABEL_PREFIX, make_request
from buildkit.plan.render import templates_sha256

OCI = "org.opencontainers.image."
REPRODUCE_NAME = "buildkit-reproduce"  # the image name is not an input (the rebuild is never tagged)


@dataclass(frozen=True)
class Recorded:
    """Every input of one recorded build, and what it produced."""
    origin: str  # "lock FILE (KEY)" or "image REF"
    source_url: str
    commit: str
    build_number: int | None
    patch_set_sha256: str
    patches: tuple[str, ...] | None
    template_sha256: str
    base_images: tuple[BaseImage, ...]
    cuda_version: str | None
    cuda_wheels: tuple[str, ...] | None
    cublas: bool | None
    arch: str
    target: str
    platform: str
    no_vmm: bool
    cmake_args: tuple[str, ...]
    extra_cmake_args: tuple[str, ...]
    source_date_epoch: int
    tool_version: str
    image_name: str
    version: str
    title: str
    licenses: str
    provider: str
    devel_image: str
    runtime_image: str
    jobs: int
    ccache: bool
    image_digest: str  # what the recorded build produced (manifest digest)
    originals: tuple[str, ...] = ()  # where the recorded image can be read: image specs for open_image
    dockerfile_sha256: str = ""
    build_key: str = ""
    labels: dict = field(default_factory=dict)
    cpu_level: str = "all"  # build.cpu_level (label org.llama-buildkit.cpu-level)


@dataclass
class ReproduceResult:
    recorded: Recorded
    digest: str  # of the rebuild
    archive: Path | None
    warnings: list[str]
    diff: ImageDiff | None = None
    original: str = ""  # what the rebuild was compared with, when it differs

    @property
    def reproduced(self) -> bool:
        return self.digest == self.recorded.image_digest

    def report(self) -> str:
        lines = [f"recorded: {self.recorded.origin}", f"  image {self.recorded.image_digest}",
                 f"rebuilt:  {self.digest}"]
        if self.archive is not None:
            lines.append(f"  archive {self.archive}")
        if self.reproduced:
            lines.append("reproduced: the rebuild has the recorded manifest digest, bit for bit")
            return "\n".join(lines)
        lines.append("NOT reproduced: the manifest digests differ")
        if self.diff is not None:
            lines.append(self.diff.report())
        else:
            lines.append(f"the recorded image itself is not available to compare files ({self.original})")
        return "\n".join(lines)


# --------------------------------------------------------------------------- reading a record

def _epoch(created: str) -> int:
    try:
        return int(datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp())
    except (TypeError, ValueError):
        raise ReproduceError(f"the created label {created!r} is not a UTC time of the form 2024-01-02T00:00:00Z") \
            from None


def _inputs(labels: Mapping[str, str], where: str) -> dict:
    text = labels.get(INPUTS_LABEL)
    if not text:
        raise ReproduceError(f"{where} has no {INPUTS_LABEL} label (built by a buildkit without reproducible "
                             "builds); the inputs jobs, ccache, provider and base image digests are missing")
    try:
        data = json.loads(text)
    except ValueError:
        raise ReproduceError(f"{where}: the {INPUTS_LABEL} label is not JSON") from None
    if not isinstance(data, dict):
        raise ReproduceError(f"{where}: the {INPUTS_LABEL} label is not a JSON object")
    for key, (kinds, expect) in _INPUT_TYPES.items():
        value = data.get(key)
        ok = value is None or (isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds))
        if ok and isinstance(value, list) and key != "base_images":
            ok = all(isinstance(v, str) for v in value)
        if ok and isinstance(value, list) and key == "base_images":
            ok = all(isinstance(p, list) and len(p) == 2 and all(isinstance(v, str) for v in p) for p in value)
        if not ok:
            raise ReproduceError(f"{where}: the {INPUTS_LABEL} label's key {key!r} must be {expect}, "
                                 f"got {type(value).__name__}")
    return data


# The keys of the inputs label and what each must be (absent or null: the check that needs it says so).
_INPUT_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "format": ((int,), "an integer"), "base_images": ((list,), "a list of [ref, digest] pairs"),
    "devel_image": ((str,), "a string"), "runtime_image": ((str,), "a string"), "provider": ((str,), "a string"),
    "platform": ((str,), "a string"), "jobs": ((int,), "an integer"), "ccache": ((bool,), "true or false"),
    "no_vmm": ((bool,), "true or false"), "extra_cmake_args": ((list,), "a list of strings"),
    "patches": ((list,), "a list of strings"), "cuda_wheels": ((list,), "a list of strings"),
    "cublas": ((bool,), "true or false"), "image_name": ((str,), "a string"),
}


def _int_label(value: str, where: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ReproduceError(f"{where}: the label {name} must be an integer, got {value[:40]!r}") from None


def _need(data: Mapping[str, Any], key: str, where: str, what: str | None = None) -> Any:
    value = data.get(key)
    if value is None or value == "":
        raise ReproduceError(f"{where}: the recorded input {what or key} is missing")
    return value


def _bases(pairs: Any, where: str) -> tuple[BaseImage, ...]:
    if not isinstance(pairs, list) or not pairs:
        raise ReproduceError(f"{where}: the recorded input base images is missing")
    out = []
    for pair in pairs:
        ref, digest = (pair.get("ref"), pair.get("digest")) if isinstance(pair, dict) else tuple(pair)
        if not digest:
            raise ReproduceError(f"{where}: base image {ref} was recorded without a digest; it cannot be rebuilt "
                                 "exactly")
        out.append(BaseImage(ref=ref, digest=digest))
    return tuple(out)


def from_labels(labels: Mapping[str, str], where: str, *, image_digest: str, originals: tuple[str, ...] = ()) \
        -> Recorded:
    """A record from an image's labels (every input is a label; the rest is in the inputs label)."""
    if not isinstance(labels, Mapping):
        raise ReproduceError(f"{where}: the labels must be an object of strings, got {type(labels).__name__}")
    for name, value in labels.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ReproduceError(f"{where}: the label {str(name)[:80]!r} must be a string, got {type(value).__name__}")
    inputs = _inputs(labels, where)
    lab = {k: v for k, v in labels.items()}

    def label(name: str, what: str) -> str:
        return _need(lab, name, where, what)

    cuda = lab.get(LABEL_PREFIX + "cuda-version")
    return Recorded(
        origin=where, source_url=label(OCI + "source", "source URL"), commit=label(OCI + "revision", "commit"),
        build_number=_int_label(label(LABEL_PREFIX + "build-number", "build number"), where,
                                LABEL_PREFIX + "build-number"),
        patch_set_sha256=label(LABEL_PREFIX + "patch-set", "patch set hash"),
        patches=tuple(inputs["patches"]) if isinstance(inputs.get("patches"), list) else None,
        template_sha256=label(LABEL_PREFIX + "template", "template hash"),
        base_images=_bases(inputs.get("base_images"), where),
        cuda_version=None if cuda in (None, "", "none") else cuda,
        cuda_wheels=tuple(inputs["cuda_wheels"]) if inputs.get("cuda_wheels") is not None else None,
        cublas=inputs.get("cublas"),
        arch=label(LABEL_PREFIX + "arch", "arch"), target=label(LABEL_PREFIX + "target", "target"),
        platform=_need(inputs, "platform", where), no_vmm=bool(_need(inputs, "no_vmm", where)),
        cmake_args=tuple(label(LABEL_PREFIX + "flags", "CMake flags").split()),
        extra_cmake_args=tuple(inputs.get("extra_cmake_args") or ()),
        source_date_epoch=_epoch(label(OCI + "created", "created time (SOURCE_DATE_EPOCH)")),
        tool_version=label(LABEL_PREFIX + "tool-version", "tool version"),
        image_name=inputs.get("image_name") or REPRODUCE_NAME, version=label(OCI + "version", "version"),
        title=lab.get(OCI + "title", ""), licenses=lab.get(OCI + "licenses", ""),
        provider=_need(inputs, "provider", where), devel_image=_need(inputs, "devel_image", where),
        runtime_image=_need(inputs, "runtime_image", where), jobs=int(_need(inputs, "jobs", where)),
        ccache=bool(_need(inputs, "ccache", where)),
        image_digest=image_digest, originals=originals, build_key=lab.get(BUILD_KEY_LABEL, ""), labels=dict(lab),
        cpu_level=lab.get(LABEL_PREFIX + "cpu-level") or inputs.get("cpu_level") or "all",
    )


def select_entry(builds: Mapping[str, dict], key: str | None, path: Path) -> tuple[str, dict]:
    if key:
        if key not in builds:
            raise ReproduceError(f"{path} has no build {key!r}; it has: {', '.join(builds) or 'none'}")
        return key, builds[key]
    if len(builds) == 1:
        return next(iter(builds.items()))
    if not builds:
        raise ReproduceError(f"{path} records no build")
    raise ReproduceError(f"{path} records {len(builds)} builds; choose one with --build "
                         f"({', '.join(builds)})")


def from_lock(path: Path, key: str | None = None) -> Recorded:
    """A record from a lock entry: its fields, and the labels it recorded for the rest."""
    if not path.is_file():
        raise ReproduceError(f"{path}: no such lock file")
    data = read_lock(path)
    key, entry = select_entry(data["builds"], key, path)
    where = f"lock {path} ({key})"
    labels = entry.get("labels") or {}
    if not labels:
        raise ReproduceError(f"{where} has no recorded labels (written by a buildkit without reproducible builds); "
                             "the inputs jobs, ccache and provider are missing")
    digest = _need(entry, "image_digest", where, "image digest")
    originals = [f"docker:{entry['image_id']}"] if entry.get("image_id") else []
    for ref in entry.get("pushed") or ():
        spec = f"registry:{name_of(ref)}@{digest}"
        if spec not in originals:
            originals.append(spec)
    rec = from_labels(labels, where, image_digest=digest, originals=tuple(originals))
    # The lock's own fields are the record; they must agree with the labels it kept.
    bases = _bases(entry.get("base_images"), where)
    rec = replace(rec, source_url=_need(entry, "source_url", where, "source URL"),
                  commit=_need(entry, "commit", where, "commit"), build_number=entry.get("build_number"),
                  patch_set_sha256=_need(entry, "patch_set_sha256", where, "patch set hash"),
                  patches=tuple(entry.get("patches") or ()),
                  template_sha256=_need(entry, "template_sha256", where, "template hash"), base_images=bases,
                  cuda_version=entry.get("cuda_version"), arch=_need(entry, "arch", where),
                  target=_need(entry, "target", where), platform=_need(entry, "platform", where),
                  no_vmm=bool(entry.get("no_vmm")), cmake_args=tuple(entry.get("cmake_args") or ()),
                  source_date_epoch=int(_need(entry, "source_date_epoch", where, "SOURCE_DATE_EPOCH")),
                  tool_version=_need(entry, "tool_version", where, "tool version"),
                  image_name=_need(entry, "image_name", where, "image name"), version=entry.get("version") or rec.version,
                  dockerfile_sha256=entry.get("dockerfile_sha256", ""), build_key=entry.get("build_key", ""))
    if entry.get("cuda_root") and isinstance(entry["cuda_root"], dict):
        rec = replace(rec, cuda_wheels=tuple(cuda_wheel_hashes(entry["cuda_root"]) or ()))
    return rec


def from_image(spec: str, platform: str = "linux/amd64") -> Recorded:
    """A record from the labels of an image (registry reference, local engine image or OCI archive)."""
    with ExitStack() as stack:
        image = open_image(spec, stack, platform=platform, engine=get_engine())
        return from_labels(image.labels, f"image {spec}", image_digest=image.manifest_digest,
                           originals=(spec,))


def load_record(target: str, key: str | None = None) -> Recorded:
    """LOCK file or IMAGE reference."""
    path = Path(target).expanduser()
    if path.is_file():
        # A lock is JSON (it starts with "{"); an OCI archive is a tar. A damaged lock is still a lock:
        # its error names it, rather than "not a tar archive".
        with path.open("rb") as fh:
            head = fh.read(512).lstrip()
        if head.startswith(b"{") or path.suffix == ".lock":
            return from_lock(path, key)
    return from_image(target)


# --------------------------------------------------------------------------- checks and the rebuild

def overrides_for(rec: Recorded, source: str | None = None, patches: str | None = None) -> dict[str, tuple[Any, str]]:
    """Config overrides that make the resolved config exactly the recorded build."""
    o: dict[str, tuple[Any, str]] = {
        "source.url": (source or rec.source_url, "recorded"),
        "source.commit": (rec.commit, "recorded"),
        "build.arch": (rec.arch, "recorded"),
        "build.target": (rec.target, "recorded"),
        "build.platform": (rec.platform, "recorded"),
        "build.no_vmm": (rec.no_vmm, "recorded"),
        "build.jobs": (rec.jobs, "recorded"),
        "build.ccache": (rec.ccache, "recorded"),
        "build.cpu_level": (rec.cpu_level, "recorded"),
        "build.cmake_args": (list(rec.extra_cmake_args), "recorded"),
        "image.name": (rec.image_name, "recorded"),
        "image.version": (rec.version, "recorded"),
        "image.title": (rec.title, "recorded"),
        "image.licenses": (rec.licenses, "recorded"),
    }
    if rec.cuda_version:
        o["build.cuda_version"] = (rec.cuda_version, "recorded")
    if rec.provider == "nvidia":
        o["base.provider"] = ("nvidia", "recorded")
        o["base.devel_image"] = (rec.devel_image, "recorded")
        o["base.runtime_image"] = (rec.runtime_image, "recorded")
    else:
        o["base.os_image"] = (rec.devel_image, "recorded")
        if rec.provider == "wheels":
            o["base.provider"] = ("wheels", "recorded")
            if rec.cublas is not None:
                o["base.cublas"] = (bool(rec.cublas), "recorded")
    if patches:
        o["source.patch_dir"] = (patches, "--patches")
    return o


def check_inputs(rec: Recorded, cfg: ResolvedConfig, stream=None) -> list[str]:
    """Compare what is here with the record before any work; errors stop, warnings are returned
    (and written to stream as they are found, so a warning is seen even when an error follows)."""
    warnings = []
    if rec.tool_version != __version__:
        warnings.append(f"the build was recorded by buildkit {rec.tool_version}, this is {__version__}")
        (stream or sys.stderr).write(f"warning: {warnings[-1]}\n")
        (stream or sys.stderr).flush()
    here = templates_sha256()
    if here != rec.template_sha256:
        raise ReproduceError(f"the templates here hash to {here[:12]}, the recorded build used {rec.template_sha256[:12]}; "
                             f"use the templates of buildkit {rec.tool_version}")
    queue = load_patch_queue(patch_dir(cfg))
    if queue.sha256 != rec.patch_set_sha256:
        names = ", ".join(p.name for p in queue.files) or "none"
        recorded = f" ({', '.join(rec.patches) or 'no patches'})" if rec.patches is not None else ""
        raise ReproduceError(f"the patch set in {patch_dir(cfg)} ({names}) hashes to {queue.sha256[:12]}, the recorded "
                             f"one{recorded} to {rec.patch_set_sha256[:12]}; point --patches at the recorded patches")
    for base in rec.base_images:
        now = engine_digest(base.ref)
        if now != base.digest and get_engine().image_id(f"{name_of(base.ref)}@{base.digest}") is None:
            raise ReproduceError(f"base image {base.ref} is {now or 'not in the engine'}, the recorded build used "
                                 f"{base.digest}; make that digest available (docker pull {base.ref}@{base.digest})")
    return warnings


def _check_prepared(rec: Recorded, prepared, cuda_hashes: list[str] | None) -> list[str]:
    warnings = []
    source, plan = prepared.source, prepared.plan
    if source.commit != rec.commit:
        raise ReproduceError(f"the source resolved to {source.commit}, not the recorded {rec.commit}")
    if source.commit_time != rec.source_date_epoch:
        raise ReproduceError(f"commit {rec.commit[:12]} has committer time {source.commit_time}; the recorded "
                             f"SOURCE_DATE_EPOCH is {rec.source_date_epoch}")
    if tuple(plan.cmake_args) != tuple(rec.cmake_args):
        only_here = [a for a in plan.cmake_args if a not in rec.cmake_args]
        only_rec = [a for a in rec.cmake_args if a not in plan.cmake_args]
        raise ReproduceError(f"the CMake flags differ from the recorded ones (here only: {' '.join(only_here) or '-'}; "
                             f"recorded only: {' '.join(only_rec) or '-'})")
    if rec.cuda_wheels is not None and cuda_hashes is not None and sorted(rec.cuda_wheels) != sorted(cuda_hashes):
        raise ReproduceError("the CUDA toolkit wheels laid out here are not the recorded ones "
                             f"({len(set(cuda_hashes) - set(rec.cuda_wheels))} differ); the recorded CUDA root is "
                             "needed (base.cuda_root)")
    if rec.cuda_wheels is not None and cuda_hashes is None:
        raise ReproduceError("the recorded build used CUDA wheels, but no wheel manifest is available here")
    if rec.dockerfile_sha256 and prepared.rendered.dockerfile_sha256 != rec.dockerfile_sha256:
        warnings.append("the rendered Dockerfile differs from the recorded one although every recorded input "
                        "matches")
    if rec.build_key and prepared.build_key != rec.build_key:
        warnings.append(f"the build key is {prepared.build_key[:12]}, the recorded one {rec.build_key[:12]}")
    return warnings


def reproduce(rec: Recorded, *, config_path: Path | None = None, env: Mapping[str, str] | None = None,
              source: str | None = None, patches: str | None = None, keep: Path | None = None,
              use_cache: bool = False, provenance: bool = False, compare: bool = True, stream=None,
              docker: str = "docker") -> ReproduceResult:
    """Rebuild rec with its inputs into an OCI archive and compare manifest digests."""
    env = os.environ if env is None else env
    cfg = load_config(config_path, env, overrides_for(rec, source, patches))
    request = make_request(cfg)
    stream = sys.stderr if stream is None else stream
    warnings = check_inputs(rec, cfg, stream)
    check_buildx(docker)
    with tempfile.TemporaryDirectory(prefix="buildkit-reproduce-") as tmp:
        prepared = prepare(cfg, Path(tmp) / "context", request=request)
        more = _check_prepared(rec, prepared, cuda_wheel_hashes(_cuda_manifest(prepared.cuda_root)))
        for warning in more:
            stream.write(f"warning: {warning}\n")
        warnings += more
        archive = (keep / "reproduced.oci.tar") if keep else Path(tmp) / "reproduced.oci.tar"
        if keep:
            keep.mkdir(parents=True, exist_ok=True)
        options = BuildOptions(builder=cfg["build.builder"], progress=cfg["build.progress"], reproducible=True,
                               load=False, no_cache=not use_cache, provenance=provenance, oci_archive=archive,
                               docker=docker)
        metadata = Path(tmp) / "metadata.json"
        argv = buildx_argv(prepared.plan, prepared.rendered, options, metadata)
        built = run_build(argv, metadata, (), stream=stream, oci_archive=archive, load=False, docker=docker)
        result = ReproduceResult(recorded=rec, digest=built.digest, archive=archive if keep else None,
                                 warnings=warnings)
        if result.reproduced or not compare:
            return result
        result.diff, result.original = compare_with_original(rec, archive)
        return result


def compare_with_original(rec: Recorded, archive: Path) -> tuple[ImageDiff | None, str]:
    """Diff the recorded image (the first of its originals that can be read) against the rebuild."""
    tried = []
    for spec in rec.originals:
        with ExitStack() as stack:
            try:
                original = open_image(spec, stack, platform=rec.platform, engine=get_engine())
            except BuildkitError as exc:
                tried.append(f"{spec}: {exc}")
                continue
            if original.manifest_digest != rec.image_digest:
                tried.append(f"{spec} is {original.manifest_digest[:19]}, not the recorded image")
                continue
            rebuilt = stack.enter_context(OciArchive(archive)).image(rec.platform, source=f"rebuild {archive.name}")
            return diff_images(original, rebuilt), spec
    return None, "; ".join(tried) or "no local or pushed copy was recorded"
