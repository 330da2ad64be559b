"""The docker CLI's argv of a spec (pure): `docker buildx build`, `docker buildx bake`, `docker run`.

The only place buildkit spells the docker CLI's flags. The argv of a build is also what
`buildkit build --print` shows, so the order of its flags is kept stable.
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence

from buildkit.engine.specs import BuildSession, BuildSpec, RunSpec


def oci_output(dest: Path, names: Sequence[str] = ()) -> str:
    """--output value of the reproducible exporter (names become the tags `docker load` sets)."""
    value = f"type=oci,dest={dest},rewrite-timestamp=true"
    if names:
        value = f'{value},"name={",".join(names)}"'
    return value


def spec_outputs(spec: BuildSpec) -> list[str]:
    """The spec's exporters as --output values (--load and --push are flags of their own)."""
    out = [oci_output(spec.oci_archive, spec.tags if spec.load else ())] if spec.oci_archive is not None else []
    return out + list(spec.outputs)


def annotation_values(spec: BuildSpec) -> list[str]:
    """The spec's annotations as buildx takes them (--annotation, a bake target's annotations), on the
    image manifest: the oci and image exporters write them, and so does --load on the containerd image
    store; the classic store keeps no manifest and ignores them. (A multi-platform index is
    oci/ociindex.py's, not buildx's: it annotates it itself.)"""
    return [f"manifest:{key}={value}" for key, value in spec.annotations]


def _session_flags(session: BuildSession) -> list[str]:
    return ["--builder", session.builder] if session.builder else []


def buildx_build_argv(docker: str, spec: BuildSpec, session: BuildSession) -> list[str]:
    """The exact `docker buildx build` command line of spec."""
    argv = [docker, "buildx", "build", *_session_flags(session)]
    if spec.platform:
        argv += ["--platform", spec.platform]
    if spec.target:
        argv += ["--target", spec.target]
    for key, value in spec.build_args:
        argv += ["--build-arg", f"{key}={value}"]
    for key, value in spec.labels:
        argv += ["--label", f"{key}={value}"]
    for annotation in annotation_values(spec):
        argv += ["--annotation", annotation]
    if spec.oci_archive is None:  # else the tags are the archive's image names (spec_outputs)
        for tag in spec.tags:
            argv += ["--tag", tag]
    for name, where in spec.named_contexts:
        argv += ["--build-context", f"{name}={where}"]
    for entry in spec.cache_from:
        argv += ["--cache-from", entry]
    for entry in spec.cache_to:
        argv += ["--cache-to", entry]
    if session.metadata_file is not None:
        argv += ["--metadata-file", str(session.metadata_file)]
    argv += ["--progress", session.progress]
    if spec.provenance is not None:
        argv.append(f"--provenance={'true' if spec.provenance else 'false'}")
    if spec.no_cache:
        argv.append("--no-cache")
    for output in spec_outputs(spec):
        argv += ["--output", output]
    if spec.oci_archive is None:
        if spec.load:
            argv.append("--load")
        if spec.push:
            argv.append("--push")
    return argv + ["--file", str(spec.dockerfile), str(spec.context)]


def buildx_bake_argv(docker: str, bake_file: Path, names: Sequence[str], session: BuildSession) -> list[str]:
    argv = [docker, "buildx", "bake", *_session_flags(session), "--file", str(bake_file)]
    if session.metadata_file is not None:
        argv += ["--metadata-file", str(session.metadata_file)]
    return argv + ["--progress", session.progress, *names]


def docker_run_argv(docker: str, spec: RunSpec) -> list[str]:
    """The `docker run` command of spec (what `buildkit run` prints or runs)."""
    argv = [docker, "run"]
    if spec.remove:
        argv.append("--rm")
    if spec.detach:
        argv.append("--detach")
    if spec.name:
        argv += ["--name", spec.name]
    for key, value in spec.labels.items():
        argv += ["--label", f"{key}={value}"]
    if spec.gpus:
        argv += ["--gpus", spec.gpus]
    for inside, (bind, host) in spec.ports.items():
        published = f"{host}:{inside}" if host else str(inside)
        argv += ["--publish", f"{bind}:{published}" if bind else published]
    for mount in spec.mounts:
        argv += ["--volume", f"{mount.source}:{mount.target}" + (":ro" if mount.read_only else "")]
    return argv + [spec.image, *spec.command]
