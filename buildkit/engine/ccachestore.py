"""Carry the ccache of each variant from one builder to the next (CI runners are new every run).

The compile step keeps ccache in a BuildKit cache mount (`--mount=type=cache,id=<ccache id>`,
templates/_build.j2). Cache mounts are never part of an exported layer cache (`--cache-to`), so a
fresh builder (a new hosted runner, a new node) starts cold although the layers are cached. Two
small builds move the mount's contents in and out:

* export: a stage that mounts the cache and copies it out, written with `--output type=local`
  to DIR/<variant>/ (for actions/cache), or pushed as the image REPO:ccache-<variant>;
* import: a stage that mounts the cache and copies DIR/<variant>/ (a named build context), or
  the image REPO:ccache-<variant>, into it; `--output type=cacheonly`.

They run on the configured builder (build.builder) with the variant's runtime image as the shell
(it is needed for the build anyway). A build arg with a fresh value keeps BuildKit from
answering either step from its cache.
"""

from __future__ import annotations

import io
import secrets
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from buildkit.engine.api import Builder, OutStream
from buildkit.core.errors import BuildError
from buildkit.engine.specs import BuildSession, BuildSpec
from buildkit.oci.imageref import parse_image_ref
from buildkit.oci.registry import client_for

CCACHE_TAG_PREFIX = "ccache-"


@dataclass(frozen=True)
class CcacheTarget:
    variant: str
    cache_id: str
    base_ref: str  # what the helper stage's FROM names
    named: tuple[tuple[str, str], ...]  # named contexts for the base (an engine-only image)


def export_dockerfile(target: CcacheTarget) -> str:
    return (f"FROM {target.base_ref} AS dump\n"
            "ARG NONCE\n"
            f"RUN --mount=type=cache,id={target.cache_id},target=/ccache \\\n"
            "    echo \"ccache export $NONCE\" && mkdir -p /out && cp -a /ccache/. /out/ && (du -sh /out || true)\n"
            "FROM scratch\n"
            "COPY --from=dump /out/ /\n")


def import_dockerfile(target: CcacheTarget) -> str:
    return (f"FROM {target.base_ref}\n"
            "ARG NONCE\n"
            f"RUN --mount=type=cache,id={target.cache_id},target=/ccache --mount=type=bind,from=seed,target=/seed \\\n"
            "    echo \"ccache import $NONCE\" && cp -a /seed/. /ccache/ && (du -sh /ccache || true)\n")


def helper_spec(dockerfile: Path, context: Path, target: CcacheTarget, output: str, *,
                seed: str | None = None) -> BuildSpec:
    named = target.named + ((("seed", seed),) if seed is not None else ())
    return BuildSpec(context=context, dockerfile=dockerfile, build_args=(("NONCE", secrets.token_hex(8)),),
                     named_contexts=named, provenance=False, outputs=(output,))


def _run(engine: Builder, spec: BuildSpec, builder: str, what: str, stream: OutStream) -> None:
    """A helper build, quiet unless it fails; it runs in the engine turn like every build."""
    lines: list[str] = []
    session = BuildSession(builder=builder, progress="plain")
    finished = engine.build(spec, session, lines.append, stream=io.StringIO())
    if finished.code != 0:
        lines = [ln for ln in lines if ln.strip()]
        last = next((ln for ln in reversed(lines) if "ERROR" in ln), lines[-1] if lines else "no output")
        raise BuildError(f"{what} failed: {last.strip()}")
    if stream is not None:
        stream.write(f"buildkit: {what}: done\n")


def export_ccache(engine: Builder, targets: Sequence[CcacheTarget], *, dest_dir: Path | None = None,
                  registry_repo: str = "", builder: str = "", stream: OutStream | None = None) -> list[str]:
    """Copy each variant's cache mount out: to dest_dir/<variant>/ or to registry_repo:ccache-<variant>."""
    stream = sys.stderr if stream is None else stream
    done = []
    for target in targets:
        with tempfile.TemporaryDirectory(prefix="buildkit-ccache-") as tmp:
            dockerfile = Path(tmp) / "Dockerfile"
            dockerfile.write_text(export_dockerfile(target))  # a scratch folder of this run
            if registry_repo:
                where = f"{registry_repo}:{CCACHE_TAG_PREFIX}{target.variant}"
                output = f"type=image,name={where},push=true,compression=zstd"
            else:
                assert dest_dir is not None
                where = str(dest_dir / target.variant)
                output = f"type=local,dest={where}"
            _run(engine, helper_spec(dockerfile, Path(tmp), target, output), builder,
                 f"ccache export of {target.variant} to {where}", stream)
        done.append(where)
    return done


def import_ccache(engine: Builder, targets: Sequence[CcacheTarget], *, src_dir: Path | None = None,
                  registry_repo: str = "", builder: str = "", stream: OutStream | None = None) -> list[str]:
    """Copy DIR/<variant>/ (or registry_repo:ccache-<variant>) into each variant's cache mount.
    A variant with nothing saved is skipped (its first build is cold)."""
    stream = sys.stderr if stream is None else stream
    done = []
    for target in targets:
        if registry_repo:
            where = f"{registry_repo}:{CCACHE_TAG_PREFIX}{target.variant}"
            if not _registry_has(where):
                stream.write(f"buildkit: no saved ccache for {target.variant} at {where}; its build starts cold\n")
                continue
            seed = f"docker-image://{where}"
        else:
            assert src_dir is not None
            folder = src_dir / target.variant
            if not folder.is_dir() or not any(folder.iterdir()):
                stream.write(f"buildkit: no saved ccache for {target.variant} in {folder}; its build starts cold\n")
                continue
            where, seed = str(folder), str(folder.resolve())
        with tempfile.TemporaryDirectory(prefix="buildkit-ccache-") as tmp:
            dockerfile = Path(tmp) / "Dockerfile"
            dockerfile.write_text(import_dockerfile(target))  # a scratch folder of this run
            _run(engine, helper_spec(dockerfile, Path(tmp), target, "type=cacheonly", seed=seed), builder,
                 f"ccache import of {target.variant} from {where}", stream)
        done.append(where)
    return done


def _registry_has(ref_text: str) -> bool:
    ref = parse_image_ref(ref_text)
    with client_for(ref.registry) as client:
        return client.head_manifest(ref.repository, ref.reference) is not None
