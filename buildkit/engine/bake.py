"""Running `docker buildx bake` (through the engine, in the engine turn) and reading its log.

`docker buildx bake` builds every target in one BuildKit session, in parallel. BuildKit
cancels every target when one fails (measured with buildx 0.13: the others end CANCELED and no
metadata file is written; one caught exporting may instead show the session's error, "failed to copy to
tar: rpc error: code = Unavailable"), so after a failed bake the targets that did not fail themselves
are run again one bake each, in parallel; what they had finished comes from the build cache. With
buildx's docker driver, `--load` (output type=docker) of several targets in one bake works
(checked with buildx 0.13.1 and the containerd image store: each target is loaded under its tags).
A target built through the OCI exporter is loaded with `Engine.load`, like a single build
(that the two give the same digest is not tested here).

Every bake holds the engine turn (runner.engine_turn) of the images its targets start from, exclusively
when a target has no-cache.
"""

from __future__ import annotations

import collections
import json
import re
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildkit.core.errors import BuildError
from buildkit.engine.api import Engine, ImageDigests, OutStream
from buildkit.engine.bakefile import oci_dest, target_tags
from buildkit.engine.buildx import last_error_line, BuildResult, BuildOptions
from buildkit.engine.runner import dockerfile_images

if TYPE_CHECKING:
    from buildkit.engine.specs import BuildSession

_STEP = re.compile(r"^#(\d+) \[([A-Za-z0-9_-]+)[ \]]")
_STEP_ERROR = re.compile(r"^#(\d+) ERROR: (.*)$")
_STEP_LINE = re.compile(r"^#(\d+) \d+\.\d+ (.*)$")  # a line a RUN step printed, with its timestamp
# A --cache-from import: BuildKit marks it ERROR when the ref is missing or unreadable (a first build), then
# builds without that cache, so its error is not the target's.
_CACHE_IMPORT = re.compile(r"^#\d+ \[[A-Za-z0-9_-]+\] importing cache manifest from ")
_TELLING = re.compile(r"(\berror\b|Error:|CMake Error|fatal)", re.IGNORECASE)
# An error a target shows when the bake was cancelled under it (another target failed), not one of its
# own: BuildKit's cancellation, or the session closing mid-export ("failed to copy to tar: rpc error:
# code = Unavailable ... connection reset by peer", seen with buildx 0.13 while a target exported).
_CANCELLED = re.compile(r"context canceled|code = Canceled|code = Unavailable|connection reset by peer"
                        r"|^CANCELED\b", re.IGNORECASE)


@dataclass(frozen=True)
class TargetOutcome:
    name: str
    result: BuildResult | None  # None when it failed
    error: str  # "" when it was built
    seconds: float  # wall time of the bake that built (or failed) it; bakes run targets in parallel
    isolated: bool  # built in a bake of its own, after a bake of several targets failed

    @property
    def ok(self) -> bool:
        return self.result is not None


class _Run:
    """One `buildx bake` process: its output streamed, steps mapped to targets, errors per target."""

    def __init__(self, bake_file: Path, names: Sequence[str], session: BuildSession, stream: OutStream,
                 lock: threading.Lock, engine: Engine, exclusive: bool = False):
        self.bake_file, self.names, self.session = bake_file, list(names), session
        self.stream, self.lock = stream, lock
        self.engine, self.exclusive = engine, exclusive
        self.tail: collections.deque[str] = collections.deque(maxlen=60)
        self.step_target: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        self.step_name: dict[str, str] = {}
        self.step_lines: dict[str, collections.deque[str]] = {}
        self.cache_imports: set[str] = set()
        self.code = -1
        self.seconds = 0.0
        self.images: Mapping[str, ImageDigests] = {}

    def run(self) -> _Run:
        finished = self.engine.bake(self.bake_file, self.names, self.session, self._parse, stream=self.stream,
                                    exclusive=self.exclusive, write_lock=self.lock)
        self.code, self.seconds, self.images = finished.code, finished.seconds, finished.images
        return self

    def _parse(self, line: str) -> None:
        self.tail.append(line)
        if m := _STEP.match(line):
            self.step_target.setdefault(m[1], m[2])
            self.step_name.setdefault(m[1], line[len(m[1]) + 2:].split("]", 1)[0] + "]")
            if _CACHE_IMPORT.match(line):
                self.cache_imports.add(m[1])
        elif m := _STEP_ERROR.match(line):
            target = self.step_target.get(m[1])
            if target and target not in self.errors and m[1] not in self.cache_imports \
                    and not _CANCELLED.search(m[2]):
                self.errors[target] = _describe_failure(self.step_name.get(m[1], ""), m[2].strip(),
                                                        self.step_lines.get(m[1], ()))
        elif m := _STEP_LINE.match(line):
            lines = self.step_lines.setdefault(m[1], collections.deque(maxlen=400))
            lines.append(m[2])


def _describe_failure(step: str, error: str, lines: Iterable[str]) -> str:
    """One line: the step, the first compiler/CMake error it printed, and the exit code."""
    code = re.search(r"exit code: (\d+)", error)
    telling = next((ln.strip() for ln in lines if _TELLING.search(ln)), "")
    if not telling:
        return f"{step} {error}".strip()
    return f"{step} {telling}" + (f" (exit code {code[1]})" if code else "")


def _results(run: _Run, names: Iterable[str], document: dict[str, Any], isolated: bool,
             engine: Engine, stream: OutStream, lock: threading.Lock) -> dict[str, TargetOutcome]:
    seconds, finished_at = run.seconds, time.time()
    out = {}
    for name in names:
        made = run.images.get(name)
        digest, config = (made.manifest, made.config) if made is not None else ("", "")
        target = document["target"][name]
        tags = target_tags(target)
        archive = oci_dest(target)
        error = ""
        if not digest and not config:
            error = f"the bake reported no image it made for {name}"
        elif archive is not None:
            error = _load(engine, archive, tags, stream, lock)
        if error:
            out[name] = TargetOutcome(name, None, error, seconds, isolated)
        else:
            archive_field: dict[str, Any] = ({"oci_archive": Path(archive)} if archive and
                                             "oci_archive" in BuildResult.__dataclass_fields__ else {})
            out[name] = TargetOutcome(name, BuildResult(digest=digest, config_digest=config, tags=tags,
                                                        seconds=seconds, finished_at=finished_at, **archive_field),
                                      "", seconds, isolated)
    return out


def _load(engine: Engine, archive: str, tags: Sequence[str], stream: OutStream, lock: threading.Lock) -> str:
    """Load an OCI archive the exporter wrote (its image names become tags); "" or the error."""
    with lock:  # one writer at a time: the loads of parallel retries share the stream
        try:
            engine.load(Path(archive), tags, stream=stream)
        except BuildError as exc:
            return str(exc)
    return ""


def needs_engine_alone(document: dict[str, Any], names: Sequence[str]) -> bool:
    """A target with no-cache takes the engine turn exclusively (see runner.py)."""
    return any(document["target"][n].get("no-cache") for n in names)


def bake_images(bake_file: Path, document: dict[str, Any], names: Sequence[str]) -> frozenset[str] | None:
    """The images the targets' Dockerfiles start from (runner.starting_images); None when one is not known."""
    images: set[str] = set()
    for name in names:
        target = document["target"][name]
        context = bake_file.parent / target.get("context", ".")
        found = dockerfile_images(context / target.get("dockerfile", "Dockerfile"))
        if found is None:
            return None
        images |= found
    return frozenset(images)


def run_bake(engine: Engine, bake_file: Path, names: Sequence[str], options: BuildOptions, work_dir: Path, *,
             stream: OutStream | None = None, isolate: bool = True) -> dict[str, TargetOutcome]:
    """Bake the targets together; if that fails, bake each target that did not fail by itself alone.

    Returns an outcome per target; never raises for a failed target (BuildError only when buildx
    itself cannot be run)."""
    stream = sys.stderr if stream is None else stream
    document = json.loads(bake_file.read_text())
    # once for the bake and its retries, for the images every target starts from
    with engine.turn(needs_engine_alone(document, names), stream, bake_images(bake_file, document, names)):
        return _bake(bake_file, names, options, work_dir, document, engine, stream, isolate)


def _bake(bake_file: Path, names: Sequence[str], options: BuildOptions, work_dir: Path, document: dict[str, Any],
          engine: Engine, stream: OutStream, isolate: bool) -> dict[str, TargetOutcome]:
    lock = threading.Lock()
    exclusive = needs_engine_alone(document, names)
    work_dir.mkdir(parents=True, exist_ok=True)
    metadata = work_dir / "bake-metadata.json"
    metadata.unlink(missing_ok=True)
    first = _Run(bake_file, names, options.session(metadata), stream, lock, engine, exclusive).run()
    if first.code == 0:
        return _results(first, names, document, False, engine, stream, lock)
    if len(names) == 1 or not isolate:
        error = first.errors.get(names[0]) if len(names) == 1 else None
        message = error or last_error_line(list(first.tail))
        return {n: TargetOutcome(n, None, f"docker buildx bake failed (exit {first.code}): {message}",
                                 first.seconds, False) for n in names}
    outcomes: dict[str, TargetOutcome] = {}
    for name, error in first.errors.items():  # failed on its own, not cancelled: no second try
        if name in names:
            outcomes[name] = TargetOutcome(name, None, f"build failed: {error}", first.seconds, False)
    retry = [n for n in names if n not in outcomes]
    with lock:
        stream.write(f"buildkit: the bake of {len(names)} targets failed ({', '.join(outcomes) or 'unknown target'}); "
                     f"baking {', '.join(retry) or 'nothing'} again one by one (finished steps come from the "
                     "cache)\n")
    runs: dict[str, _Run] = {}
    errors: dict[str, BaseException] = {}

    def one(name: str) -> None:
        meta = work_dir / f"bake-metadata-{name}.json"
        meta.unlink(missing_ok=True)
        try:
            runs[name] = _Run(bake_file, [name], options.session(meta), stream, lock, engine, exclusive).run()
        except BaseException as exc:  # noqa: BLE001 - reported as this target's failure
            errors[name] = exc

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in retry]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in retry:
        if name in errors:
            outcomes[name] = TargetOutcome(name, None, str(errors[name]), 0.0, True)
            continue
        run = runs[name]
        if run.code == 0:
            outcomes.update(_results(run, [name], document, True, engine, stream, lock))
        else:
            message = run.errors.get(name) or last_error_line(list(run.tail))
            outcomes[name] = TargetOutcome(name, None, f"build failed: {message}", run.seconds, True)
    return {n: outcomes[n] for n in names}
