"""Verify, then remove the tags: an image that fails its checks does not stay in the engine.

The one place `build` (flows/unit/pipeline.py) and a matrix build (flows/matrix/bake.py) turn a verification
into "keep the image" or "remove its tags and say why".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from buildkit.core.errors import BuildkitError, VerifyError
from buildkit.engine.api import Engine
from buildkit.plan.plantypes import BuildPlan
from buildkit.verify.checks import verify_image
from buildkit.verify.report import VerifyReport


class FailedVerification(VerifyError):
    """The image ran but a check failed; the report says which."""

    def __init__(self, message: str, report: VerifyReport):
        super().__init__(message)
        self.report = report


def verified_or_removed(plan: BuildPlan, tags: Sequence[str], cuda_root: Path | Sequence[Path] | None = None,
                        archive: Path | None = None, *, engine: Engine) -> VerifyReport:
    """The report of tags[0]'s checks. When they cannot run (BuildkitError) or one fails
    (FailedVerification), every tag is removed from the engine first. cuda_root: the CUDA root(s) whose
    tools (cuobjdump) may read the image; the first whose tools run on this machine is used."""
    tag = tags[0]
    roots = [cuda_root] if isinstance(cuda_root, Path) else list(cuda_root or [])
    try:
        report = verify_image(plan, tag, engine, cuda_roots=roots, archive=archive)
    except BuildkitError:
        engine.untag(tags)
        raise
    if not report.ok:
        engine.untag(tags)
        failed = "; ".join(f"{c.name}: {c.detail}" for c in report.failures())
        raise FailedVerification(f"image {tag} failed verification and was removed: {failed}", report)
    return report
