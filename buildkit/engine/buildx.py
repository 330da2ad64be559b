"""Running one build spec through the engine (api.Engine.build): its output, its digests, its archive.

docker-py cannot drive BuildKit, so the build is the buildx CLI. Output is streamed to the
user as it comes (runner.py, in the engine turn); the last lines are kept so a failure is reported in one line.

Two exporters:

* reproducible (the default on an engine with the containerd image store): `--output
  type=oci,dest=ARCHIVE,rewrite-timestamp=true` with `--provenance=false`; every file time in the
  layers is clamped to SOURCE_DATE_EPOCH, so the same inputs give the same manifest digest. The
  archive is then loaded with `docker load`, which on the containerd store keeps its bytes: the
  local image id, and a later `docker push`, have that same manifest digest.
* load: `--load` (type=docker). On the classic store this is the only way into the engine, and
  the engine recomputes the layers, so the digest is not reproducible.
"""

from __future__ import annotations

import collections
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from buildkit.core import livedisplay
from buildkit.core.compilework import CompileCurve
from buildkit.core.errors import BuildError, BuildkitError
from buildkit.core.progress import CompileMeter, ccache_stats, strip_ansi
from buildkit.engine.api import Engine, Host, Images, OutStream
from buildkit.engine.dockerengine import MIN_BUILDX as MIN_BUILDX  # re-exported
from buildkit.engine.dockerengine import parse_buildx_version as parse_buildx_version  # re-exported
from buildkit.engine.runner import wants_tty
from buildkit.engine.specs import BuildSession, BuildSpec
from buildkit.oci.ocilayout import OciArchive
from buildkit.plan.aptpins import REFUSED


@dataclass(frozen=True)
class BuildOptions:
    """How to run buildx, as opposed to what to build (the plan)."""
    builder: str = ""
    progress: str = "auto"
    load: bool = True
    push: bool = False
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()
    reproducible: bool = False  # OCI exporter with rewrite-timestamp, then `docker load`
    provenance: bool = False  # provenance attestation (it carries invocation ids: off for reproducible builds)
    no_cache: bool = False
    oci_archive: Path | None = None  # where the reproducible exporter writes (default: next to the metadata file)

    def session(self, metadata_file: Path | None) -> BuildSession:
        return BuildSession(builder=self.builder, progress=self.progress, metadata_file=metadata_file)


@dataclass(frozen=True)
class BuildResult:
    digest: str  # manifest digest (containerimage.digest)
    config_digest: str  # image id (containerimage.config.digest)
    tags: tuple[str, ...]
    seconds: float
    oci_archive: Path | None = None  # the reproducible exporter's archive, when that path was used
    ccache: tuple[int, int] | None = None  # (hits, cacheable calls) of this build's compile, when it ran
    compressed_size: int | None = None  # config + layers of the OCI archive, as a registry stores them
    tty: bool = False  # buildx drew its TTY display (its step logs, and so ccache's figures, are not kept)
    compile_curve: CompileCurve | None = None  # when each object finished (a Ninja compile seen to its end)
    finished_at: float = 0.0  # when the build ended (Unix time; it began `seconds` before): the provenance's times


def check_buildx(engine: Host) -> tuple[int, int, int]:
    """The installed buildx version; BuildError names what was found when missing or too old."""
    return engine.buildx_version()


def image_store(engine: Images) -> str:
    """"containerd" when the engine keeps images in containerd's store (its `docker load` and
    `docker push` keep an OCI archive's bytes), "classic" otherwise, "" when it cannot be asked."""
    return engine.image_store()


def oci_archive_path(options: BuildOptions, metadata_file: Path) -> Path:
    return options.oci_archive or metadata_file.parent / "image.oci.tar"


# The build step's marker of a failed compile (templates/_build.j2), after which the compiler's own output comes:
# run_build keeps the lines from it on for the layer above that explains a failure (verify/buildfailure.py)
COMPILE_FAILED = "the compile failed; the compiler's output from the first failure on"


_APT_ERROR = re.compile(r"(?:^|\s)E: ")
# A build step's own refusal (plan/aptpins.py REFUSED, and templates/_apt.j2): the rest of its line is the
# BuildError. The templates print it as "$(echo buildkit-refused):", so a RUN line that buildx echoes never matches.


class BuildFailed(BuildError):
    """A build that exited non-zero, with what its output said: its error lines (apt's `E:` ones too), the
    compiler's output from the failed-compile marker on, and buildx's most telling line. Its message is that
    line; what the failure means, and what to do, is said above the engine (verify/buildfailure.explain)."""

    def __init__(self, code: int, error_lines: tuple[str, ...], compile_lines: tuple[str, ...], last_line: str):
        super().__init__(f"docker buildx build failed (exit {code}): {last_line}")
        self.code, self.error_lines, self.compile_lines, self.last_line = code, error_lines, compile_lines, last_line


def last_error_line(lines: Sequence[str]) -> str:
    """The most telling line of buildx's output: its ERROR line, else the last non-empty one."""
    for line in reversed(lines):
        if "ERROR:" in line or line.startswith("error:"):
            return line.strip()
    for line in reversed(lines):
        if line.strip():
            return line.strip()
    return "no output"


def run_build(spec: BuildSpec, session: BuildSession, engine: Engine, *, stream: OutStream | None = None,
              last_seconds: float | None = None, last_curve: CompileCurve | None = None,
              cuda_objects: int | None = None) -> BuildResult:
    """Build spec, streaming buildx's output to `stream` (stderr by default). With spec.oci_archive (the
    reproducible exporter), the digest is the archive's manifest digest and, with spec.load, the archive
    is loaded into the engine under the tags.

    When stream is a terminal (and --progress auto/tty), buildx runs on a pseudo-terminal and draws
    its own display; otherwise its plain output is piped through, with a compile status line now and
    then (progress.CompileMeter; last_seconds, the lock's last build time, makes the estimate)."""
    display = livedisplay.active() if stream is None else None
    if display is not None and session.progress == "auto":
        # buildkit draws the display from buildx's plain lines, which go nowhere else
        session = replace(session, progress="plain")
        stream = livedisplay.sink(display)
    else:
        display = None
    stream = sys.stderr if stream is None else stream
    tail: collections.deque[str] = collections.deque(maxlen=40)
    stats_lines: list[str] = []
    meter = CompileMeter(last_seconds=last_seconds, last_curve=last_curve, cuda_objects=cuda_objects)
    tty = wants_tty(session.progress, stream)
    if display is not None:
        display.state.meter = meter

    hints: list[str] = []

    refused: list[str] = []
    compile_lines: list[str] = []  # from the build step's failed-compile marker on

    def on_line(clean: str) -> None:
        tail.append(clean)
        if REFUSED in clean and not refused:
            refused.append(clean.split(REFUSED, 1)[1].strip())
        # error lines, and apt's (E: Unable to locate package gcc-14), whose known causes have a hint
        if ("error" in clean or _APT_ERROR.search(clean)) and len(hints) < 200:
            hints.append(clean)
        if (COMPILE_FAILED in clean or compile_lines) and len(compile_lines) < 400:
            compile_lines.append(clean)
        if "Hits:" in clean or "cache hit" in clean or "cache miss" in clean:
            stats_lines.append(clean)
        status = meter.feed(clean)
        if display is not None:
            display.state.feed(clean)
        elif status is not None:
            if tty:  # the terminal title: printing would tear buildx's display
                stream.write(f"\x1b]0;buildkit: {status}\x07")
            else:
                stream.write(f"buildkit: {status}\n")

    finished = engine.build(spec, session, on_line, stream=stream, tty=tty)
    code, seconds, finished_at = finished.code, finished.seconds, time.time()
    if tty:
        tail = collections.deque((strip_ansi(t) for t in tail), maxlen=40)
    if code != 0:
        if refused:
            raise BuildError(refused[0])
        raise BuildFailed(code, tuple(hints), tuple(compile_lines), last_error_line(list(tail)))
    made = finished.images.get("")
    if made is None:
        raise BuildError("the build succeeded but the engine reported no image it made")
    digest, config_digest = made.manifest, made.config
    oci_archive, tags = spec.oci_archive, spec.tags
    if oci_archive is not None:
        digest = _archive_digest(oci_archive, digest)
        if spec.load:
            engine.load(oci_archive, tags, stream=stream)
        else:
            tags = ()
    return BuildResult(digest=digest, config_digest=config_digest, tags=tuple(tags), seconds=seconds,
                       oci_archive=oci_archive, ccache=ccache_stats(stats_lines),
                       compressed_size=archive_size(oci_archive), tty=tty, compile_curve=meter.curve(),
                       finished_at=finished_at)


def _archive_digest(archive: Path, reported: str) -> str:
    """The manifest digest of the exporter's archive (must agree with buildx's metadata)."""
    try:
        with OciArchive(archive) as layout:
            digest = layout.manifest_digest(platform=None)
    except BuildkitError as exc:
        raise BuildError(f"the OCI archive of the build cannot be read: {exc}") from None
    if reported and reported != digest:
        raise BuildError(f"buildx reported digest {reported} but its archive holds {digest}")
    return digest


def archive_size(archive: Path | None) -> int | None:
    """Compressed size of the image in an OCI archive: config plus layers, as a registry stores it."""
    if archive is None:
        return None
    try:
        with OciArchive(archive) as layout:
            image = layout.image(None)
            return len(image.config_bytes) + sum(d.size for d in image.layers)
    except (BuildkitError, OSError):
        return None
