"""The build matrix (pure): `matrix.archs` x `matrix.cuda_versions` x `matrix.targets` (x the
platforms, when build.platform names several).

cpu ignores the CUDA versions. Each combination is one *variant*, named like its tags:
`cuda13.1-sm120`, `cpu`, and `<that>-<target>` for targets other than `server` (the image most
users run keeps the short name). An arch the CUDA version cannot build is left out of the
matrix with the reason, not an error.

With `build.platform = "linux/amd64,linux/arm64"` each variant is built once per platform: one
Variant per platform, all with the variant's key (their tags' name) and `platform_split` set; the
flows build each as its own bake target and publish one OCI index per variant (flows/matrix/bake.py).
An arch that does not exist on one of the platforms (sm_121 on amd64) leaves that platform out,
with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from buildkit.core.errors import ArchError, ConfigError
from buildkit.plan.archs import check_cuda_release, check_cuda_support, check_platform, get_arch
from buildkit.plan.buildplan import make_request
from buildkit.plan.request import BuildRequest
from buildkit.plan.config import ResolvedConfig
from buildkit.plan.platforms import is_multi, parse_platforms

_TARGET_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class Variant:
    key: str  # the variant as tags name it: cpu, cuda13.1-sm120, cuda13.1-sm120-full
    cfg: ResolvedConfig  # the configuration with build.arch / cuda_version / target of this variant
    request: BuildRequest
    platform_split: bool = False  # one platform of a multi-platform variant (its index has the key's tags)

    @property
    def unit(self) -> str:
        return unit_name(self.key, self.request.platform, self.platform_split)

    @property
    def target_name(self) -> str:
        """The bake target name (bake allows letters, digits, '_' and '-' only)."""
        return bake_target_name(self.unit)

    def with_values(self, origin: str, **values: Any) -> Variant:
        cfg = with_values(self.cfg, origin, **values)
        return Variant(key=self.key, cfg=cfg, request=make_request(cfg), platform_split=self.platform_split)


def unit_name(key: str, platform: str, platform_split: bool) -> str:
    """What is built once: the key, with the platform for one platform of a multi-platform variant."""
    return f"{key}@{platform}" if platform_split else key


def bake_target_name(key: str) -> str:
    return _TARGET_NAME_BAD.sub("_", key)


def variant_key(request: BuildRequest) -> str:
    return request.tag_variant


def with_values(cfg: ResolvedConfig, origin: str, **values: Any) -> ResolvedConfig:
    """cfg with some keys replaced (dotted names given with '__' for '.': build__arch=...)."""
    new_values, new_origins = dict(cfg.values), dict(cfg.origins)
    for name, value in values.items():
        dotted = name.replace("__", ".")
        if dotted not in new_values:
            raise ConfigError(f"unknown key {dotted!r}")
        new_values[dotted], new_origins[dotted] = value, origin
    return replace(cfg, values=new_values, origins=new_origins)


def matrix_variants(cfg: ResolvedConfig) -> tuple[list[Variant], list[tuple[str, str]]]:
    """(variants in matrix order, [(combination, why it was left out)]). Empty matrix: ConfigError."""
    archs, cudas, targets = cfg.matrix.archs, cfg.matrix.cuda_versions, cfg.matrix.targets
    for name, values in (("matrix.archs", archs), ("matrix.cuda_versions", cudas), ("matrix.targets", targets)):
        if not values:
            raise ConfigError(f"{name} is empty; the build matrix needs at least one value")
    for target in targets:
        if target not in ("server", "full", "light"):
            raise ConfigError(f"matrix.targets: {target!r} is not one of server, full, light")
    for cuda in cudas:
        check_cuda_release(cuda, "matrix.cuda_versions")
    platforms = parse_platforms(cfg.build.platform) if is_multi(cfg.build.platform) else (None,)
    variants: list[Variant] = []
    excluded: list[tuple[str, str]] = []
    seen: set[str] = set()
    for arch_name in archs:
        arch = get_arch(arch_name)  # an unknown arch is an error, naming the choices
        for cuda in (cudas if arch.is_cuda else cudas[:1]):
            if arch.is_cuda:
                try:
                    check_cuda_support(arch, cuda)
                except ArchError as exc:
                    excluded.append((f"{arch.name} with CUDA {cuda}", str(exc)))
                    continue
            for target in targets:
                for platform in platforms:
                    sub = with_values(cfg, "matrix", build__arch=arch.name, build__cuda_version=cuda,
                                      build__target=target)
                    if platform is not None:
                        sub = with_values(sub, cfg.origins["build.platform"], build__platform=platform)
                        try:
                            check_platform(arch, platform)
                        except ArchError as exc:
                            excluded.append((f"{arch.name} on {platform}", str(exc)))
                            continue
                    request = make_request(sub)
                    variant = Variant(key=variant_key(request), cfg=sub, request=request,
                                      platform_split=platform is not None)
                    if variant.unit in seen:
                        continue
                    seen.add(variant.unit)
                    variants.append(variant)
    if not variants:
        raise ConfigError("the build matrix is empty: " + "; ".join(f"{c}: {why}" for c, why in excluded))
    return variants, excluded
