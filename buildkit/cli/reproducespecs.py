"""`buildkit reproduce`'s config, resolved: the record's inputs as config overrides (overrides_for), loaded into the
frozen ReproduceSpec (flows/reproduce/spec.py) the rebuild reads."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from buildkit.engine.api import Images
from buildkit.engine.buildx import BuildOptions
from buildkit.flows.reproduce.record import Recorded
from buildkit.flows.reproduce.spec import ReproduceSpec
from buildkit.cli.unitspecs import unit_spec
from buildkit.plan.buildplan import make_request
from buildkit.plan.config import load_config
from buildkit.plan.inputs import INPUTS


def overrides_for(rec: Recorded, source: str | None = None, patches: str | None = None) -> dict[str, tuple[Any, str]]:
    """Config overrides that make the resolved config exactly the recorded build: every input declared
    with a config key (plan/inputs.py) that the record has, and those whose key depends on another input."""
    i = rec.inputs
    o: dict[str, tuple[Any, str]] = {
        d.config: (list(v) if isinstance(v, tuple) else v, "recorded") for d in INPUTS
        if d.config for v in (getattr(i, d.name),) if v is not None}
    if source:
        o["source.url"] = (source, "--source")
    # a native build compiled on its own platform: reproduced the same way (under emulation elsewhere)
    o["build.build_platform"] = (i.build_platform or i.platform, "recorded")
    o["image.name"] = (rec.image_name, "recorded")
    o["image.base_labels"] = (bool(i.base_name), "recorded")  # (images from before the labels have none)
    if i.provider == "nvidia":
        o["base.provider"] = ("nvidia", "recorded")
        o["base.devel_image"] = (i.devel_image, "recorded")
        o["base.runtime_image"] = (i.runtime_image, "recorded")
    else:
        o["base.os_image"] = (i.devel_image, "recorded")
        if i.provider == "wheels":
            o["base.provider"] = ("wheels", "recorded")
            if i.cublas is not None:
                o["base.cublas"] = (bool(i.cublas), "recorded")
    if patches:
        o["source.patch_dir"] = (patches, "--patches")
    return o


def reproduce_spec(rec: Recorded, engine: Images, *, config_path: Path | None, env: Mapping[str, str],
                   source: str | None = None, patches: str | None = None, use_cache: bool = False,
                   provenance: bool = False) -> ReproduceSpec:
    """The rebuild of rec: its config (config_path's settings, with every recorded input over them), its request
    (an unknown arch or an unbuildable CUDA version stops here), and the rebuild's buildx options."""
    cfg = load_config(config_path, env, overrides_for(rec, source, patches))
    request = make_request(cfg)
    build = BuildOptions(builder=cfg.build.builder, progress=cfg.build.progress, reproducible=True, load=False,
                         no_cache=not use_cache, provenance=provenance)
    return ReproduceSpec(unit=unit_spec(cfg, engine, request=request), build=build)

