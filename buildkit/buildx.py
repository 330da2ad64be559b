"""Drive `docker buildx build` through subprocess with an argv list; read digests from --metadata-file.

docker-py cannot drive BuildKit, so the build is the buildx CLI. Output is streamed to the
user as it comes; the last lines are kept so a failure is reported in one line.
"""

from __future__ import annotations

import collections
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .errors import BuildError
from .plan import BuildPlan
from .render import RenderResult

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


@dataclass(frozen=True)
class BuildResult:
    digest: str  # manifest digest (containerimage.digest)
    config_digest: str  # image id (containerimage.config.digest)
    tags: tuple[str, ...]
    seconds: float
    metadata: dict = field(default_factory=dict)


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
    for tag in (*plan.tags, *extra_tags):
        argv += ["--tag", tag]
    for name, path in rendered.named_contexts:
        argv += ["--build-context", f"{name}={path}"]
    for entry in options.cache_from:
        argv += ["--cache-from", entry]
    for entry in options.cache_to:
        argv += ["--cache-to", entry]
    argv += ["--metadata-file", str(metadata_file), "--progress", options.progress]
    if options.load:
        argv.append("--load")
    if options.push:
        argv.append("--push")
    argv += ["--file", str(rendered.dockerfile), str(rendered.context_dir)]
    return argv


def _last_error(lines: Sequence[str]) -> str:
    """The most telling line of buildx's output: its ERROR line, else the last non-empty one."""
    for line in reversed(lines):
        if "ERROR:" in line or line.startswith("error:"):
            return line.strip()
    for line in reversed(lines):
        if line.strip():
            return line.strip()
    return "no output"


def run_build(argv: list[str], metadata_file: Path, tags: Sequence[str], *, stream=None) -> BuildResult:
    """Run buildx, streaming its output to `stream` (stderr by default)."""
    stream = sys.stderr if stream is None else stream
    tail: collections.deque[str] = collections.deque(maxlen=40)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", bufsize=1)
    except FileNotFoundError:
        raise BuildError(f"cannot run {argv[0]!r}: not found") from None
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            stream.write(line)
            tail.append(line.rstrip("\n"))
        code = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        raise
    seconds = time.monotonic() - start
    if code != 0:
        raise BuildError(f"docker buildx build failed (exit {code}): {_last_error(list(tail))}")
    try:
        metadata = json.loads(metadata_file.read_text())
    except (OSError, ValueError) as exc:
        raise BuildError(f"buildx wrote no readable metadata file {metadata_file}: {exc}") from None
    digest = metadata.get("containerimage.digest", "")
    config_digest = metadata.get("containerimage.config.digest", "")
    if not digest and not config_digest:
        raise BuildError(f"buildx metadata has no image digest (keys: {', '.join(sorted(metadata))})")
    return BuildResult(digest=digest, config_digest=config_digest, tags=tuple(tags), seconds=seconds,
                       metadata=metadata)
