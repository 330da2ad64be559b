"""What a plan is made from (pure data): the `BuildRequest`, the config checked (plan/buildplan.make_request), and the
`SourceFacts` the source and patch stages found. Below plan/inputs.py, whose declared inputs read them."""

from __future__ import annotations

from dataclasses import dataclass

from buildkit.plan.archs import Arch, default_platform
from buildkit.plan.cpulevels import CpuLevel
from buildkit.plan.platforms import Platform, cpu_arch, is_cross
from buildkit.plan.tags import artifact_variant, target_variant


@dataclass(frozen=True)
class BuildRequest:
    """The config, checked: everything known before touching the source."""
    arch: Arch
    cuda_version: str | None  # None for cpu
    provider: str  # nvidia | wheels | cpu
    template: str
    devel_image: str
    runtime_image: str
    target: str
    platform: str
    build_platform: str  # where the compile runs; another CPU than platform's: a cross build
    jobs: int
    no_vmm: bool
    ccache: bool
    cpu_level: CpuLevel
    extra_cmake_args: tuple[str, ...]
    image_name: str
    version: str
    title: str
    licenses: str
    description: str  # image.description, its {source}, {variant} and {target} filled in by the inputs
    url: str  # image.url, the same
    base_labels: bool  # image.base_labels
    variant: str  # arch, CUDA version and CPU level: cuda13.1-sm120, cpu-x86-64-v3 (labels, lock key, caches)
    user: str = ""  # build.user as NAME:UID (the image runs as it); empty = root
    apt_snapshot: str = ""  # base.apt_snapshot as YYYYMMDDTHHMMSSZ (plan/aptpins.py); "" = the images' own mirrors
    # a cross build whose build machine is not the engine's is run under the engine's emulation
    # (build.emulate_build_platform: tests and CI); where the compile runs, not what it makes: no input
    emulate_build_platform: bool = False

    @property
    def cross(self) -> bool:
        return is_cross(self.build_platform, self.platform)

    @property
    def target_cpu(self) -> Platform:
        return cpu_arch(self.platform)

    @property
    def build_cpu(self) -> Platform:
        return cpu_arch(self.build_platform)

    @property
    def tag_variant(self) -> str:
        """The variant as tags name it, with the target unless it is the server (plan/tags.py)."""
        return target_variant(self.variant, self.target)

    @property
    def artifact_variant(self) -> str:
        """The variant as a single-platform build's tags and lock key name it: tag_variant, with -arm64 (etc.)
        for a platform other than the default (plan/tags.py platform_suffix)."""
        return artifact_variant(self.tag_variant, self.platform, self.cpu_level.name, default_platform(self.arch))

    @property
    def cache_name(self) -> str:
        """What `{variant}` in a --cache-from/--cache-to entry becomes: the variant as tags name it and the
        target platform (cpu-amd64, cpu-light-amd64, cuda13.1-sm120-arm64). Each build of a bake exports its
        cache to the ref at once, so two targets or platforms under one ref overwrote each other's cache and
        raced: the registry answered one of the two writes 500."""
        return f"{self.tag_variant}-{self.target_cpu.docker}"


@dataclass(frozen=True)
class SourceFacts:
    """What the plan needs from the source and patch stages."""
    url: str
    commit: str
    commit_time: int
    build_number: int
    patch_set_sha256: str
    patch_names: tuple[str, ...]
    # (name, features) of the CPU variants the tree's ggml declares (source/cpuvariants.py)
    cpu_variants: tuple[tuple[str, tuple[str, ...]], ...] = ()
    ref: str = ""  # what was fetched (a branch, tag or the pinned SHA): the lock's ref
    patch_sha256: tuple[str, ...] = ()  # each patch file's sha256, in the order of patch_names
