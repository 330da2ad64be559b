"""The build unit's configuration, resolved: a frozen UnitSpec (cibuildwheel's resolve-once) per unit, and a
VariantSpec per variant of a matrix. cli/unitspecs.py makes them of the resolved buildkit.toml where a command
starts; the unit's stages (pipeline, buildunit, publishing, cudacontexts, compiletimes) and the matrix and nightly
flows read them, never the configuration (tests/unit/test_layering.py holds it).

Two rules on values live here, for the flows that apply them mid-run: the pin of a commit (ref_and_pin_of: the
nightly pins its variants to the head it resolved) and whether the reproducible exporter runs (exporter_on: the
engine's image store, asked when a build starts).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from buildkit.engine.api import Images
from buildkit.engine.buildx import BuildOptions, image_store
from buildkit.flows.unit.cudacontexts import CudaSettings
from buildkit.plan.request import BuildRequest
from buildkit.plan.matrix import bake_target_name, unit_name
from buildkit.plan.patchqueue import PatchPolicy
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
        return unit_name(self.key, self.request.platform, self.platform_split)

    @property
    def target_name(self) -> str:
        """The bake target name (bake allows letters, digits, '_' and '-' only)."""
        return bake_target_name(self.unit)


def ref_and_pin_of(commit: str, branch: str) -> tuple[str, str | None]:
    """ref_and_pin's rule on the values (pure): the nightly pins its variants to the head it resolved with it."""
    commit = commit.strip()
    if not commit:
        return branch, None
    is_hex = all(c in "0123456789abcdefABCDEF" for c in commit)
    if is_hex and len(commit) == SHA_LEN:
        return commit.lower(), commit.lower()
    return commit, None  # a branch, tag, or a short SHA the source stage refuses with its message


def exporter_on(asked: bool, engine: Images) -> bool:
    """reproducible_exporter's rule on the value: asked (build.reproducible not "off") and containerd's store."""
    return asked and image_store(engine) == "containerd"
