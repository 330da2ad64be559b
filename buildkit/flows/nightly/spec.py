"""The nightly's configuration, resolved once (issue 49 item 2): `NightlySpec`, what `buildkit nightly` (its run,
--plan, --job, --assemble) reads of buildkit.toml, made by the command (cli/nightlyspecs.py); the nightly's flows
read this, never the config. `at_head` pins a variant to the head and the version the night resolved; `on_engine`
asks the engine what only it knows (whether its image store keeps an OCI archive's bytes) once a build starts:
a quiet night runs no docker command."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from buildkit.core.urlcreds import UrlAuth
from buildkit.engine.buildx import BuildOptions
from buildkit.engine.api import Images
from buildkit.flows.unit.spec import VariantSpec, exporter_on, ref_and_pin_of
from buildkit.oci.imageref import ImageRef
from buildkit.plan.patchqueue import PatchPolicy
from buildkit.plan.tags import normalise_version


@dataclass(frozen=True)
class NightlySpec:
    """The image repository (image.name, without tag or digest), the fork's branch (source.url normalised and
    without credentials, which are in auth), the lock, the patch queue, the cache folder, how buildx runs, the
    matrix's variants (in matrix order) and the combinations it left out with why, and the source.commit and
    image.version given (a CI job's: the plan's). build (and each variant's) is as the config asks it: its
    reproducible says whether the exporter is asked for; on_engine makes it the engine's."""
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


def on_engine(build: BuildOptions, engine: Images) -> BuildOptions:
    """The options a build of the night runs with: the reproducible exporter where asked and the engine's image store
    keeps an archive's bytes (flows/unit/spec.py's rule)."""
    return replace(build, reproducible=exporter_on(build.reproducible, engine))


def with_build(variant: VariantSpec, build: BuildOptions) -> VariantSpec:
    return replace(variant, spec=replace(variant.spec, build=build))
