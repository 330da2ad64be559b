"""Which patch queue a build applies (pure but for the bundled folder's path): the rule written once, for the build
stages (flows/unit/pipeline.py), the nightly's no-op check (flows/nightly/run.py), its jobs and reproduce.

source.patch_dir relative to buildkit.toml. Without a config file, and with neither the source nor the queue given
on the command line, the source is the seed's fork at its pinned commit (plan/options.py) and the queue is the one
bundled with buildkit for it (patches/ of this repository, buildkit/bundled_patches in the wheel: the seed's fixes,
docs/gpu-runs/2026-12-06-h100). Another source without a config file gets no queue unless --patches names one: the
seed's patches are not another fork's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from buildkit.core.paths import bundled_patches_dir
from buildkit.plan.config import ResolvedConfig
from buildkit.source.patches import PatchQueue, load_patch_queue


@dataclass(frozen=True)
class PatchPolicy:
    """The queue a build applies: its folder, and whether a missing or unreadable one is an error."""
    folder: Path
    required: bool = False

    def load(self) -> PatchQueue:
        return load_patch_queue(self.folder, required=self.required)


def uses_bundled_queue(cfg: ResolvedConfig) -> bool:
    return (cfg.path is None and cfg.origins["source.patch_dir"] == "default"
            and cfg.origins["source.url"] == "default")


def patch_dir(cfg: ResolvedConfig) -> Path:
    """The folder of the queue to apply (one that does not exist is an empty queue when it was not asked for)."""
    return bundled_patches_dir() if uses_bundled_queue(cfg) else cfg.source.patch_dir


def queue_required(cfg: ResolvedConfig) -> bool:
    """A missing or unreadable queue is an error only where one was asked for (a setting, not the default)."""
    return bool(cfg.origins["source.patch_dir"] != "default")


def patch_policy(cfg: ResolvedConfig) -> PatchPolicy:
    """The queue of cfg's builds (the build unit, the nightly and its jobs, reproduce): patch_dir and queue_required."""
    return PatchPolicy(patch_dir(cfg), queue_required(cfg))
