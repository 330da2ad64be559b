"""doctor's check of the base images the configured build starts from: each is in the engine, or its registry
answers for it (5 s at most). A base that is neither makes the build stop at its start: doctor warns, with the
way an offline machine gets one (engine/baseimages.py OFFLINE_BASE_HINT)."""

from __future__ import annotations

from collections.abc import Sequence

from buildkit.engine.api import Images
from buildkit.engine.baseimages import OFFLINE_BASE_HINT, local_digest, registry_digest
from buildkit.core.check import Check, Status

TIMEOUT = 5  # seconds a registry is given, as the build gives it for an image the engine has


def check_bases(refs: Sequence[str], engine: Images, *, offline: bool = False) -> Check:
    wanted = list(dict.fromkeys(refs))
    missing: list[str] = []
    for ref in wanted:
        if local_digest(engine, ref):
            continue
        if offline:
            missing.append(f"{ref} (not in the engine; --offline: its registry was not asked)")
            continue
        digest, why = registry_digest(ref, timeout=TIMEOUT)
        if not digest:
            missing.append(f"{ref} (not in the engine, and {why})")
    if not missing:
        return Check("bases", Status.PASSED, f"{', '.join(wanted)}: in the engine or its registry")
    return Check("bases", Status.WARNED, "a build cannot start from " + "; ".join(missing),
                 OFFLINE_BASE_HINT.replace("load it", "load each", 1).replace("name it", "name each", 1))
