"""The stages wired together: config → source → patches → plan → render (→ build → verify → lock).

`prepare` does everything up to a rendered build context; `build` runs buildx on it, checks
the image and writes the lock.

Deterministic by default: SOURCE_DATE_EPOCH is the commit's committer time; the base images are
pinned by digest in the rendered Dockerfile (`FROM ref@sha256:...`) when the digest is one a FROM
line can name; provenance attestations are off (`build.provenance`, or BuildOptions, turns them
on); every input that is not already a label is recorded in the label org.llama-buildkit.inputs,
so `buildkit reproduce IMAGE` can rebuild from a pushed image alone. On an engine with the
containerd image store the image goes through the OCI exporter with rewrite-timestamp and
`docker load` (see buildx.py), so the same inputs give the same manifest digest.

Each stage's failure is its own BuildkitError; the build context of a failed preparation is
removed, and a failed verification removes the image's tags again, so a failure leaves no image
and no lock change behind.
"""

from __future__ import annotations

from typing import Any
import sys
import tempfile
from datetime import UTC, datetime
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from collections.abc import Iterator

from buildkit import __version__
from buildkit.engine.api import Engine, Host, Images, OutStream
from buildkit.engine.baseimages import BaseSource, check_base_history, check_base_platforms, resolve_base_images
from buildkit.engine.buildx import BuildResult
from buildkit.plan.cpulevels import gcc_line
from buildkit.release.lockfile import Lock
from buildkit.verify.cpuhost import host_cpu_id
from buildkit.flows.unit.cudacontexts import check_cuda_available, cuda_contexts
from buildkit.flows.unit.spec import UnitSpec
from buildkit.core.errors import BuildkitError, ConfigError, SourceError
from buildkit.release.lock import BuildOutcome

from buildkit.source.patches import PatchQueue, apply_patches
from buildkit.core.progress import stage
from buildkit.plan.buildplan import make_plan, render_view
from buildkit.plan.plantypes import BuildPlan, PlanOptions, Resolved
from buildkit.plan.request import BuildRequest, SourceFacts
from buildkit.plan.inputs import BaseImage, BuildInputs
from buildkit.plan.plantypes import plan_inputs
from buildkit.plan.platforms import engine_platform, judge_build_machine, long_double_differs
from buildkit.plan.aptpins import AptPins
from buildkit.plan.archs import parse_cuda_version
from buildkit.plan.render import RenderResult, render_dockerfile, templates_sha256, write_context
from buildkit.source.cpuvariants import declared_variants
from buildkit.source.cudasource import CUB_DROPPED_ITERATORS_FROM, cub_dropped_iterator_uses, long_double_uses
from buildkit.source.fetch import SourceInfo, export_tree, fetch_source, mirror_dir
from buildkit.source.sourcetree import clear_around, sync_tree
from buildkit.core.filelock import try_lock
from buildkit.core.urlcreds import clean_url
from buildkit.core.treewalk import remove_tree
from buildkit.verify import binfmt

@dataclass(frozen=True)
class Prepared:
    """A unit ready to build: its plan (made once, from resolved and options), its rendered context."""
    plan: BuildPlan
    rendered: RenderResult
    source: SourceInfo
    patches: PatchQueue
    cuda_root: Path | None  # the build machine's toolkit (nvcc, cuobjdump), provider wheels
    resolved: Resolved  # what the plan was made of (replanned makes it again)
    options: PlanOptions = PlanOptions()
    # every CUDA root laid out (a cross build: the build machine's and the target's): verify reads the
    # image with the cuobjdump of whichever runs on this machine (an emulated build machine's does not)
    cuda_roots: tuple[Path, ...] = ()
    unpinned_dockerfile: str = ""  # `reproduce` with apt pins: the Dockerfile as the recorded build rendered it
    spec: UnitSpec | None = None  # what it was prepared from (the build stage reads its options, cache and lock)

    @property
    def build_key(self) -> str:
        return self.plan.build_key

    @property
    def base_images(self) -> tuple[BaseImage, ...]:
        return self.resolved.base_images

    @property
    def cuda_manifest(self) -> dict[str, Any] | None:  # the wheels of the CUDA root(s), for the inputs and the lock
        return self.resolved.cuda_manifest

    def inputs(self) -> BuildInputs:
        """Every input of this build (its plan's)."""
        return self.plan.inputs

    def replanned(self, *, version: str | None = None, shared_tags: bool = True) -> Prepared:
        """This unit with its plan made anew from the same resolved inputs (make_plan): at a publication's
        version (its label; the build key is unchanged), or with its build-key tag only (shared_tags=False: a
        platform of an index, whose shared tags are the index's). The rendered context stays as it is."""
        request = self.plan.request if version is None else replace(self.plan.request, version=version)
        options = replace(self.options, shared_tags=shared_tags)
        return Prepared(make_plan(request, self.resolved, options), self.rendered, self.source, self.patches,
                        self.cuda_root, self.resolved, options, self.cuda_roots, self.unpinned_dockerfile, self.spec)

    def outcome(self, result: BuildResult | None = None, *, image_digest: str | None = None,
                debian_packages: dict[str, Any] | None = None, engine: Images | None = None) -> BuildOutcome:
        """What the build of this unit produced, for its lock entry (LockEntry.of): result's digest, the engine's
        id of its image, tags and times; without result (an image the registry has: image_digest) none of them.
        engine: the one holding result's image (required with a result)."""
        rendered = self.rendered.dockerfile_sha256
        if result is None:
            return BuildOutcome(dockerfile_sha256=rendered, image_digest=image_digest or "",
                                debian_packages=debian_packages)
        if engine is None:  # a programming error, not an input's: kept under python -O too
            raise TypeError("Prepared.outcome of a build's result needs the engine holding its image")
        image_id = _local_image_id(engine, result.tags[0], result.config_digest) if result.tags \
            else result.config_digest
        started, finished = build_times(result)
        return BuildOutcome(dockerfile_sha256=rendered, image_digest=result.digest if image_digest is None
                            else image_digest, image_id=image_id, tags=result.tags,
                            exporter="oci" if result.oci_archive is not None else "load",
                            build_seconds=round(result.seconds, 1), build_started=started, build_finished=finished,
                            debian_packages=debian_packages)


def _fresh_dir(path: Path) -> bool:
    """Make sure path is an empty folder; True when we created it."""
    try:
        if path.exists():
            if not path.is_dir() or any(path.iterdir()):
                raise ConfigError(f"{path} exists and is not empty; choose a new --out folder")
            return False
        path.mkdir(parents=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the folder {path}: {exc.strerror or exc} "
                          f"(is a part of the path a file?); choose another --out folder") from None
    return True


def prepare(spec: UnitSpec, engine: Engine, out_dir: Path, *, extra_tags: tuple[str, ...] = (),
            ccache_recache: bool = False, in_place: bool = False, lay_out: bool = True,
            apt_pins: AptPins | None = None) -> Prepared:
    """Check the request, fetch, export, patch and render into out_dir (Dockerfile + src/).
    ccache_recache (also when build.no_cache is set): a clean build's compile, which reads nothing from
    the ccache (BuildPlan.ccache_recache) and writes into a cache mount of its own (buildplan.clean_ccache_id):
    BuildKit's --no-cache empties every cache mount it uses, so the warm one of other builds is kept.
    in_place: out_dir is kept between builds; its src/ is brought to the commit by sync_tree (only
    changed files written), everything else in it is rendered anew.
    lay_out=False (--print, render): the CUDA roots are resolved from the package index, not downloaded.
    apt_pins (`reproduce`): the recorded Debian package versions the apt steps install (no input)."""
    request = spec.request  # (unit_spec refused an unknown arch or an unbuildable CUDA version)
    options = PlanOptions(extra_tags=extra_tags, clean_ccache=ccache_recache or spec.build.no_cache,
                          apt_pins=apt_pins or None)
    check_cuda_available(request, spec.cuda)  # a CUDA release the index does not have stops here
    queue = spec.patches.load()
    # base images first: one that cannot be had stops the build before any fetch
    sources = resolve_base_images([request.devel_image, request.runtime_image], spec.cache_root,
                                  builder=spec.build.builder, engine=engine)
    check_base_platforms(sources, *base_platforms(request))
    check_base_history(sources)
    bases = tuple(BaseImage(ref=s.ref, digest=s.digest) for s in sources)
    with stage("fetch", clean_url(spec.source_url)):
        info = fetch_source(spec.source_url, spec.ref, spec.pin, spec.cache_root)
    if in_place:
        clear_around(out_dir / "src")
    created = not in_place and _fresh_dir(out_dir)
    try:
        with stage("fetch", f"export {info.commit[:12]}"):
            (sync_tree if in_place else export_tree)(info, spec.cache_root, out_dir / "src")
        with stage("patch", f"{len(queue.files)} patch(es)"):
            apply_patches(queue, out_dir / "src")
        check_cuda_sources(request, out_dir / "src")
        facts = SourceFacts(url=info.url, commit=info.commit, commit_time=info.commit_time,
                            build_number=info.build_number, patch_set_sha256=queue.sha256,
                            patch_names=queue.names, cpu_variants=declared_variants(out_dir / "src"), ref=info.ref,
                            patch_sha256=queue.digests)
        with stage("render", request.variant):
            cuda_root, cuda_manifest, cuda_named = cuda_contexts(request, spec.cuda, lay_out=lay_out)
            named = cuda_named + tuple(c for c in (s.named_context() for s in sources) if c is not None)
            resolved = Resolved(source=facts, template_sha256=templates_sha256(), tool_version=__version__,
                                base_images=bases, from_refs=from_refs(sources), cuda_manifest=cuda_manifest,
                                cpu_host=_cpu_host(request))
            plan = make_plan(request, resolved, options)
            unpinned = render_dockerfile(render_view(plan, resolved.from_refs, pinned=False)) if apt_pins else ""
            rendered = write_context(render_view(plan, resolved.from_refs), out_dir, named)
    except BaseException:
        # a kept folder stays: the next sync_tree brings src/ back to its commit, whatever a failed patch left
        if created:
            remove_tree(out_dir, ignore_errors=True)
        elif not in_place:
            for child in out_dir.iterdir():
                remove_tree(child)
        raise
    roots = tuple(path for name, path in cuda_named if name in ("cuda-root", "cuda-target"))
    return Prepared(plan=plan, rendered=rendered, source=info, patches=queue, cuda_root=cuda_root, resolved=resolved,
                    options=options, cuda_roots=roots, unpinned_dockerfile=unpinned, spec=spec)


def base_platforms(request: BuildRequest) -> tuple[tuple[str, ...], str]:
    """The platforms every base image must offer, and why: the image's, and for a cross build the build
    machine's too (its build stage, and the stage resolving the runtime packages, run on it)."""
    if request.cross:
        return ((request.platform, request.build_platform),
                f"the image is for {request.platform} and its build stage runs on {request.build_platform}")
    return (request.platform,), f"the image is for {request.platform}"


def check_cuda_sources(request: BuildRequest, tree: Path) -> None:
    """What nvcc would stop at, found in the tree's CUDA sources before the build starts (the compile of
    the real tree takes most of an hour): an iterator that this CUDA's <cub/cub.cuh> no longer includes;
    and, for a cross build whose build machine folds long double in another format than the target, any
    use of long double."""
    if not request.arch.is_cuda:
        return
    if request.cuda_version and parse_cuda_version(request.cuda_version) >= CUB_DROPPED_ITERATORS_FROM:
        dropped = cub_dropped_iterator_uses(tree)
        if dropped:
            where = ", ".join(f"{path}:{line} {name}" for path, line, name in dropped[:3])
            first = ".".join(map(str, CUB_DROPPED_ITERATORS_FROM))
            before = f"{CUB_DROPPED_ITERATORS_FROM[0]}.{CUB_DROPPED_ITERATORS_FROM[1] - 1}"
            raise SourceError(
                f"{len(dropped)} CUDA source(s) use a CCCL iterator without including its header ({where}"
                f"{' ...' if len(dropped) > 3 else ''}): from CUDA {first} on, <cub/cub.cuh> no longer includes "
                f"<cuda/iterator>, and nvcc {request.cuda_version} stops there (ggml-org/ggml#1624); add "
                f"`#include <cuda/iterator>` to those files with a patch in the patch queue, or build with "
                f"--cuda {before}")
    if not (request.cross and long_double_differs(request.build_platform, request.platform)):
        return
    uses = long_double_uses(tree)
    if uses:
        where = ", ".join(f"{path}:{line}" for path, line in uses[:3]) + (" ..." if len(uses) > 3 else "")
        raise ConfigError(
            f"{len(uses)} use(s) of long double in CUDA sources ({where}): nvcc's front ends fold long double "
            f"with the build machine's format ({request.build_cpu.long_double} on {request.build_platform}), not "
            f"the target's ({request.target_cpu.long_double} on {request.platform}), and no flag changes that; "
            f"build on a {request.platform} machine (leave build.build_platform unset there), or patch them out")


def _cpu_host(request: BuildRequest) -> str | None:
    """cpu_level native compiles for the build machine: its CPU is then an input."""
    return host_cpu_id() if request.cpu_level.native else None


# --------------------------------------------------------------------------- deterministic inputs

def from_refs(sources: tuple[BaseSource, ...]) -> tuple[tuple[str, str], ...]:
    """What the FROM line names for each base image with a digest (ref@digest, its pinned name in the engine,
    or the named context of its OCI layout): Resolved.from_refs, for rendering only (buildplan.render_view)."""
    return tuple((s.ref, s.from_ref) for s in sources if s.digest)


def inputs_record(plan: BuildPlan, bases: tuple[BaseImage, ...],
                  cuda_manifest: dict[str, Any] | None) -> dict[str, Any]:
    """Every input of a build that its other labels do not already carry (the inputs label)."""
    return plan_inputs(plan, bases, cuda_manifest, _cpu_host(plan.request)).record()


def _local_image_id(engine: Images, tag: str, fallback: str) -> str:
    """The engine's id for the loaded image (the config digest on the classic store, the index
    digest on the containerd store); buildx's metadata only has the former on the classic store."""
    return engine.image_id(tag) or fallback


def build_times(result: BuildResult) -> tuple[str, str]:
    """The lock's build_started and build_finished of a build that ran here ("" for an image it did not build)."""
    if not result.finished_at:
        return "", ""
    return rfc3339(result.finished_at - result.seconds), rfc3339(result.finished_at)


def rfc3339(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def kept_context_dir(spec: UnitSpec) -> Path:
    """The build folder kept between builds of one source (cache_root/contexts/<its mirror's name>)."""
    return spec.cache_root / "contexts" / mirror_dir(spec.cache_root, clean_url(spec.source_url)).stem


@contextmanager
def prepared_context(spec: UnitSpec, engine: Engine, *, extra_tags: tuple[str, ...] = (),
                     work_dir: Path | None = None, ccache_recache: bool = False,
                     lay_out: bool = True) -> Iterator[Prepared]:
    """A rendered build context that lives as long as the with-block.

    Without work_dir it is the source's kept folder (kept_context_dir), so the next build of the same
    source writes and sends only the files that changed (sourcetree.py); the rest of that folder (the
    Dockerfile, buildx's metadata, the OCI archive) is removed when the block ends. A build of the same
    source that holds that folder now (another process, or another platform of this build) gets a
    temporary folder instead, as work_dir does. lay_out=False: as prepare's (--print)."""
    with ExitStack() as stack:
        kept = kept_context_dir(spec) if work_dir is None else None
        if kept is not None and stack.enter_context(try_lock(kept.with_name(kept.name + ".lock"))):
            stack.callback(clear_around, kept / "context" / "src")
            stack.callback(clear_around, kept / "context")  # buildx's metadata, the OCI archive
            yield prepare(spec, engine, kept / "context", extra_tags=extra_tags, in_place=True,
                          ccache_recache=ccache_recache, lay_out=lay_out)
            return
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="buildkit-context-", dir=work_dir))
        yield prepare(spec, engine, Path(tmp) / "context", extra_tags=extra_tags, ccache_recache=ccache_recache,
                      lay_out=lay_out)


def last_build_seconds(lock_path: Path, request: BuildRequest) -> float | None:
    """How long the lock's last build of this variant took (None when unknown)."""
    try:
        lock = Lock.read(lock_path)
        found = lock.find(request.variant, request.target, request.platform, request.cpu_level.name,
                          request.arch.name)
        entry = found[1] if found else lock.builds.get(f"{request.variant}/{request.target}@{request.platform}")
    except BuildkitError:  # no lock, or one this version cannot read (LockError): no estimate, not an error
        return None
    seconds = entry.build_seconds if entry is not None else 0  # (a platform of several: its own key)
    return float(seconds) if seconds > 0 else None


def check_build_machine(request: BuildRequest, engine: Host, stream: OutStream | None = None, *,
                        warn: bool = True) -> None:
    """Stop a cross build planned for another build machine (unless its emulation is asked for, and a
    binfmt_misc handler can run that machine's programs); say so when the compile will be emulated, and when
    the CPU level's -march needs a newer GCC than the base may have (cpulevels.gcc_line)."""
    here = engine_platform(engine.arch())
    line = judge_build_machine(request.build_platform, request.platform, here,
                               emulate=request.emulate_build_platform)
    if line and request.cross:  # an emulated build machine: the kernel must be able to run its programs
        machine = request.build_cpu
        if binfmt.handler_for(binfmt.elf_header(machine.elf_machine), binfmt.registered()) is None:
            raise ConfigError(f"build.emulate_build_platform: no binfmt_misc handler runs {machine.elf_name} "
                              f"programs on this machine, so a {request.build_platform} build stage cannot run on "
                              f"the {here} engine; register QEMU user-mode emulation for {machine.processor} "
                              "first (qemu-user-static with binfmt_misc), or build on that machine")
    if line and warn:
        (stream or sys.stderr).write(f"buildkit: warning: {line}\n")
    note = gcc_line(request.cpu_level, request.platform)
    if note and warn:
        (stream or sys.stderr).write(f"buildkit: {note}\n")
