"""The ccache carriers (engine/ccachestore.py) of a project: one per distinct variant of its matrix."""

from __future__ import annotations

from collections.abc import Sequence

from buildkit.engine.baseimages import resolve_base_images
from buildkit.engine.api import Engine
from buildkit.engine.ccachestore import CcacheTarget
from buildkit.flows.nightly.jobs import find_unit
from buildkit.flows.unit.spec import VariantSpec
from buildkit.plan.buildplan import ccache_id


def targets_for(variants: Sequence[VariantSpec], engine: Engine, unit: str | None = None) -> list[CcacheTarget]:
    """One per distinct variant of the nightly matrix (variants, in matrix order); with unit, that unit's only
    (a CI job's)."""
    out: dict[str, CcacheTarget] = {}
    if unit is not None:
        variants = [find_unit(variants, unit)]
    for v in variants:
        req = v.request
        if ccache_id(req) in out or not req.ccache:
            continue
        source, = resolve_base_images([req.runtime_image], v.spec.cache_root, engine=engine)
        named = source.named_context()
        # saved as DIR/<variant>-<platform arch>/ or REPO:ccache-<variant>-<platform arch>, like the mount id
        name = ccache_id(req).removeprefix("llama-buildkit-ccache-")
        out[ccache_id(req)] = CcacheTarget(name, ccache_id(req), source.from_ref,
                                        (named,) if named else ())
    return list(out.values())
