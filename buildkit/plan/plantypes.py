"""The plan as data (pure): `Resolved` (what the I/O stages found), `PlanOptions` (how this build is made beside its
inputs) and the `BuildPlan` that plan/buildplan.make_plan makes of a request and them; `plan_inputs`, a plan's inputs
with its base images and CUDA root. Above plan/inputs.py (a plan holds its BuildInputs), below buildkey.py and
buildplan.py."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from buildkit.plan.aptpins import AptPins
from buildkit.plan.archs import Arch
from buildkit.plan.inputs import OCI, BaseImage, BuildInputs, request_inputs
from buildkit.plan.request import BuildRequest, SourceFacts


@dataclass(frozen=True)
class Resolved:
    """Everything the plan needs that only I/O finds (flows/unit/pipeline.prepare resolves it, make_plan uses it)."""
    source: SourceFacts
    template_sha256: str  # this buildkit's templates
    tool_version: str
    base_images: tuple[BaseImage, ...] = ()  # configured names with their digests
    # what a FROM line names for a base image (ref@digest, its pinned name in the engine, an OCI layout's
    # named context): for rendering only (render_view); labels, lock and build key keep the configured names
    from_refs: tuple[tuple[str, str], ...] = ()
    cuda_manifest: dict[str, Any] | None = None  # the wheels of the CUDA root(s)
    cpu_host: str | None = None  # cpu_level native: the build machine's CPU (its code depends on it)


@dataclass(frozen=True)
class PlanOptions:
    """How this build of a request is made, beside its inputs."""
    extra_tags: tuple[str, ...] = ()  # --tag: local tags too
    # a clean build's compile (build --no-cache, reproduce): reads nothing from the ccache, writes into a
    # cache mount of its own (BuildPlan.ccache_recache, clean_ccache_id)
    clean_ccache: bool = False
    apt_pins: AptPins | None = None  # reproduce: the recorded Debian package versions the apt steps install
    shared_tags: bool = True  # False: the build-key tag only (a platform of an index: the others are the index's)


@dataclass(frozen=True)
class BuildPlan:
    request: BuildRequest
    source: SourceFacts
    template_sha256: str
    tool_version: str
    cmake_args: tuple[str, ...]
    build_targets: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    tags: tuple[str, ...]
    ccache_id: str
    inputs: BuildInputs  # every input of the build (plan/inputs.py): its labels, lock fields and key
    build_key: str
    cuda_manifest: dict[str, Any] | None  # the CUDA root's wheels (the lock's cuda_root)
    # the GCC release the build stage installs and compiles with, None for the base's own (cpulevels.gcc_needed)
    gcc_major: int | None = None
    # compile every object again and store it, reading nothing from the ccache (CCACHE_RECACHE): how
    # `reproduce` and `build --no-cache` rebuild, so that a proof never rests on objects an earlier build
    # left behind (they also get a mount of their own: clean_ccache_id).
    # It changes how the compile runs, not what it makes: it is in no input, label or build key.
    ccache_recache: bool = False
    # `reproduce`: the recorded Debian package versions the apt steps install (plan/aptpins.py); known only
    # after a build's apt steps, so no input, label or build key
    apt_pins: AptPins | None = None

    @property
    def source_date_epoch(self) -> int:
        return self.source.commit_time

    @property
    def annotations(self) -> tuple[tuple[str, str], ...]:
        """The image manifest's annotations: its OCI-standard labels (org.opencontainers.image.*) again,
        same keys, same values, so a registry or OCI tool shows them without the config. They come from
        the labels, which hold only inputs (the created time is the commit's), so the manifest digest
        stays reproducible. An empty label says nothing and gives no annotation."""
        return tuple((key, value) for key, value in self.labels if key.startswith(OCI) and value)

    @property
    def arch(self) -> Arch:
        return self.request.arch


def plan_inputs(plan: BuildPlan, base_images: Iterable[BaseImage] = (), cuda_manifest: dict[str, Any] | None = None,
                cpu_host: str | None = None) -> BuildInputs:
    """Every input of a planned build, once its base images (with digests) and CUDA root are known.
    cpu_host: for cpu_level native, the build machine's CPU (its code depends on it)."""
    return request_inputs(plan.request, plan.source, template_sha256=plan.template_sha256,
                          tool_version=plan.tool_version, cmake_args=plan.cmake_args, base_images=base_images,
                          cuda_manifest=cuda_manifest, cpu_host=cpu_host)
