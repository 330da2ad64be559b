"""A recorded build resolved for its rebuild (cli/reproducespecs.py makes it, from the config the record's inputs
fix): the unit's spec (what prepare() and check_inputs read: the request, source, patch queue, cache) and how buildx
runs the rebuild."""

from __future__ import annotations

from dataclasses import dataclass

from buildkit.engine.buildx import BuildOptions
from buildkit.flows.unit.spec import UnitSpec


@dataclass(frozen=True)
class ReproduceSpec:
    """unit: the recorded build's unit, as its config resolves. build: the rebuild's buildx options (the OCI exporter,
    not loaded; --no-cache unless --cache; provenance as asked); reproduce() sets where its archive goes."""
    unit: UnitSpec
    build: BuildOptions

    @property
    def clean(self) -> bool:
        """A clean rebuild: no build cache, and every object compiled again (ccache read nothing)."""
        return self.build.no_cache
