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
(plan/aptpins.py package_versions), which `reproduce` pins (plan/aptpins.py pins_from_record).
"""

from __future__ import annotations

import tempfile
from contextlib import ExitStack
from pathlib import Path

from buildkit.core.boundedread import read_regular
from buildkit.core.errors import BuildError
from buildkit.engine.api import get_engine
from buildkit.engine.buildx import BuildOptions, BuildResult
from buildkit.engine.specs import BuildSpec
from buildkit.oci.ocilayout import open_image
from buildkit.plan.aptpins import package_versions
from buildkit.release.sbom import STATUS_LIMIT, DebPackage, image_packages, installed
from buildkit.flows.pipeline import Prepared

BUILD_PACKAGES_TARGET = "build-packages"  # templates/_devel.j2


def versions(packages: list[DebPackage]) -> dict[str, str]:
    return package_versions((p.name, p.architecture, p.version) for p in packages)


def runtime_packages(result: BuildResult, platform: str) -> dict[str, str]:
    """The runtime image's packages: from the build's OCI archive, else from the engine's image."""
    with ExitStack() as stack:
        if result.oci_archive is not None and result.oci_archive.is_file():
            spec = f"oci:{result.oci_archive}"
        elif result.tags:
            spec = f"docker:{result.tags[0]}"
        else:
            raise BuildError("the built image is neither in an archive nor in the engine: its Debian packages "
                             "cannot be read")
        return versions(image_packages(open_image(spec, stack, platform=platform, engine=get_engine())))


def build_stage_packages(prepared: Prepared, options: BuildOptions) -> dict[str, str]:
    """The build stage's packages: its dpkg status, exported by the target build-packages."""
    plan, rendered = prepared.plan, prepared.rendered
    with tempfile.TemporaryDirectory(prefix="buildkit-build-packages-") as tmp:
        spec = BuildSpec(context=rendered.context_dir, dockerfile=rendered.dockerfile, platform=plan.request.platform,
                         target=BUILD_PACKAGES_TARGET,
                         build_args=(("SOURCE_DATE_EPOCH", str(plan.source_date_epoch)),),
                         named_contexts=tuple((name, str(path)) for name, path in rendered.named_contexts),
                         # the build's own cache sources: where its apt step came from (a remote builder's, say)
                         cache_from=tuple(e.replace("{variant}", plan.request.cache_name) for e in options.cache_from),
                         provenance=False, outputs=(f"type=local,dest={tmp}",))
        tail: list[str] = []
        finished = get_engine().build(spec, options.session(None), lambda line: tail.append(line) if line.strip()
                                      else None, stream=_Quiet(), tty=False)
        status = Path(tmp) / "build-packages" / "status"
        if finished.code != 0 or not status.is_file():
            last = next((t for t in reversed(tail) if "ERROR" in t), tail[-1] if tail else "no output")
            raise BuildError(f"the build stage's Debian packages could not be read (target "
                             f"{BUILD_PACKAGES_TARGET}, exit {finished.code}): {last.strip()[:300]}")
        text = read_regular(status, STATUS_LIMIT).decode("utf-8", "replace")
    return versions(installed([text]))


def debian_packages(prepared: Prepared, result: BuildResult, options: BuildOptions) -> dict[str, dict[str, str]]:
    """The lock entry's debian_packages: the build stage's and the runtime image's."""
    return {"build": build_stage_packages(prepared, options),
            "runtime": runtime_packages(result, prepared.plan.request.platform)}


class _Quiet:
    """The export's own log is not the user's: its lines go to on_line (for a failure's message) only."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False
