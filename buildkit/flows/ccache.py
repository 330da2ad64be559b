"""The ccache carriers (engine/ccachestore.py) of a project: one per distinct variant of its matrix."""

from __future__ import annotations

from buildkit.engine.baseimages import resolve_base_images
from buildkit.engine.ccachestore import CcacheTarget, ccache_id
from buildkit.flows.pipeline import cache_root
from buildkit.plan.matrix import matrix_variants


def targets_for(cfg) -> list[CcacheTarget]:
    """One per distinct variant of the nightly matrix."""
    out: dict[str, CcacheTarget] = {}
    for v in matrix_variants(cfg)[0]:
        req = v.request
        if req.variant in out or not req.ccache:
            continue
        source, = resolve_base_images([req.runtime_image], cache_root(cfg))
        named = source.named_context()
        out[req.variant] = CcacheTarget(req.variant, ccache_id(req.variant), source.from_ref,
                                        (named,) if named else ())
    return list(out.values())
