"""The build matrix as a `docker buildx bake` file, and running it.

Matrix: `matrix.archs` x `matrix.cuda_versions` x `matrix.targets` (cpu ignores the CUDA
versions). Each combination is one *variant*, named like its tags: `cuda13.1-sm120`, `cpu`, and
`<that>-<target>` for targets other than `server` (the image most users run keeps the short name).
An arch the CUDA version cannot build is left out of the matrix with the reason, not an error.

Bake file: one target per variant (`docker-bake.json`, bake's JSON form). Variants of the same
platform stay separate targets: buildx picks builder nodes by platform, so only separate targets
can land on separate nodes of a remote or Kubernetes builder (`--builder`).

Each target is a translation of the exact `docker buildx build` argv that `buildkit build` runs
(`buildx.buildx_argv`), so bake and build cannot drift apart, and a flag bake cannot express is an
error rather than silently dropped.

Running: `docker buildx bake` builds every target in one BuildKit session, in parallel. BuildKit
cancels every target when one fails (measured with buildx 0.13: the others end CANCELED and no
metadata file is written), so after a failed bake the targets that did not fail themselves are
run again one bake each, in parallel; what they had finished comes from the build cache. With
buildx's docker driver, `--load` (output type=docker) of several targets in one bake works
(checked with buildx 0.13.1 and the containerd image store: each target is loaded under its tags).
When `buildkit build` goes through the reproducible OCI exporter (`--output type=oci,dest=...,
rewrite-timestamp=true`, see buildx.py), so does each bake target: its archive carries the variant's
tags as image names and is `docker load`-ed after the bake, the same path as a single build
(that the two give the same digest is not tested here).
"""

from __future__ import annotations

import collections
import csv
import io
import json
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from buildkit.plan.archs import check_cuda_support, get_arch
from buildkit.engine.buildx import last_error_line
from buildkit.plan.config import ResolvedConfig
from buildkit.core.errors import ArchError, BuildError, ConfigError
from buildkit.plan.buildplan import BuildRequest, make_request

if TYPE_CHECKING:
    from buildkit.engine.buildx import BuildOptions, BuildResult

_TARGET_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]")
_STEP = re.compile(r"^#(\d+) \[([A-Za-z0-9_-]+)[ \]]")
_STEP_ERROR = re.compile(r"^#(\d+) ERROR: (.*)$")
_STEP_LINE = re.compile(r"^#(\d+) \d+\.\d+ (.*)$")  # a line a RUN step printed, with its timestamp
_TELLING = re.compile(r"(\berror\b|Error:|CMake Error|fatal)", re.IGNORECASE)


@dataclass(frozen=True)
class Variant:
    key: str  # the variant as tags name it: cpu, cuda13.1-sm120, cuda13.1-sm120-full
    cfg: ResolvedConfig  # the configuration with build.arch / cuda_version / target of this variant
    request: BuildRequest

    @property
    def target_name(self) -> str:
        """The bake target name (bake allows letters, digits, '_' and '-' only)."""
        return bake_target_name(self.key)

    def with_values(self, origin: str, **values) -> "Variant":
        cfg = with_values(self.cfg, origin, **values)
        return Variant(key=self.key, cfg=cfg, request=make_request(cfg))


def bake_target_name(key: str) -> str:
    return _TARGET_NAME_BAD.sub("_", key)


def variant_key(request: BuildRequest) -> str:
    return request.tag_variant


def with_values(cfg: ResolvedConfig, origin: str, **values) -> ResolvedConfig:
    """cfg with some keys replaced (dotted names given with '__' for '.': build__arch=...)."""
    new_values, new_origins = dict(cfg.values), dict(cfg.origins)
    for name, value in values.items():
        dotted = name.replace("__", ".")
        if dotted not in new_values:
            raise ConfigError(f"unknown key {dotted!r}")
        new_values[dotted], new_origins[dotted] = value, origin
    return replace(cfg, values=new_values, origins=new_origins)


def matrix_variants(cfg: ResolvedConfig) -> tuple[list[Variant], list[tuple[str, str]]]:
    """(variants in matrix order, [(combination, why it was left out)]). Empty matrix: ConfigError."""
    archs, cudas, targets = cfg["matrix.archs"], cfg["matrix.cuda_versions"], cfg["matrix.targets"]
    for name, values in (("matrix.archs", archs), ("matrix.cuda_versions", cudas), ("matrix.targets", targets)):
        if not values:
            raise ConfigError(f"{name} is empty; the build matrix needs at least one value")
    for target in targets:
        if target not in ("server", "full", "light"):
            raise ConfigError(f"matrix.targets: {target!r} is not one of server, full, light")
    variants: list[Variant] = []
    excluded: list[tuple[str, str]] = []
    seen: set[str] = set()
    for arch_name in archs:
        arch = get_arch(arch_name)  # an unknown arch is an error, naming the choices
        for cuda in (cudas if arch.is_cuda else cudas[:1]):
            if arch.is_cuda:
                try:
                    check_cuda_support(arch, cuda)
                except ArchError as exc:
                    excluded.append((f"{arch.name} with CUDA {cuda}", str(exc)))
                    continue
            for target in targets:
                sub = with_values(cfg, "matrix", build__arch=arch.name, build__cuda_version=cuda,
                                  build__target=target)
                request = make_request(sub)
                key = variant_key(request)
                if key in seen:
                    continue
                seen.add(key)
                variants.append(Variant(key=key, cfg=sub, request=request))
    if not variants:
        raise ConfigError("the build matrix is empty: " + "; ".join(f"{c}: {why}" for c, why in excluded))
    return variants, excluded


# ---------------------------------------------------------------- buildx build argv -> bake target

_SKIPPED_FLAGS = {"--metadata-file", "--progress", "--builder"}  # bake-level, given to `buildx bake` itself
_BOOLEAN_FLAGS = {"--load": ("output", "type=docker"), "--push": ("output", "type=registry"),
                  "--no-cache": ("no-cache", True), "--pull": ("pull", True)}
_LIST_FLAGS = {"--platform": "platforms", "--tag": "tags", "--cache-from": "cache-from", "--cache-to": "cache-to",
               "--output": "output", "--secret": "secret", "--ssh": "ssh", "--attest": "attest",
               "--annotation": "annotations"}
_MAP_FLAGS = {"--build-arg": "args", "--label": "labels", "--build-context": "contexts"}
_SCALAR_FLAGS = {"--target": "target", "--file": "dockerfile", "--network": "network", "--shm-size": "shm-size"}


def bake_target_from_argv(argv: Sequence[str]) -> dict:
    """The bake target that builds what `docker buildx build ARGV` builds."""
    args = list(argv)
    try:
        start = args.index("build") + 1
    except ValueError:
        raise BuildError(f"not a buildx build command: {' '.join(args[:4])}") from None
    target: dict = {}
    context: str | None = None
    i = start
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            if context is not None:
                raise BuildError(f"two build contexts in the buildx command: {context} and {arg}")
            context = arg
            i += 1
            continue
        flag, eq, inline = arg.partition("=")
        if flag in _BOOLEAN_FLAGS:
            field, value = _BOOLEAN_FLAGS[flag]
            if field == "output":
                target.setdefault("output", []).append(value)
            else:
                target[field] = value
            i += 1
            continue
        if eq:
            value, i = inline, i + 1
        else:
            if i + 1 >= len(args):
                raise BuildError(f"buildx flag {flag} has no value")
            value, i = args[i + 1], i + 2
        if flag in _SKIPPED_FLAGS:
            continue
        if flag in ("--provenance", "--sbom"):
            kind = flag[2:]
            low = value.strip().lower()
            attest = (f"type={kind},disabled=true" if low in ("false", "0") else
                      f"type={kind}" + ("" if low in ("true", "1", "") else "," + value))
            target.setdefault("attest", []).append(attest)
            continue
        if flag in _LIST_FLAGS:
            parts = value.split(",") if flag == "--platform" else [value]
            target.setdefault(_LIST_FLAGS[flag], []).extend(parts)
        elif flag in _MAP_FLAGS:
            name, sep, val = value.partition("=")
            if not sep:
                raise BuildError(f"buildx {flag} {value!r} is not NAME=VALUE")
            target.setdefault(_MAP_FLAGS[flag], {})[name] = val
        elif flag in _SCALAR_FLAGS:
            target[_SCALAR_FLAGS[flag]] = value
        else:
            raise BuildError(f"the buildx flag {flag} has no bake equivalent known to buildkit; "
                             "build this variant with `buildkit build` instead")
    if context is None:
        raise BuildError("the buildx command has no build context")
    target["context"] = context
    dockerfile = target.get("dockerfile")
    if dockerfile:
        try:  # bake reads a relative dockerfile against the context
            target["dockerfile"] = str(Path(dockerfile).relative_to(context))
        except ValueError:
            pass
    return target


def _csv_fields(value: str) -> list[str]:
    return next(csv.reader([value]))


def _csv_join(fields: Sequence[str]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(fields)
    return buf.getvalue()


def oci_dest(target: dict) -> str | None:
    """The archive an OCI exporter of this target writes (the reproducible path), else None."""
    for output in target.get("output", []):
        fields = dict(f.split("=", 1) for f in _csv_fields(output) if "=" in f)
        if fields.get("type") == "oci" and fields.get("dest"):
            return fields["dest"]
    return None


def retag(target: dict, tags: Sequence[str]) -> dict:
    """The target with these local tags: bake's tags, and the image names an OCI archive carries
    (which `docker load` turns into tags) when the build goes through the OCI exporter."""
    target = dict(target)
    outputs = []
    for output in target.get("output", []):
        fields = _csv_fields(output)
        if any(f == "type=oci" for f in fields):
            fields = [f for f in fields if not f.startswith("name=")] + ["name=" + ",".join(tags)]
            output = _csv_join(fields)
        outputs.append(output)
    if outputs:
        target["output"] = outputs
    if oci_dest(target) is None:
        target["tags"] = list(tags)
    else:
        target.pop("tags", None)  # the OCI exporter names the image itself
    return target


def target_tags(target: dict) -> tuple[str, ...]:
    """The local tags a target's image gets (bake tags, or the names in its OCI output)."""
    if target.get("tags"):
        return tuple(target["tags"])
    for output in target.get("output", []):
        for field in _csv_fields(output):
            if field.startswith("name="):
                return tuple(n for n in field[5:].split(",") if n)
    return ()


def bake_document(targets: dict[str, dict], group: str = "default") -> dict:
    """The docker-bake.json document: a default group naming every target."""
    return {"group": {group: {"targets": list(targets)}}, "target": dict(targets)}


def write_bake_file(path: Path, document: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    return path


def bake_argv(bake_file: Path, names: Sequence[str], options: BuildOptions, metadata_file: Path) -> list[str]:
    argv = [options.docker, "buildx", "bake"]
    if options.builder:
        argv += ["--builder", options.builder]
    argv += ["--file", str(bake_file), "--metadata-file", str(metadata_file), "--progress", options.progress]
    return argv + list(names)


# ---------------------------------------------------------------- running bake

@dataclass(frozen=True)
class TargetOutcome:
    name: str
    result: "BuildResult | None"  # None when it failed
    error: str  # "" when it was built
    seconds: float  # wall time of the bake that built (or failed) it; bakes run targets in parallel
    isolated: bool  # built in a bake of its own, after a bake of several targets failed

    @property
    def ok(self) -> bool:
        return self.result is not None


class _Run:
    """One `buildx bake` process: its output streamed, steps mapped to targets, errors per target."""

    def __init__(self, argv: list[str], stream, lock: threading.Lock):
        self.argv, self.stream, self.lock = argv, stream, lock
        self.tail: collections.deque[str] = collections.deque(maxlen=60)
        self.step_target: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        self.step_name: dict[str, str] = {}
        self.step_lines: dict[str, collections.deque[str]] = {}
        self.code = -1
        self.seconds = 0.0

    def run(self) -> "_Run":
        start = time.monotonic()
        try:
            proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    errors="replace", bufsize=1)
        except FileNotFoundError:
            raise BuildError(f"cannot run {self.argv[0]!r}: not found") from None
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                with self.lock:
                    self.stream.write(line)
                self._parse(line.rstrip("\n"))
            self.code = proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait()
            raise
        self.seconds = time.monotonic() - start
        return self

    def _parse(self, line: str) -> None:
        self.tail.append(line)
        if m := _STEP.match(line):
            self.step_target.setdefault(m[1], m[2])
            self.step_name.setdefault(m[1], line[len(m[1]) + 2:].split("]", 1)[0] + "]")
        elif m := _STEP_ERROR.match(line):
            target = self.step_target.get(m[1])
            if target and target not in self.errors:
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


def _results(metadata_file: Path, names: Iterable[str], document: dict, seconds: float, isolated: bool,
             docker: str, stream, lock: threading.Lock) -> dict[str, TargetOutcome]:
    from buildkit.engine.buildx import BuildResult

    try:
        metadata = json.loads(metadata_file.read_text())
    except (OSError, ValueError) as exc:
        raise BuildError(f"buildx bake wrote no readable metadata file {metadata_file}: {exc}") from None
    out = {}
    for name in names:
        meta = metadata.get(name) or {}
        digest, config = meta.get("containerimage.digest", ""), meta.get("containerimage.config.digest", "")
        target = document["target"][name]
        tags = target_tags(target)
        archive = oci_dest(target)
        error = ""
        if not digest and not config:
            error = f"bake metadata has no image digest for {name}"
        elif archive is not None:
            error = _docker_load(archive, tags, docker, stream, lock)
        if error:
            out[name] = TargetOutcome(name, None, error, seconds, isolated)
        else:
            out[name] = TargetOutcome(name, BuildResult(digest=digest, config_digest=config, tags=tags,
                                                        seconds=seconds, metadata=meta,
                                                        **({"oci_archive": Path(archive)} if archive and
                                                           "oci_archive" in BuildResult.__dataclass_fields__
                                                           else {})),
                                      "", seconds, isolated)
    return out


def _docker_load(archive: str, tags: Sequence[str], docker: str, stream, lock: threading.Lock) -> str:
    """Load an OCI archive the exporter wrote (its image names become tags); "" or the error."""
    proc = subprocess.run([docker, "load", "--input", archive], capture_output=True, text=True)
    with lock:
        stream.write(proc.stdout)
    if proc.returncode != 0:
        return f"docker load of the built image failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
    for tag in tags:
        check = subprocess.run([docker, "image", "inspect", "--format", "{{.Id}}", tag], capture_output=True,
                               text=True)
        if check.returncode != 0:
            return f"docker load of {archive} did not create the tag {tag}"
    return ""


def run_bake(bake_file: Path, names: Sequence[str], options: BuildOptions, work_dir: Path, *,
             stream=None, isolate: bool = True) -> dict[str, TargetOutcome]:
    """Bake the targets together; if that fails, bake each target that did not fail by itself alone.

    Returns an outcome per target; never raises for a failed target (BuildError only when buildx
    itself cannot be run)."""
    stream = sys.stderr if stream is None else stream
    document = json.loads(bake_file.read_text())
    lock = threading.Lock()
    work_dir.mkdir(parents=True, exist_ok=True)
    metadata = work_dir / "bake-metadata.json"
    metadata.unlink(missing_ok=True)
    first = _Run(bake_argv(bake_file, names, options, metadata), stream, lock).run()
    if first.code == 0:
        return _results(metadata, names, document, first.seconds, False, options.docker, stream, lock)
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
            runs[name] = _Run(bake_argv(bake_file, [name], options, meta), stream, lock).run()
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
            outcomes.update(_results(work_dir / f"bake-metadata-{name}.json", [name], document, run.seconds, True,
                                     options.docker, stream, lock))
        else:
            message = run.errors.get(name) or last_error_line(list(run.tail))
            outcomes[name] = TargetOutcome(name, None, f"build failed: {message}", run.seconds, True)
    return {n: outcomes[n] for n in names}


# ---------------------------------------------------------------- the matrix: prepare, bake, verify

@dataclass(frozen=True)
class VariantBuild:
    variant: Variant
    prepared: "Prepared | None"
    outcome: TargetOutcome | None
    report: "VerifyReport | None"
    error: str  # "" when built (and verified)

    @property
    def ok(self) -> bool:
        return not self.error


def prepare_matrix(variants: Sequence[Variant], work_dir: Path, *, stop_on: tuple[type, ...] = ()):
    """Fetch, patch and render every variant into work_dir/<target>/context.

    Returns ({key: Prepared}, {key: error}); an exception of a type in stop_on is raised instead
    (the patch queue is common to every variant: one that does not apply fails them all)."""
    from buildkit.core.errors import BuildkitError
    from buildkit.flows.pipeline import prepare

    prepared, errors = {}, {}
    for variant in variants:
        try:
            prepared[variant.key] = prepare(variant.cfg, work_dir / variant.target_name / "context")
        except stop_on:
            raise
        except BuildkitError as exc:
            errors[variant.key] = str(exc)
    return prepared, errors


def matrix_document(variants: Sequence[Variant], prepared: dict, options: BuildOptions, work_dir: Path) -> dict:
    """The bake document for the prepared variants. Local tags are <image>:<variant> and
    sha-<7>-<variant>, the variant including a non-server target, so targets never share a tag."""
    from buildkit.engine.buildx import buildx_argv
    from buildkit.release.tags import build_tags

    targets = {}
    for variant in variants:
        if variant.key not in prepared:
            continue
        p = prepared[variant.key]
        argv = buildx_argv(p.plan, p.rendered, options, work_dir / variant.target_name / "metadata.json")
        target = bake_target_from_argv(argv)
        extra = tuple(t.rsplit(":", 1)[1] for t in p.plan.tags[2:])  # (a tag has no ":")
        tags = list(build_tags(variant.request.image_name, variant.key, p.source.commit, extra))
        targets[variant.target_name] = retag(target, tags)
    return bake_document(targets)


def _remove_tags(tags: Sequence[str]) -> None:
    try:
        import docker

        client = docker.from_env()
    except Exception:
        return
    for tag in tags:
        try:
            client.images.remove(tag, noprune=False)
        except Exception:
            pass


def verify_variant(prepared, outcome: TargetOutcome):
    """(report, error): buildkit's smoke checks on the loaded image; a failed image loses its tags."""
    from buildkit.core.errors import BuildkitError
    from buildkit.verify.checks import verify_image

    assert outcome.result is not None
    tag = outcome.result.tags[0]
    roots = [prepared.cuda_root] if prepared.cuda_root else []
    try:
        report = verify_image(prepared.plan, tag, cuda_roots=roots)
    except BuildkitError as exc:
        _remove_tags(outcome.result.tags)
        return None, str(exc)
    if not report.ok:
        _remove_tags(outcome.result.tags)
        failed = "; ".join(f"{c.name}: {c.detail}" for c in report.failures())
        return report, f"image {tag} failed verification and was removed: {failed}"
    return report, ""


def build_matrix(variants: Sequence[Variant], options: BuildOptions, work_dir: Path, *, verify: bool = True,
                 stream=None, stop_on: tuple[type, ...] = ()) -> tuple[list[VariantBuild], Path | None]:
    """Prepare every variant, bake them all, verify each loaded image. A variant that fails at any
    stage is reported and does not stop the others. Returns (builds in matrix order, bake file)."""
    from buildkit.verify.checks import VerifyReport  # noqa: F401  (type of VariantBuild.report)

    prepared, errors = prepare_matrix(variants, work_dir, stop_on=stop_on)
    builds: dict[str, VariantBuild] = {v.key: VariantBuild(v, None, None, None, errors[v.key])
                                       for v in variants if v.key in errors}
    bake_file = None
    ready = [v for v in variants if v.key in prepared]
    if ready:
        from buildkit.engine.buildx import check_buildx

        check_buildx(options.docker)  # after preparing: a patch queue that does not apply never runs buildx
        document = matrix_document(ready, prepared, options, work_dir)
        bake_file = write_bake_file(work_dir / "docker-bake.json", document)
        outcomes = run_bake(bake_file, [v.target_name for v in ready], options, work_dir, stream=stream)
        for variant in ready:
            outcome = outcomes[variant.target_name]
            p = prepared[variant.key]
            if not outcome.ok:
                builds[variant.key] = VariantBuild(variant, p, outcome, None, outcome.error)
                continue
            report, error = verify_variant(p, outcome) if verify else (None, "")
            builds[variant.key] = VariantBuild(variant, p, outcome, report, error)
    return [builds[v.key] for v in variants], bake_file
