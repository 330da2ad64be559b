"""The config resolved at the CLI into the frozen specs the matrix, multi-platform and doctor flows read (issue 49:
flows never see ResolvedConfig): a multi-platform build's MultiSpec (flows/matrix/multiplatform.py) and doctor's
DoctorSpec (flows/doctor/run.py). A matrix's variants are cli/unitspecs.variant_spec's."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from buildkit.core.errors import BuildkitError, ConfigError

if TYPE_CHECKING:
    from buildkit.engine.api import Images
    from buildkit.flows.doctor.check import DoctorSpec
    from buildkit.flows.matrix.multiplatform import MultiSpec
    from buildkit.plan.request import BuildRequest
    from buildkit.plan.config import ResolvedConfig

MAX_FREE_GB = 1e6  # a petabyte


def platform_requests(cfg: ResolvedConfig) -> list[tuple[str, ResolvedConfig, BuildRequest]]:
    """(platform, its config, its checked request) for each platform of build.platform, in order;
    every platform is checked (arch, CPU level) before any work."""
    from buildkit.plan.buildplan import make_request
    from buildkit.plan.matrix import with_values
    from buildkit.plan.platforms import parse_platforms

    platforms = parse_platforms(cfg.build.platform)
    origin = cfg.origins.get("build.platform", "platform list")
    out = []
    for platform in platforms:
        sub = with_values(cfg, origin, build__platform=platform)
        out.append((platform, sub, make_request(sub)))
    variants = {r.tag_variant for _, _, r in out}
    if len(variants) > 1:
        raise ConfigError(f"build.platform {cfg.build.platform!r}: the platforms give different variants "
                          f"({', '.join(sorted(variants))}); one index needs one variant (set build.cpu_level)")
    return out


def multi_spec(cfg: ResolvedConfig, engine: Images) -> MultiSpec:
    """A multi-platform build resolved: each platform with its unit's spec (its own request)."""
    from buildkit.flows.matrix.multiplatform import MultiSpec
    from buildkit.cli.unitspecs import unit_spec

    return MultiSpec(tuple((p, unit_spec(sub, engine, request=req)) for p, sub, req in platform_requests(cfg)))


def doctor_spec(cfg: ResolvedConfig, *, min_free_gb: float | None = None, matrix: bool = False,
                cheap_only: bool = False) -> DoctorSpec:
    """What doctor checks: the configured build's variant (one per platform of several), or (matrix) every variant
    of the matrix. cheap_only: build's preflight (engine and disk), which needs no base images. A configured build
    that does not resolve is doctor's one failed check (its config_error), not an error."""
    from buildkit.flows.doctor.check import DoctorSpec, Variant
    from buildkit.cli.unitspecs import cache_root
    from buildkit.plan.buildplan import make_request
    from buildkit.plan.matrix import matrix_variants
    from buildkit.plan.platforms import is_multi

    if min_free_gb is not None and not 0 <= min_free_gb <= MAX_FREE_GB:  # nan and inf are not
        raise ConfigError(f"--min-free-gb must be a number of GB from 0 to {MAX_FREE_GB:g}, got {min_free_gb:g}")
    if not -1 <= cfg.build.min_free_gb <= MAX_FREE_GB:
        raise ConfigError(f"build.min_free_gb must be a number of GB from 0 to {MAX_FREE_GB:g}, or -1 for the "
                          f"estimate, got {cfg.build.min_free_gb}")
    if min_free_gb is None and cfg.build.min_free_gb >= 0:
        min_free_gb, origin = float(cfg.build.min_free_gb), "build.min_free_gb"
    else:
        origin = "--min-free-gb" if min_free_gb is not None else ""
    spec = DoctorSpec(variants=(), cache_root=cache_root(cfg), builder=cfg.build.builder, image_name=cfg.image.name,
                      min_free_gb=min_free_gb, min_free_origin=origin)
    try:
        if matrix:
            requests = [v.request for v in matrix_variants(cfg)[0]]
        elif is_multi(cfg.build.platform):  # one variant per platform of a multi-platform build
            requests = [request for _, _, request in platform_requests(cfg)]
        else:
            requests = [make_request(cfg)]
    except BuildkitError as exc:
        return replace(spec, config_error=str(exc))
    spec = replace(spec, variants=tuple(Variant.of(r) for r in requests))
    if cheap_only:
        return spec
    bases = requests if matrix else [make_request(cfg)]  # make_request refuses a build of several platforms here
    return replace(spec, base_refs=tuple(dict.fromkeys(ref for r in bases for ref in (r.devel_image, r.runtime_image))))
