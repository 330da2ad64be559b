"""The inputs a variant's configuration decides (pure): what a quiet `buildkit nightly` compares.

A night without a new commit must not fetch the source or resolve base images, so it cannot compute
the build key. Besides the commit and the patch set it compares every input that the config (and this
buildkit) decides before anything is fetched. Which inputs those are is generated from their
declarations in plan/inputs.py (`config_decided`): an input whose `of` is "request.x", "tool.x" (this
buildkit's version and its templates' hash) or a `ByConfig` function (of the request and the source's
URL), unless it is `per_build` (the version: every nightly has its own). Not compared: what is made from
the source ("source.x", "made.x": the commit, its time and build number, the patches, the CMake flags,
which depend on the tree's CPU variants), what is resolved (`of` None: base images, CUDA wheels, the
build machine's CPU) and the other functions (build_platform: the machine that plans decides it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from buildkit.plan.inputs import INPUTS, BuildInputs, ByConfig, Input

if TYPE_CHECKING:
    from buildkit.plan.request import BuildRequest


def config_decided(i: Input) -> bool:
    """Whether the config (and this buildkit) decide the input, without the source (the module's rule)."""
    if i.per_build:
        return False
    return isinstance(i.of, ByConfig) or (isinstance(i.of, str) and i.of.startswith(("request.", "tool.")))


CONFIG_INPUTS: tuple[Input, ...] = tuple(i for i in INPUTS if config_decided(i))
_TOOL_CHANGES = {"tool_version": "buildkit {before} -> {now}", "template_sha256": "template changed"}


def config_inputs(request: BuildRequest, *, source_url: str, template_sha256: str,
                  tool_version: str) -> dict[str, Any]:
    """{name: value} of every config-decided input of a variant (request_inputs' values, without a source)."""
    tool = {"template_sha256": template_sha256, "tool_version": tool_version}

    def value(of: Any) -> Any:
        if isinstance(of, ByConfig):
            return of.read(request, source_url)
        where, _, name = of.partition(".")
        got = getattr(request, name) if where == "request" else tool[name]
        return tuple(got) if isinstance(got, list) else got

    return {i.name: value(i.of) for i in CONFIG_INPUTS}


def _shown(value: Any) -> str:
    if isinstance(value, str) and value:
        return value
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def config_changes(recorded: BuildInputs, wanted: Mapping[str, Any]) -> list[str]:
    """Why an image built with `recorded` is not what the config makes now, one phrase per kind of change
    ([]: none): "buildkit 0.2.0 -> 0.3.0", "template changed", "config changed: cpu_level all -> native".
    An input the image predates has its declared `absent` value in `recorded` (from_labels, from_lock_entry)."""
    phrases, changed = [], []
    for i in CONFIG_INPUTS:
        before, now = getattr(recorded, i.name), wanted[i.name]
        if before == now:
            continue
        if i.name in _TOOL_CHANGES:
            phrases.append(_TOOL_CHANGES[i.name].format(before=before, now=now))
        else:
            changed.append(f"{i.name} {_shown(before)} -> {_shown(now)}")
    return phrases + ([f"config changed: {', '.join(changed)}"] if changed else [])
