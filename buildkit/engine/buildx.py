"""Drive `docker buildx build` through subprocess with an argv list; read digests from --metadata-file.

docker-py cannot drive BuildKit, so the build is the buildx CLI. Output is streamed to the
user as it comes; the last lines are kept so a failure is reported in one line.

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
import fcntl
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from buildkit.core.errors import BuildError
from buildkit.plan.buildplan import BuildPlan
from buildkit.plan.render import RenderResult

MIN_BUILDX = (0, 10, 0)  # --build-context, --metadata-file digests, cache mounts


@dataclass(frozen=True)
class BuildOptions:
    """How to run buildx, as opposed to what to build (the plan)."""
    builder: str = ""
    progress: str = "auto"
    load: bool = True
    push: bool = False
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()
    docker: str = "docker"
    reproducible: bool = False  # OCI exporter with rewrite-timestamp, then `docker load`
    provenance: bool = False  # provenance attestation (it carries invocation ids: off for reproducible builds)
    no_cache: bool = False
    oci_archive: Path | None = None  # where the reproducible exporter writes (default: next to the metadata file)


@dataclass(frozen=True)
class BuildResult:
    digest: str  # manifest digest (containerimage.digest)
    config_digest: str  # image id (containerimage.config.digest)
    tags: tuple[str, ...]
    seconds: float
    metadata: dict = field(default_factory=dict)
    oci_archive: Path | None = None  # the reproducible exporter's archive, when that path was used
    ccache: tuple[int, int] | None = None  # (hits, cacheable calls) of this build's compile, when it ran
    compressed_size: int | None = None  # config + layers of the OCI archive, as a registry stores them
    tty: bool = False  # buildx drew its TTY display (its step logs, and so ccache's figures, are not kept)


def parse_buildx_version(text: str) -> tuple[int, int, int] | None:
    """'github.com/docker/buildx v0.13.1 abc' or '... 0.13.1+ds1 ...' -> (0, 13, 1)."""
    match = re.search(r"\bv?(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(x) for x in match.groups()) if match else None  # type: ignore[return-value]


def check_buildx(docker: str = "docker") -> tuple[int, int, int]:
    """The installed buildx version; BuildError names what was found when missing or too old."""
    if shutil.which(docker) is None:
        raise BuildError(f"the docker CLI ({docker!r}) is not on PATH; install Docker with the buildx plugin")
    try:
        proc = subprocess.run([docker, "buildx", "version"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise BuildError("`docker buildx version` did not answer within 60 s") from None
    text = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        first = text.splitlines()[0] if text else f"exit {proc.returncode}"
        raise BuildError(f"docker buildx is not installed or does not work ({first}); "
                         f"buildx {'.'.join(map(str, MIN_BUILDX))} or newer is needed")
    version = parse_buildx_version(text)
    if version is None or version < MIN_BUILDX:
        found = ".".join(map(str, version)) if version else repr(text[:80])
        raise BuildError(f"docker buildx {found} is too old; buildx {'.'.join(map(str, MIN_BUILDX))} "
                         "or newer is needed")
    return version


CONTAINERD_SNAPSHOTTER = "io.containerd.snapshotter.v1"


@functools.lru_cache(maxsize=None)
def image_store(docker: str = "docker") -> str:
    """"containerd" when the engine keeps images in containerd's store (its `docker load` and
    `docker push` keep an OCI archive's bytes), "classic" otherwise, "" when it cannot be asked."""
    try:
        proc = subprocess.run([docker, "info", "--format", "{{json .DriverStatus}}"], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if proc.returncode != 0:
        return ""
    return "containerd" if CONTAINERD_SNAPSHOTTER in proc.stdout else "classic"


def oci_archive_path(options: BuildOptions, metadata_file: Path) -> Path:
    return options.oci_archive or metadata_file.parent / "image.oci.tar"


def oci_output(dest: Path, names: Sequence[str] = ()) -> str:
    """--output value of the reproducible exporter (names become the tags `docker load` sets)."""
    value = f"type=oci,dest={dest},rewrite-timestamp=true"
    if names:
        value = f'{value},"name={",".join(names)}"'
    return value


def buildx_argv(plan: BuildPlan, rendered: RenderResult, options: BuildOptions,
                metadata_file: Path, extra_tags: Sequence[str] = ()) -> list[str]:
    """The exact command line; `buildkit build --print` shows it."""
    argv = [options.docker, "buildx", "build"]
    if options.builder:
        argv += ["--builder", options.builder]
    argv += ["--platform", plan.request.platform, "--target", plan.request.target]
    argv += ["--build-arg", f"SOURCE_DATE_EPOCH={plan.source_date_epoch}"]
    for key, value in plan.labels:
        argv += ["--label", f"{key}={value}"]
    tags = (*plan.tags, *extra_tags)
    if not options.reproducible:
        for tag in tags:
            argv += ["--tag", tag]
    for name, path in rendered.named_contexts:
        argv += ["--build-context", f"{name}={path}"]
    for entry in options.cache_from:  # {variant}: one cache per variant (a shared ref would be overwritten)
        argv += ["--cache-from", entry.replace("{variant}", plan.request.variant)]
    for entry in options.cache_to:
        argv += ["--cache-to", entry.replace("{variant}", plan.request.variant)]
    argv += ["--metadata-file", str(metadata_file), "--progress", options.progress]
    argv.append(f"--provenance={'true' if options.provenance else 'false'}")
    if options.no_cache:
        argv.append("--no-cache")
    if options.reproducible:
        # tags travel as the archive's image names; `docker load` sets them
        argv += ["--output", oci_output(oci_archive_path(options, metadata_file),
                                        tags if options.load else ())]
    else:
        if options.load:
            argv.append("--load")
        if options.push:
            argv.append("--push")
    argv += ["--file", str(rendered.dockerfile), str(rendered.context_dir)]
    return argv


def last_error_line(lines: Sequence[str]) -> str:
    """The most telling line of buildx's output: its ERROR line, else the last non-empty one."""
    for line in reversed(lines):
        if "ERROR:" in line or line.startswith("error:"):
            return line.strip()
    for line in reversed(lines):
        if line.strip():
            return line.strip()
    return "no output"


ENGINE_LOCK_ENV = "LLAMA_BUILDKIT_ENGINE_LOCK"


def engine_lock_path() -> Path:
    return Path(os.environ.get(ENGINE_LOCK_ENV) or Path(tempfile.gettempdir()) / "llama-buildkit-buildx.lock")


@contextmanager
def engine_turn(exclusive: bool, stream=None) -> Iterator[None]:
    """Builds share the engine; a --no-cache build takes it alone.

    The BuildKit of Docker Engine 26.1 (v0.13) can panic in Job.walkProvenance, taking dockerd
    down, when a --no-cache build runs while another build solves the same steps (seen twice on
    this machine; fixed upstream by moby/buildkit#5606). Every build buildkit starts holds a shared
    flock on one file; a --no-cache build holds it exclusively. Builds started by other tools do
    not take part."""
    path = engine_lock_path()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield  # no lock file possible (read-only tmp): build anyway
        return
    try:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            what = "other buildkit builds to finish (a --no-cache build runs alone)" if exclusive else \
                "a --no-cache build to finish"
            (stream or sys.stderr).write(f"buildkit: waiting for {what}\n")
            fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)


def wants_tty(argv: Sequence[str], stream) -> bool:
    """buildx draws its own TTY display when its output is a terminal and --progress is auto or tty."""
    try:
        progress = argv[list(argv).index("--progress") + 1]
    except (ValueError, IndexError):
        progress = "auto"
    try:
        return progress in ("auto", "tty") and stream.isatty()
    except (AttributeError, ValueError):
        return False


def _lines_from_pty(proc: subprocess.Popen, master: int, stream) -> Iterator[str]:
    """Pass buildx's TTY output through to the terminal byte for byte; yield it as text lines."""
    out = getattr(stream, "buffer", None)
    pending = ""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            data = b""
        if not data:
            break
        if out is not None:
            out.write(data)
            out.flush()
        else:
            stream.write(data.decode("utf-8", "replace"))
        pending += data.decode("utf-8", "replace")
        *lines, pending = pending.split("\n")
        yield from lines
    if pending:
        yield pending


def _popen_tty(argv: list[str], stream) -> tuple[subprocess.Popen, int]:
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    try:
        size = fcntl.ioctl(stream.fileno(), termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, size)
    except (OSError, AttributeError, ValueError):
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    finally:
        os.close(slave)
    return proc, master


def run_build(argv: list[str], metadata_file: Path, tags: Sequence[str], *, stream=None,
              oci_archive: Path | None = None, load: bool = True, docker: str = "docker",
              last_seconds: float | None = None) -> BuildResult:
    """Run buildx, streaming its output to `stream` (stderr by default). With oci_archive (the
    reproducible exporter), the digest is the archive's manifest digest and, with load, the archive
    is loaded into the engine under the tags.

    When stream is a terminal (and --progress auto/tty), buildx runs on a pseudo-terminal and draws
    its own display; otherwise its plain output is piped through, with a compile status line now and
    then (progress.CompileMeter; last_seconds, the lock's last build time, makes the estimate)."""
    from buildkit.core.progress import CompileMeter, archive_size, ccache_stats

    stream = sys.stderr if stream is None else stream
    tail: collections.deque[str] = collections.deque(maxlen=40)
    stats_lines: list[str] = []
    meter = CompileMeter(last_seconds=last_seconds)
    tty = wants_tty(argv, stream)
    with engine_turn("--no-cache" in argv, stream):
        start = time.monotonic()
        master = -1
        try:
            if tty:
                proc, master = _popen_tty(argv, stream)
                lines: Iterator[str] = _lines_from_pty(proc, master, stream)
            else:
                proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        errors="replace", bufsize=1)
                assert proc.stdout is not None
                lines = iter(proc.stdout)
        except FileNotFoundError:
            raise BuildError(f"cannot run {argv[0]!r}: not found") from None
        try:
            for line in lines:
                if not tty:
                    stream.write(line)
                clean = line.rstrip("\n")
                tail.append(clean)
                if "Hits:" in clean or "cache hit" in clean or "cache miss" in clean:
                    stats_lines.append(clean)
                status = meter.feed(clean)
                if status is not None:
                    if tty:  # the terminal title: printing would tear buildx's display
                        stream.write(f"\x1b]0;buildkit: {status}\x07")
                    else:
                        stream.write(f"buildkit: {status}\n")
            code = proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait()
            raise
        finally:
            if master >= 0:
                os.close(master)
        seconds = time.monotonic() - start
    if tty:
        from buildkit.core.progress import strip_ansi

        tail = collections.deque((strip_ansi(t) for t in tail), maxlen=40)
    if code != 0:
        raise BuildError(f"docker buildx build failed (exit {code}): {last_error_line(list(tail))}")
    try:
        metadata = json.loads(metadata_file.read_text())
    except (OSError, ValueError) as exc:
        raise BuildError(f"buildx wrote no readable metadata file {metadata_file}: {exc}") from None
    digest = metadata.get("containerimage.digest", "")
    config_digest = metadata.get("containerimage.config.digest", "")
    if oci_archive is not None:
        digest = _archive_digest(oci_archive, digest)
        if load:
            docker_load(oci_archive, tags, docker=docker, stream=stream)
        else:
            tags = ()
    if not digest and not config_digest:
        raise BuildError(f"buildx metadata has no image digest (keys: {', '.join(sorted(metadata))})")
    return BuildResult(digest=digest, config_digest=config_digest, tags=tuple(tags), seconds=seconds,
                       metadata=metadata, oci_archive=oci_archive, ccache=ccache_stats(stats_lines),
                       compressed_size=archive_size(oci_archive), tty=tty)


def _archive_digest(archive: Path, reported: str) -> str:
    """The manifest digest of the exporter's archive (must agree with buildx's metadata)."""
    from buildkit.core.errors import BuildkitError
    from buildkit.oci.ocilayout import OciArchive

    try:
        with OciArchive(archive) as layout:
            digest = layout.manifest_digest(platform=None)
    except BuildkitError as exc:
        raise BuildError(f"the OCI archive of the build cannot be read: {exc}") from None
    if reported and reported != digest:
        raise BuildError(f"buildx reported digest {reported} but its archive holds {digest}")
    return digest


def docker_load(archive: Path, tags: Sequence[str], *, docker: str = "docker", stream=None) -> None:
    """`docker load` the OCI archive (its image names are the tags) and check every tag arrived."""
    stream = sys.stderr if stream is None else stream
    proc = subprocess.run([docker, "load", "--input", str(archive)], capture_output=True, text=True)
    stream.write(proc.stdout)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise BuildError(f"docker load of the built image failed: {last}")
    for tag in tags:
        check = subprocess.run([docker, "image", "inspect", "--format", "{{.Id}}", tag], capture_output=True,
                               text=True)
        if check.returncode != 0:
            raise BuildError(f"docker load did not create the tag {tag}")
