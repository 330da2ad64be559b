"""The build key (pure): one hash over every input that decides an image's content.

Two builds with the same key are the same build; `build --push` asks the registry for the tag
`bk-<key>-<variant>` and skips the build when it is there. Stored as the image label
org.llama-buildkit.build-key and in the lock. Derived from the one model of a build's inputs
(inputs.py); the fields and their JSON form are fixed, so existing tags and locks keep their keys.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable

from buildkit.plan.buildplan import BuildPlan
from buildkit.plan.inputs import BaseImage, BuildInputs, plan_inputs


def key_fields(inputs: BuildInputs) -> dict:
    """The inputs the key hashes: those that decide the image's content (not its name or version)."""
    fields = {
        "commit": inputs.commit,
        "build_number": inputs.build_number,
        "patch_set": inputs.patch_set_sha256,
        "template": inputs.template_sha256,
        "base_images": [[b.ref, b.digest] for b in inputs.base_images],
        "cuda_version": inputs.cuda_version,
        "cuda_wheels": None if inputs.cuda_wheels is None else list(inputs.cuda_wheels),
        "arch": inputs.arch,
        "target": inputs.target,
        "platform": inputs.platform,
        "cmake_args": list(inputs.cmake_args),
        "cpu_level": inputs.cpu_level,
    }
    if inputs.cpu_host is not None:
        fields["cpu_host"] = inputs.cpu_host
    if inputs.build_platform is not None:  # a cross build's compilers run on (and are built for) it
        fields["build_platform"] = inputs.build_platform
    if inputs.user:  # the image's passwd, home and USER
        fields["user"] = inputs.user
    return fields


def key_of(inputs: BuildInputs) -> str:
    return hashlib.sha256(json.dumps(key_fields(inputs), sort_keys=True).encode()).hexdigest()


def build_key(plan: BuildPlan, base_images: Iterable[BaseImage], cuda_manifest: dict | None,
              cpu_host: str | None = None) -> str:
    """cpu_host: for cpu_level native, the build machine's CPU (its code depends on it)."""
    return key_of(plan_inputs(plan, tuple(base_images), cuda_manifest, cpu_host))


def index_key(platform_keys: Iterable[tuple[str, str]]) -> str:
    """The build key of a multi-platform build: one hash over (platform, build key) in index order
    (the index's tag bk-<key>-<variant> finds it again; any platform's inputs change it)."""
    pairs = [[platform, key] for platform, key in platform_keys]
    return hashlib.sha256(json.dumps({"platforms": pairs}, sort_keys=True).encode()).hexdigest()
