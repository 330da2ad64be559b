"""The build key (pure): one hash over every input that decides an image's content.

Two builds with the same key are the same build; `build --push` asks the registry for the tag
`bk-<key>-<variant>` and skips the build when it is there. Stored as the image label
org.llama-buildkit.build-key and in the lock.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable

from buildkit.release.lock import BaseImage
from buildkit.plan.buildplan import BuildPlan


def cuda_wheel_hashes(manifest: dict | None) -> list[str] | None:
    """The sha256 of every wheel a provider-wheels CUDA root was laid out from."""
    if manifest is None:
        return None
    return sorted(w.get("sha256", "") for w in manifest.get("wheels", []) if isinstance(w, dict))


def build_key(plan: BuildPlan, base_images: Iterable[BaseImage], cuda_manifest: dict | None,
              cpu_host: str | None = None) -> str:
    """cpu_host: for cpu_level native, the build machine's CPU (its code depends on it)."""
    req = plan.request
    inputs = {
        "commit": plan.source.commit,
        "build_number": plan.source.build_number,
        "patch_set": plan.source.patch_set_sha256,
        "template": plan.template_sha256,
        "base_images": [[b.ref, b.digest] for b in base_images],
        "cuda_version": req.cuda_version,
        "cuda_wheels": cuda_wheel_hashes(cuda_manifest),
        "arch": req.arch.name,
        "target": req.target,
        "platform": req.platform,
        "cmake_args": list(plan.cmake_args),
        "cpu_level": req.cpu_level.name,
    }
    if cpu_host is not None:
        inputs["cpu_host"] = cpu_host
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
