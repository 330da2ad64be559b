"""`buildkit doctor`: is this machine ready for the build it is configured for?

Each check gives one line: ok, warn or fail, what was found, and for warn/fail the fix. Checks:

* engine   — the Docker engine answers; its version and image store (containerd keeps an OCI
             archive's bytes, so digests are reproducible; the classic store does not);
* buildx   — the buildx plugin's version, and the builder buildkit will use;
* disk     — free space where the engine keeps images and where buildkit keeps its caches,
             against what the chosen variants need (REQUIRED_GB, or build.min_free_gb, or --min-free-gb);
* registry — the registry of image.name answers and accepts the `docker login` credentials
             (unreachable: a warning, a failure only with push, i.e. `doctor --push`);
* bases    — every base image of the build is in the engine or its registry answers for it (a warning:
             the build would stop at its start; the fix is the offline path);
* driver   — with `nvidia-smi`: the host driver against the CUDA version's minimum, and the GPU
             against the arch the image is built for;
* emulation — a platform other than the host's needs a binfmt_misc handler (QEMU) or a builder
             node of that platform.

`build` runs the cheap ones (engine, disk) before anything else: see `preflight`.
The checks only read; nothing is started, pulled or written.

What to check comes resolved by the CLI (cli/matrixspecs.doctor_spec: a DoctorSpec). This module runs the checks
and shows the result; the checks live in enginecheck.py (engine, buildx),
diskcheck.py, registrycheck.py and platformcheck.py (driver, emulation), on doctorcheck.py's Check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from buildkit.core.errors import BuildError
from buildkit.flows.doctor.basecheck import check_bases
from buildkit.flows.doctor.diskcheck import check_disk, disk_kind, required_gb
from buildkit.core.check import Check, Status
from buildkit.flows.doctor.check import DoctorSpec
from buildkit.flows.doctor.enginecheck import check_buildx_and_builder, check_engine, engine_info
from buildkit.flows.doctor.platformcheck import check_driver, check_emulation, judge_cross_cuda
from buildkit.flows.doctor.registrycheck import check_registry

if TYPE_CHECKING:
    from buildkit.engine.api import Engine


def disk_places(info: dict[str, Any] | None, cache: Path) -> list[tuple[str, Path]]:
    places = []
    root = (info or {}).get("DockerRootDir")
    # a remote engine's data root is not on this machine: only a local socket's can be measured
    host = os.environ.get("DOCKER_HOST", "")
    if root and (not host or host.startswith("unix://")) and Path(root).exists():
        places.append(("engine data root", Path(root)))
    places.append(("cache.dir", cache))
    return places


def run_checks(spec: DoctorSpec, engine: Engine, *, offline: bool = False, cheap_only: bool = False,
               push: bool = False) -> list[Check]:
    """Every check, in the order of the screen. cheap_only: engine and disk (what `build` runs first).
    push: the build will push, so an unreachable registry fails (else it is a warning)."""
    if spec.config_error:
        return [Check("config", Status.FAILED, spec.config_error, "fix the setting named (see `buildkit config`)")]
    checks: list[Check] = []
    variants = spec.variants
    info, why = engine_info(engine)
    checks.append(check_engine(info, why))
    if spec.min_free_gb is not None:
        need, origin = spec.min_free_gb, spec.min_free_origin
    else:
        kinds = "+".join(sorted({disk_kind(v) for v in variants}))
        need, origin = required_gb(variants), f"{len(variants)} {kinds} variant(s)"
    checks.append(check_disk(disk_places(info, spec.cache_root), need, origin))
    if cheap_only:
        return checks
    if info is not None:
        buildx, builder_platforms = check_buildx_and_builder(spec.builder, engine)
    else:
        buildx, builder_platforms = Check("buildx", Status.WARNED, "not checked: no engine", "fix the engine first"), []
    checks.insert(1, buildx)
    if offline:
        checks.append(Check("registry", Status.PASSED, "not contacted (--offline)"))
    else:
        checks.append(check_registry(spec.image_name, push=push))
    checks.append(check_bases(spec.base_refs, engine, offline=offline))
    checks.append(check_driver(variants))
    checks.append(check_emulation(variants, builder_platforms))
    cross_cuda = judge_cross_cuda(variants)
    if cross_cuda is not None:
        checks.append(cross_cuda)
    return checks


# doctor's words for a status, in its lines and its JSON (a doctor check is never skipped)
WORDS = {Status.PASSED: "ok", Status.WARNED: "warn", Status.FAILED: "fail"}


def failed(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if c.failed]


def format_checks(checks: Sequence[Check]) -> list[str]:
    """One line per check: status, name, what was found, and the fix."""
    width = max((len(c.name) for c in checks), default=0)
    lines = []
    for c in checks:
        line = f"{WORDS[c.status]:<4}  {c.name:<{width}}  {c.detail}"
        if c.fix and c.status != Status.PASSED:
            line += f" -> fix: {c.fix}"
        lines.append(line)
    return lines


def as_json(checks: Sequence[Check]) -> dict[str, Any]:
    return {"ok": not failed(checks), "checks": [{**c.to_json(WORDS), "fix": c.fix} for c in checks]}


def refusal(check: Check) -> BuildError:
    """A failed preflight check as the one-line error that stops a build."""
    return BuildError(f"{check.name}: {check.detail}; fix: {check.fix} (all checks: `buildkit doctor`; "
                      "skip with --no-preflight)")


def preflight(spec: DoctorSpec, engine: Engine, *, echo: Callable[[str], None] | None = None,
              defer_disk: bool = False) -> Check | None:
    """`build`'s first step: engine and disk. A failure stops the build with its fix in one line.
    defer_disk: a short disk is returned instead, for a caller that may find nothing to build (`build
    --push` of a build key the engine or the registry already has) and raises refusal() before compiling."""
    checks = run_checks(spec, engine, cheap_only=True)
    bad = failed(checks)
    if echo is not None:
        for line in format_checks([c for c in checks if c.status == Status.WARNED]):
            echo(line)
    if bad and defer_disk and all(c.name == "disk" for c in bad):
        return bad[0]
    if bad:
        raise refusal(bad[0])
    return None
