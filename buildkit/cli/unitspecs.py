"""The build unit's configuration resolved at the CLI (issue 49 item 2): `unit_spec(cfg, engine)` turns the resolved
buildkit.toml into the frozen flows/unit/spec.UnitSpec a unit is handed, `variant_spec(variant, engine)` a matrix
variant into a VariantSpec. Each rule about a setting is written once here or below it: the patch queue
(plan/patchqueue.patch_policy), the pin of source.commit (ref_and_pin), the cache folder (cache_root), how buildx
runs (build_options: the reproducible exporter needs the engine's image store).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from buildkit.core.paths import cache_dir
from buildkit.engine.api import Images
from buildkit.engine.buildx import BuildOptions
from buildkit.flows.unit.cudacontexts import CudaSettings
from buildkit.flows.unit.spec import UnitSpec, VariantSpec, exporter_on, ref_and_pin_of
from buildkit.plan.buildplan import make_request
from buildkit.plan.config import ResolvedConfig
from buildkit.plan.matrix import Variant
from buildkit.plan.patchqueue import patch_policy
from buildkit.plan.request import BuildRequest
from buildkit.plan.tagset import DefaultVariantRule


def cache_root(cfg: ResolvedConfig) -> Path:
    return cfg.cache.dir or cache_dir()


def ref_and_pin(cfg: ResolvedConfig) -> tuple[str, str | None]:
    """What to fetch and what it must resolve to. A full SHA in source.commit is the pin;
    a branch or tag name there is fetched as is; an empty one means the tracked branch."""
    return ref_and_pin_of(cfg.source.commit, cfg.source.branch)


def cuda_settings(cfg: ResolvedConfig) -> CudaSettings:
    return CudaSettings(cache=cache_root(cfg), cuda_root=cfg.base.cuda_root, cublas=cfg.base.cublas,
                        devel_image=cfg.base.devel_image)


def reproducible_exporter(cfg: ResolvedConfig, engine: Images) -> bool:
    """The OCI exporter path (bit-for-bit digests) is used when `docker load` keeps an archive's bytes:
    on the containerd image store. build.reproducible = "off" forces the plain --load path."""
    return exporter_on(cfg.build.reproducible != "off", engine)


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
