"""The build key (pure): one hash over every input that decides an image's content.

Two builds with the same key are the same build; `build --push` asks the registry for the tag
`bk-<key>-<variant>` and skips the build when it is there. Stored as the image label
org.llama-buildkit.build-key and in the lock. Derived from the one model of a build's inputs
(inputs.py); the fields and their JSON form are fixed, so existing tags and locks keep their keys.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from buildkit.plan.inputs import INPUTS, BaseImage, BuildInputs
from buildkit.plan.plantypes import BuildPlan, plan_inputs


def key_fields(inputs: BuildInputs) -> dict[str, Any]:
    """The inputs the key hashes: those declared with a key name (plan/inputs.py), the ones that decide
    the image's content (not its name, version or description); an input added later is left out while
    a build does not have it, so the keys of builds without it stay the same."""
    return {i.key: i.json(getattr(inputs, i.name)) for i in INPUTS
            if i.key and not i.left_out(getattr(inputs, i.name))}


def key_of(inputs: BuildInputs) -> str:
    return hashlib.sha256(json.dumps(key_fields(inputs), sort_keys=True).encode()).hexdigest()


def build_key(plan: BuildPlan, base_images: Iterable[BaseImage], cuda_manifest: dict[str, Any] | None,
              cpu_host: str | None = None) -> str:
    """cpu_host: for cpu_level native, the build machine's CPU (its code depends on it)."""
    return key_of(plan_inputs(plan, tuple(base_images), cuda_manifest, cpu_host))


def index_key(platform_keys: Iterable[tuple[str, str]]) -> str:
    """The build key of a multi-platform build: one hash over (platform, build key) in index order
    (the index's tag bk-<key>-<variant> finds it again; any platform's inputs change it)."""
    pairs = [[platform, key] for platform, key in platform_keys]
    return hashlib.sha256(json.dumps({"platforms": pairs}, sort_keys=True).encode()).hexdigest()
