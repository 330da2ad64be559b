"""The nightly's configuration, resolved once (issue 49 item 2): `NightlySpec`, what `buildkit nightly` (its run,
--plan, --job, --assemble) reads of buildkit.toml, made by the command (cli/nightlyspecs.py); the nightly's flows
read this, never the config. `at_head` pins a variant to the head and the version the night resolved."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from buildkit.core.urlcreds import UrlAuth
from buildkit.engine.buildx import BuildOptions
from buildkit.flows.unit.spec import VariantSpec, ref_and_pin_of
from buildkit.oci.imageref import ImageRef
from buildkit.plan.patchqueue import PatchPolicy
from buildkit.plan.tags import normalise_version


@dataclass(frozen=True)
class NightlySpec:
    """The image repository (image.name, without tag or digest), the fork's branch (source.url normalised and
    without credentials, which are in auth), the lock, the patch queue, the cache folder, how buildx runs, the
    matrix's variants (in matrix order) and the combinations it left out with why, and the source.commit and
    image.version given (a CI job's: the plan's)."""
    repository: ImageRef
    url: str
    branch: str
    auth: UrlAuth | None
    lock_path: Path
    patches: PatchPolicy
    cache_root: Path
    build: BuildOptions
    variants: tuple[VariantSpec, ...]
    excluded: tuple[tuple[str, str], ...]
    commit: str
    version: str


def at_head(variant: VariantSpec, commit: str, version: str) -> VariantSpec:
    """variant built from commit as version: its config with source.commit and image.version set, resolved again
    (the request's version, the source's ref and pin; nothing else of a unit's spec reads either)."""
    spec = variant.spec
    ref, pin = ref_and_pin_of(commit, spec.ref)
    request = replace(spec.request, version=normalise_version(version))
    return replace(variant, spec=replace(spec, request=request, ref=ref, pin=pin))
