"""`buildkit reproduce`: rebuild a recorded build with exactly its inputs and compare digests.

The record is a lock entry (buildkit.lock) or the labels of an image (pushed, or in the local
engine). Both become a `Recorded` (record.py) holding the build's inputs (plan/inputs.py): commit,
patch set (hash and names), template hash, base images with digests, CUDA version and wheels, arch,
CMake flags, SOURCE_DATE_EPOCH, tool version and the options that shape the Dockerfile (jobs,
ccache, provider, VMM).

Before building, every input is checked against what is here now: the patch files must hash to the
recorded patch set, the templates to the recorded template hash, the base images must be at their
recorded digests, the CUDA wheels must be the recorded ones, and the fetched commit must have the
recorded committer time. A mismatch, or an input the record lacks, is an error naming it; only a
different tool version is a warning. The rebuild runs from a clean state: `--no-cache`, and where
the record used a ccache the compile still goes through ccache (its path rewriting is part of what
the compiler sees) but reads nothing from it (CCACHE_RECACHE: every object is compiled again), so
the proof never rests on objects the original build left in the cache. It goes through the OCI
exporter with rewrite-timestamp and without provenance, into an archive; nothing in the engine or
the lock changes. `--cache` allows both caches.

Same manifest digest: reproduced. Otherwise the original is opened (the local engine's copy, else
the registry's) and `imagediff` says which layers and, inside them, which files differ.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from buildkit import __version__
from buildkit.oci.ociindex import index_digest_of
from buildkit.engine.baseimages import local_digest
from buildkit.engine.buildx import check_buildx
from buildkit.core.errors import BuildkitError, ReproduceError
from buildkit.oci.imagediff import ImageDiff, diff_images
from buildkit.engine.api import Engine, Images, OutStream
from buildkit.oci.imagesource import open_image
from buildkit.oci.ocilayout import OciArchive
from buildkit.plan.inputs import cuda_wheel_hashes
from buildkit.flows.unit.buildspec import build_spec
from buildkit.flows.unit.pipeline import prepare
from buildkit.flows.unit.spec import UnitSpec
from buildkit.flows.reproduce.spec import ReproduceSpec
from buildkit.flows.reproduce.record import IndexRecorded, Recorded
from buildkit.oci.imageref import name_of
from buildkit.plan.buildplan import clean_ccache_id
from buildkit.plan.aptpins import pins_from_record
from buildkit.plan.render import templates_sha256
from buildkit.verify.buildfailure import run_build_explained

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


# --------------------------------------------------------------------------- checks and the rebuild

def check_inputs(rec: Recorded, spec: UnitSpec, engine: Images, stream: OutStream | None = None) -> list[str]:
    """Compare what is here with the record before any work; errors stop, warnings are returned
    (and written to stream as they are found, so a warning is seen even when an error follows)."""
    i = rec.inputs
    warnings = []
    if i.tool_version != __version__:
        warnings.append(f"the build was recorded by buildkit {i.tool_version}, this is {__version__}")
        (stream or sys.stderr).write(f"warning: {warnings[-1]}\n")
        (stream or sys.stderr).flush()
    here = templates_sha256()
    if here != i.template_sha256:
        raise ReproduceError(f"the templates here hash to {here[:12]}, the recorded build used "
                             f"{i.template_sha256[:12]}; "
                             f"use the templates of buildkit {i.tool_version}")
    patches = spec.patches
    queue = patches.load()
    if queue.sha256 != i.patch_set_sha256:
        names = ", ".join(queue.names) or "none"
        recorded = f" ({', '.join(i.patches) or 'no patches'})"
        raise ReproduceError(f"the patch set in {patches.folder} ({names}) hashes to {queue.sha256[:12]}, the recorded "
                             f"one{recorded} to {i.patch_set_sha256[:12]}; point --patches at the recorded patches")
    for base in i.base_images:
        now = local_digest(engine, base.ref)
        if now != base.digest and engine.image_id(f"{name_of(base.ref)}@{base.digest}") is None:
            raise ReproduceError(f"base image {base.ref} is {now or 'not in the engine'}, the recorded build used "
                                 f"{base.digest}; make that digest available (docker pull {base.ref}@{base.digest})")
    return warnings


def _dockerfile_hashes(prepared: Any) -> set[str]:  # a Prepared, or _check_prepared's
    """The rendered Dockerfile's sha256 as rendered, and as the recorded build's would read: a clean rebuild
    (CCACHE_RECACHE, a ccache mount of its own: pipeline.prepare's ccache_recache) differs from a warm build's
    Dockerfile in those two only, which are no input of the image."""
    plan = prepared.plan
    text = getattr(prepared, "unpinned_dockerfile", "") or prepared.rendered.dockerfile.read_text()  # (pins: no input)
    hashes = {hashlib.sha256(text.encode()).hexdigest()}
    warm_id = plan.ccache_id.removesuffix(clean_ccache_id(""))
    if plan.ccache_recache and warm_id != plan.ccache_id:
        text = text.replace(f"id={plan.ccache_id},", f"id={warm_id},").replace(" CCACHE_RECACHE=1", "")
        hashes.add(hashlib.sha256(text.encode()).hexdigest())
    return hashes


# prepared: a Prepared (Any: tests/unit/test_reproduce_unit.py passes a namespace of its source, plan, rendered,
# build_key)
def _check_prepared(rec: Recorded, prepared: Any, cuda_hashes: list[str] | None) -> list[str]:
    i = rec.inputs
    warnings = []
    source, plan = prepared.source, prepared.plan
    if source.commit != i.commit:
        raise ReproduceError(f"the source resolved to {source.commit}, not the recorded {i.commit}")
    if source.commit_time != i.source_date_epoch:
        raise ReproduceError(f"commit {i.commit[:12]} has committer time {source.commit_time}; the recorded "
                             f"SOURCE_DATE_EPOCH is {i.source_date_epoch}")
    if tuple(plan.cmake_args) != tuple(i.cmake_args):
        only_here = [a for a in plan.cmake_args if a not in i.cmake_args]
        only_rec = [a for a in i.cmake_args if a not in plan.cmake_args]
        raise ReproduceError(f"the CMake flags differ from the recorded ones (here only: {' '.join(only_here) or '-'}; "
                             f"recorded only: {' '.join(only_rec) or '-'})")
    if i.cuda_wheels is not None and cuda_hashes is not None and sorted(i.cuda_wheels) != sorted(cuda_hashes):
        raise ReproduceError("the CUDA toolkit wheels laid out here are not the recorded ones "
                             f"({len(set(cuda_hashes) - set(i.cuda_wheels))} differ); the recorded CUDA root is "
                             "needed (base.cuda_root)")
    if i.cuda_wheels is not None and cuda_hashes is None:
        raise ReproduceError("the recorded build used CUDA wheels, but no wheel manifest is available here")
    if rec.dockerfile_sha256 and rec.dockerfile_sha256 not in _dockerfile_hashes(prepared):
        warnings.append("the rendered Dockerfile differs from the recorded one although every recorded input "
                        "matches")
    if rec.build_key and prepared.build_key != rec.build_key:
        warnings.append(f"the build key is {prepared.build_key[:12]}, the recorded one {rec.build_key[:12]}")
    return warnings


def reproduce(rec: Recorded, spec: ReproduceSpec, *, keep: Path | None = None, compare: bool = True,
              stream: OutStream | None = None, engine: Engine) -> ReproduceResult:
    """Rebuild rec with its inputs (spec: its config resolved, cli/reproducespecs.py) into an OCI archive and compare
    manifest digests."""
    stream = sys.stderr if stream is None else stream
    warnings = check_inputs(rec, spec.unit, engine, stream)
    check_buildx(engine)
    with tempfile.TemporaryDirectory(prefix="buildkit-reproduce-") as tmp:
        # a clean rebuild compiles every object again, also where the recorded build used a ccache
        # the recorded Debian package versions: installed as they were, or one line naming those the mirror lacks
        pins = pins_from_record(rec.debian_packages, rec.origin)
        prepared = prepare(spec.unit, engine, Path(tmp) / "context", ccache_recache=spec.clean, apt_pins=pins)
        more = _check_prepared(rec, prepared, cuda_wheel_hashes(prepared.cuda_manifest))
        for warning in more:
            stream.write(f"warning: {warning}\n")
        warnings += more
        archive = (keep / "reproduced.oci.tar") if keep else Path(tmp) / "reproduced.oci.tar"
        if keep:
            keep.mkdir(parents=True, exist_ok=True)
        options = replace(spec.build, oci_archive=archive)
        metadata = Path(tmp) / "metadata.json"
        build = build_spec(prepared.plan, prepared.rendered, options, metadata)
        built = run_build_explained(build, options.session(metadata), stream=stream, engine=engine)
        result = ReproduceResult(recorded=rec, digest=built.digest, archive=archive if keep else None,
                                 warnings=warnings)
        if result.reproduced or not compare:
            return result
        result.diff, result.original = compare_with_original(rec, archive, engine)
        return result


def compare_with_original(rec: Recorded, archive: Path, engine: Engine) -> tuple[ImageDiff | None, str]:
    """Diff the recorded image (the first of its originals that can be read) against the rebuild."""
    tried = []
    for spec in rec.originals:
        with ExitStack() as stack:
            try:
                original = open_image(spec, stack, platform=rec.inputs.platform, engine=engine)
            except BuildkitError as exc:
                tried.append(f"{spec}: {exc}")
                continue
            if original.manifest_digest != rec.image_digest:
                tried.append(f"{spec} is {original.manifest_digest[:19]}, not the recorded image")
                continue
            rebuilt = stack.enter_context(OciArchive(archive)).image(rec.inputs.platform,
                                                                     source=f"rebuild {archive.name}")
            return diff_images(original, rebuilt), spec
    return None, "; ".join(tried) or "no local or pushed copy was recorded"


# --------------------------------------------------------------------------- a multi-platform build

@dataclass
class IndexReproduceResult:
    recorded: IndexRecorded
    digest: str  # the index assembled from the rebuilt platforms
    platforms: list[tuple[str, ReproduceResult]]

    @property
    def reproduced(self) -> bool:
        return self.digest == self.recorded.index_digest and all(r.reproduced for _, r in self.platforms)

    @property
    def warnings(self) -> list[str]:
        return [w for _, r in self.platforms for w in r.warnings]

    def report(self) -> str:
        lines = [f"recorded: {self.recorded.origin}", f"  index {self.recorded.index_digest}"]
        for platform, result in self.platforms:
            lines.append(f"{platform}:")
            lines += [f"  {line}" for line in result.report().splitlines()[1:]]
        lines.append(f"rebuilt index: {self.digest}")
        lines.append("reproduced: every platform's manifest and the index have the recorded digests, bit for bit"
                     if self.reproduced else "NOT reproduced: " + ("the index digests differ" if all(
                         r.reproduced for _, r in self.platforms) else "a platform's manifest digest differs"))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"reproduced": self.reproduced, "recorded": self.recorded.index_digest, "rebuilt": self.digest,
                "origin": self.recorded.origin, "warnings": self.warnings,
                "platforms": [{"platform": p, "reproduced": r.reproduced, "recorded": r.recorded.image_digest,
                               "rebuilt": r.digest, "diff": r.diff.to_json() if r.diff else None}
                              for p, r in self.platforms]}


def reproduce_index(rec: IndexRecorded, specs: Mapping[str, ReproduceSpec], *, keep: Path | None = None,
                    **kwargs: Any) -> IndexReproduceResult:
    """Rebuild every platform of a recorded multi-platform build (reproduce, one by one, each with its spec: specs
    by platform), then assemble their index (oci/ociindex.py) and compare it with the recorded index digest."""
    with tempfile.TemporaryDirectory(prefix="buildkit-reproduce-index-") as tmp:
        where = keep or Path(tmp)
        results = []
        for platform, platform_rec in rec.platforms:
            folder = where / platform.replace("/", "-")
            results.append((platform, reproduce(platform_rec, specs[platform], keep=folder, **kwargs)))
        digest = index_digest_of([(p, where / p.replace("/", "-") / "reproduced.oci.tar") for p, _ in results])
        if keep is None:
            for _, result in results:
                result.archive = None
        return IndexReproduceResult(recorded=rec, digest=digest, platforms=results)
