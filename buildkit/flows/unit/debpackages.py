"""The Debian packages of a build, for its lock entry (issue 41, item 5): every package of the build stage and
of the runtime image with its version, as the stages' own dpkg databases say (not apt's logs).

* The runtime image's: its var/lib/dpkg/status, read from the image's layers (release/sbom.py's parser)
  in the OCI archive the build wrote, else in the engine's copy.
* The build stage's: the stage build-os (templates/_devel.j2) installs them; the target build-packages is
  that stage's dpkg status file alone, exported with buildx's local exporter into a temporary folder. It
  is a second, small build of the same context, all of whose steps the build just ran (cache hits, a
  status file out), so it changes nothing in the image: its target is no stage of the image, and no
  file is added to any stage the image copies from. (A file written in the build stage would have been
  read only through the image or a cache mount; a second export keeps the image's bytes as they are.)

{"build": {package: version}, "runtime": {...}}: a package of several architectures is package:arch
(plan/aptpins.py package_versions), which `reproduce` pins (plan/aptpins.py pins_from_record); besides,
"architectures" (the same keys, each package's dpkg architecture) and "os" (each stage's os-release ID and
VERSION_ID, read from the build stage's export and the image's layers): the provenance lists the build stage's
packages with them (release/provenance.py), and the SBOM's purls carry the runtime's vendor and distro.
"""

from __future__ import annotations

import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from buildkit.core.boundedread import MiB, read_regular
from buildkit.core.errors import BuildError
from buildkit.engine.api import Builder, Engine, Images
from buildkit.engine.buildx import BuildOptions, BuildResult
from buildkit.engine.specs import BuildSpec
from buildkit.oci.imagesource import open_image
from buildkit.plan.aptpins import keyed_packages
from buildkit.release.sbom import STATUS_LIMIT, DebPackage, OsRelease, image_contents, installed, os_release
from buildkit.flows.unit.pipeline import Prepared

BUILD_PACKAGES_TARGET = "build-packages"  # templates/_devel.j2


@dataclass(frozen=True)
class StagePackages:
    """One stage's packages as the lock records them: {key: version}, {key: architecture} (keys: aptpins.py's
    keyed_packages), and its os-release."""
    versions: dict[str, str]
    architectures: dict[str, str]
    os: OsRelease


def stage_packages(packages: list[DebPackage], release: OsRelease) -> StagePackages:
    keyed = keyed_packages((p.name, p.architecture, p.version) for p in packages)
    return StagePackages({k: t[2] for k, t in keyed.items()}, {k: t[1] for k, t in keyed.items()}, release)


def runtime_packages(result: BuildResult, platform: str, engine: Images) -> StagePackages:
    """The runtime image's packages: from the build's OCI archive, else from the engine's image."""
    with ExitStack() as stack:
        if result.oci_archive is not None and result.oci_archive.is_file():
            spec = f"oci:{result.oci_archive}"
        elif result.tags:
            spec = f"docker:{result.tags[0]}"
        else:
            raise BuildError("the built image is neither in an archive nor in the engine: its Debian packages "
                             "cannot be read")
        return stage_packages(*image_contents(open_image(spec, stack, platform=platform, engine=engine)))


# The export's Dockerfile is the build's with the stage's os-release copied beside its dpkg status: the same
# stages (cache hits), a different export only; the image's Dockerfile and the template's hash are unchanged.
STATUS_COPY = "COPY --from=build-os /var/lib/dpkg/status /build-packages/status\n"
OS_RELEASE_COPY = "COPY --from=build-os /usr/lib/os-releas[e] /build-packages/\n"  # (a wildcard: may match none)


def build_stage_packages(prepared: Prepared, options: BuildOptions, engine: Builder) -> StagePackages:
    """The build stage's packages: its dpkg status (and os-release), exported by the target build-packages."""
    plan, rendered = prepared.plan, prepared.rendered
    with tempfile.TemporaryDirectory(prefix="buildkit-build-packages-") as tmp:
        dockerfile = Path(tmp) / "Dockerfile"
        text = read_regular(rendered.dockerfile, STATUS_LIMIT).decode()
        dockerfile.write_text(text.replace(STATUS_COPY, STATUS_COPY + OS_RELEASE_COPY, 1))
        spec = BuildSpec(context=rendered.context_dir, dockerfile=dockerfile, platform=plan.request.platform,
                         target=BUILD_PACKAGES_TARGET,
                         build_args=(("SOURCE_DATE_EPOCH", str(plan.source_date_epoch)),),
                         named_contexts=tuple((name, str(path)) for name, path in rendered.named_contexts),
                         # the build's own cache sources: where its apt step came from (a remote builder's, say)
                         cache_from=tuple(e.replace("{variant}", plan.request.cache_name) for e in options.cache_from),
                         provenance=False, outputs=(f"type=local,dest={Path(tmp) / 'out'}",))
        tail: list[str] = []
        finished = engine.build(spec, options.session(None), lambda line: tail.append(line) if line.strip()
                                else None, stream=_Quiet(), tty=False)
        status = Path(tmp) / "out" / "build-packages" / "status"
        if finished.code != 0 or not status.is_file():
            last = next((t for t in reversed(tail) if "ERROR" in t), tail[-1] if tail else "no output")
            raise BuildError(f"the build stage's Debian packages could not be read (target "
                             f"{BUILD_PACKAGES_TARGET}, exit {finished.code}): {last.strip()[:300]}")
        text = read_regular(status, STATUS_LIMIT).decode("utf-8", "replace")
        release_file = status.parent / "os-release"
        release = (os_release(read_regular(release_file, MiB).decode("utf-8", "replace"))
                   if release_file.is_file() and not release_file.is_symlink() else OsRelease())
    return stage_packages(installed([text]), release)


def debian_packages(prepared: Prepared, result: BuildResult, options: BuildOptions,
                    engine: Engine) -> dict[str, Any]:
    """The lock entry's debian_packages: the build stage's and the runtime image's versions (what `reproduce`
    pins), their architectures and os-release (what the provenance and the SBOM say besides)."""
    stages = {"build": build_stage_packages(prepared, options, engine),
              "runtime": runtime_packages(result, prepared.plan.request.platform, engine)}
    record: dict[str, Any] = {name: stage.versions for name, stage in stages.items()}
    record["architectures"] = {name: stage.architectures for name, stage in stages.items()}
    record["os"] = {name: {"id": stage.os.id, "version_id": stage.os.version_id} for name, stage in stages.items()}
    return record


class _Quiet:
    """The export's own log is not the user's: its lines go to on_line (for a failure's message) only."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False
