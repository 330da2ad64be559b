"""The nightly's configuration resolved once, where its commands start (issue 49 item 2): buildkit.toml into the
frozen NightlySpec (flows/nightly/spec.py) of `buildkit nightly` (its run, --plan and --job) and the matrix's
VariantSpecs of `buildkit ccache`; the nightly's flows read those, never the config.

A --job's config carries the plan's commit and version (--commit, --release): its variants are resolved with them,
as the unit it builds must be (the labels, the lock entry and the build key say that commit and version)."""

from __future__ import annotations

from buildkit.core.errors import RegistryError
from buildkit.core.urlcreds import split_credentials
from buildkit.engine.api import Images
from buildkit.flows.nightly.jobs import check_job
from buildkit.flows.nightly.run import normalise_url
from buildkit.flows.nightly.spec import NightlySpec
from buildkit.flows.unit.spec import VariantSpec
from buildkit.cli.unitspecs import asked_build_options, cache_root, variant_spec
from buildkit.oci.imageref import ImageRef, parse_image_ref
from buildkit.plan.config import ResolvedConfig
from buildkit.plan.matrix import matrix_variants
from buildkit.plan.patchqueue import patch_policy


def repository_of(cfg: ResolvedConfig) -> ImageRef:
    """image.name as the repository the nightly publishes to: without a tag or digest."""
    repository = parse_image_ref(cfg.image.name)
    if repository.tag or repository.digest:
        raise RegistryError(f"image.name {cfg.image.name!r} must not carry a tag or digest")
    return repository


def variant_specs(cfg: ResolvedConfig, engine: Images) -> tuple[tuple[VariantSpec, ...], tuple[tuple[str, str], ...]]:
    """(the matrix's variants resolved, in matrix order; the combinations it leaves out, with why). buildx's options
    are the matrix's, the same for every variant, as the config asks them: the engine is not asked here (the nightly
    asks it when a build starts: flows/nightly/spec.on_engine)."""
    variants, excluded = matrix_variants(cfg)
    build = asked_build_options(cfg)
    return tuple(variant_spec(v, engine, build=build) for v in variants), tuple(excluded)


def nightly_spec(cfg: ResolvedConfig, engine: Images) -> NightlySpec:
    """`buildkit nightly`'s (and --plan's, --job's) NightlySpec of cfg."""
    variants, excluded = variant_specs(cfg, engine)
    return NightlySpec(repository=repository_of(cfg), url=normalise_url(cfg.source.url), branch=cfg.source.branch,
                       auth=split_credentials(cfg.source.url)[1], lock_path=cfg.lock.path, patches=patch_policy(cfg),
                       cache_root=cache_root(cfg), build=variants[0].spec.build, variants=variants, excluded=excluded,
                       commit=cfg.source.commit, version=cfg.image.version)


def job_spec(cfg: ResolvedConfig, engine: Images) -> NightlySpec:
    """--job's NightlySpec: the plan's commit and version (cfg's source.commit and image.version) checked first,
    then the matrix resolved with them."""
    check_job(cfg.source.commit, cfg.image.version)
    return nightly_spec(cfg, engine)
