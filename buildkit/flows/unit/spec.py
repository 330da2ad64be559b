"""The build unit's configuration, resolved once: `unit_spec(cfg, engine)` turns the resolved buildkit.toml into a
frozen UnitSpec (cibuildwheel's resolve-once), made where a command starts (cli/, or a matrix's variant); the unit's
stages (pipeline, buildunit, publishing, cudacontexts, compiletimes) read that, never ResolvedConfig.

This is the one module of flows/unit that reads the config (tests/unit/test_layering.py holds it). Each rule about a
setting is written once here or below it: the patch queue (plan/patchqueue.patch_policy), the pin of source.commit
(ref_and_pin), the cache folder (cache_root), how buildx runs (build_options: the reproducible exporter needs the
engine's image store).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from buildkit.core.paths import cache_dir
from buildkit.engine.api import Images
from buildkit.engine.buildx import BuildOptions, image_store
from buildkit.flows.unit.cudacontexts import CudaSettings
from buildkit.plan.buildplan import make_request
from buildkit.plan.request import BuildRequest
from buildkit.plan.config import ResolvedConfig
from buildkit.plan.matrix import Variant, bake_target_name
from buildkit.plan.patchqueue import PatchPolicy, patch_policy
from buildkit.plan.tagset import DefaultVariantRule

SHA_LEN = 40


@dataclass(frozen=True)
class UnitSpec:
    """Everything one build unit reads of the config: what to build (request), from where (the source's url, the
    ref to fetch and the commit it must resolve to), with which patch queue, how buildx runs (build), the CUDA
    toolkit's settings, where the cache and the lock are, and the tag rule of its publication."""
    request: BuildRequest
    source_url: str
    ref: str
    pin: str | None
    patches: PatchPolicy
    cache_root: Path
    build: BuildOptions
    cuda: CudaSettings
    lock_path: Path
    tags: DefaultVariantRule


@dataclass(frozen=True)
class VariantSpec:
    """One variant of the build matrix, resolved: its key (the tags' name: cpu, cuda13.1-sm120), its unit's spec,
    whether it is one platform of a multi-platform variant, the configured build.build_platform ("" when the
    target's own) and options.gpu_check.backend (whether the nightly builds its tests image)."""
    key: str
    spec: UnitSpec
    platform_split: bool = False
    build_platform: str = ""
    gpu_check_backend: str = ""

    @property
    def request(self) -> BuildRequest:
        return self.spec.request

    @property
    def unit(self) -> str:
        """What is built once: the key, with the platform for one platform of a multi-platform variant."""
        return f"{self.key}@{self.request.platform}" if self.platform_split else self.key

    @property
    def target_name(self) -> str:
        """The bake target name (bake allows letters, digits, '_' and '-' only)."""
        return bake_target_name(self.unit)


def cache_root(cfg: ResolvedConfig) -> Path:
    return cfg.cache.dir or cache_dir()


def ref_and_pin(cfg: ResolvedConfig) -> tuple[str, str | None]:
    """What to fetch and what it must resolve to. A full SHA in source.commit is the pin;
    a branch or tag name there is fetched as is; an empty one means the tracked branch."""
    return ref_and_pin_of(cfg.source.commit, cfg.source.branch)


def ref_and_pin_of(commit: str, branch: str) -> tuple[str, str | None]:
    """ref_and_pin's rule on the values (pure): the nightly pins its variants to the head it resolved with it."""
    commit = commit.strip()
    if not commit:
        return branch, None
    is_hex = all(c in "0123456789abcdefABCDEF" for c in commit)
    if is_hex and len(commit) == SHA_LEN:
        return commit.lower(), commit.lower()
    return commit, None  # a branch, tag, or a short SHA the source stage refuses with its message


def cuda_settings(cfg: ResolvedConfig) -> CudaSettings:
    return CudaSettings(cache=cache_root(cfg), cuda_root=cfg.base.cuda_root, cublas=cfg.base.cublas,
                        devel_image=cfg.base.devel_image)


def reproducible_exporter(cfg: ResolvedConfig, engine: Images) -> bool:
    """The OCI exporter path (bit-for-bit digests) is used when `docker load` keeps an archive's bytes:
    on the containerd image store. build.reproducible = "off" forces the plain --load path."""
    return exporter_on(cfg.build.reproducible != "off", engine)


def exporter_on(asked: bool, engine: Images) -> bool:
    """reproducible_exporter's rule on the value: asked (build.reproducible not "off") and containerd's store."""
    return asked and image_store(engine) == "containerd"


def asked_build_options(cfg: ResolvedConfig) -> BuildOptions:
    """build_options before the engine is asked: reproducible says whether the config asks for the exporter;
    exporter_on(it, engine) when a build starts (the nightly: a quiet night runs no docker command)."""
    return BuildOptions(builder=cfg.build.builder, progress=cfg.build.progress,
                        cache_from=cfg.build.cache_from, cache_to=cfg.build.cache_to,
                        reproducible=cfg.build.reproducible != "off",
                        provenance=cfg.build.provenance, no_cache=cfg.build.no_cache)


def build_options(cfg: ResolvedConfig, engine: Images) -> BuildOptions:
    return replace(asked_build_options(cfg), reproducible=reproducible_exporter(cfg, engine))


def unit_spec(cfg: ResolvedConfig, engine: Images, *, request: BuildRequest | None = None,
              build: BuildOptions | None = None) -> UnitSpec:
    """cfg resolved for one build unit. request: the one already made of cfg (a matrix's variant, a platform of
    several); else make_request(cfg), so an unknown arch or an unbuildable CUDA version stops here, first.
    build: buildx's options made already (a matrix's variants share them: the engine is asked once, or when a build
    starts)."""
    request = request or make_request(cfg)
    ref, pin = ref_and_pin(cfg)
    return UnitSpec(request=request, source_url=cfg.source.url, ref=ref, pin=pin, patches=patch_policy(cfg),
                    cache_root=cache_root(cfg), build=build_options(cfg, engine) if build is None else build,
                    cuda=cuda_settings(cfg),
                    lock_path=cfg.lock.path, tags=DefaultVariantRule.of(cfg))


def variant_spec(variant: Variant, engine: Images, *, build: BuildOptions | None = None) -> VariantSpec:
    """A matrix variant (plan/matrix.Variant, which holds its configuration) resolved for the flows."""
    return VariantSpec(key=variant.key, spec=unit_spec(variant.cfg, engine, request=variant.request, build=build),
                       platform_split=variant.platform_split, build_platform=variant.cfg.build.build_platform,
                       gpu_check_backend=variant.cfg.options.gpu_check.backend)
