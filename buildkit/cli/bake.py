"""`buildkit bake`: build the matrix with docker buildx bake."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from buildkit.cli.options import BuildkitCommand, config_options, handle_errors, resolve
from buildkit.cli.output import emit_json
from buildkit.engine.current import get_engine


@click.command(cls=BuildkitCommand)
@config_options
@click.option("--print", "print_only", is_flag=True,
              help="Render every variant into a kept folder and print docker-bake.json instead of building.")
@click.option("--file", "bake_path", type=click.Path(dir_okay=False),
              help="Also write the bake file to this path.")
@click.option("--no-verify", is_flag=True, help="Skip the smoke checks on the built images.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the result as JSON: {lock, variants: [{variant, status, image, digest, seconds, error}]}.")
@handle_errors
def bake(print_only: bool, bake_path: str | None, no_verify: bool, as_json: bool, **kwargs: Any) -> None:
    """Build the matrix (matrix.archs x matrix.cuda_versions x matrix.targets) with docker buildx bake.

    One bake target per variant, so BuildKit builds them in parallel and a multi-node builder
    (--builder) spreads them. Each image is verified and locked; a failing variant does not stop
    the others, and the exit code is 1 if any failed.
    """
    from buildkit.engine.bakefile import write_bake_file
    from buildkit.flows.matrix.bake import bake_locked, matrix_document, prepare_matrix
    from buildkit.plan.matrix import matrix_variants
    from buildkit.core.errors import BuildkitError
    from buildkit.cli.unitspecs import build_options, cache_root, variant_spec

    cfg = resolve(kwargs)
    matrix, excluded = matrix_variants(cfg)
    for combination, reason in excluded:
        click.echo(f"left out of the matrix: {combination}: {reason}", err=True)
    engine = get_engine()
    variants = [variant_spec(v, engine) for v in matrix]
    options = build_options(cfg, engine)
    if print_only:
        base = cache_root(cfg) / "contexts"
        base.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="bake-", dir=base))
        prepared, errors = prepare_matrix(variants, work, engine)
        if errors:
            raise BuildkitError("; ".join(f"{k}: {e}" for k, e in errors.items()))
        document = matrix_document(variants, prepared, options, work)
        path = write_bake_file(Path(bake_path) if bake_path else work / "docker-bake.json", document)
        emit_json(document)
        click.echo(f"# written to {path}; build it with: docker buildx bake --file {path}"
                   f"{' --builder ' + options.builder if options.builder else ''}", err=True)
        return
    with tempfile.TemporaryDirectory(prefix="buildkit-bake-") as tmp:
        lock_path = cfg.lock.path
        builds, indexes, bake_file = bake_locked(variants, options, Path(tmp), lock_path, engine=engine,
                                                   verify=not no_verify)
        if bake_path and bake_file:
            from buildkit.core.wholefile import write_whole

            write_whole(Path(bake_path), bake_file.read_bytes())
        failed = 0
        rows: list[dict[str, Any]] = []
        for b in builds:
            seconds = round(b.outcome.seconds, 1) if b.outcome else None
            if not b.ok:
                failed += 1
                rows.append({"variant": b.variant.unit, "status": "failed", "image": None, "digest": None,
                             "seconds": seconds, "error": b.error})
                if not as_json:
                    click.echo(f"{b.variant.unit}: failed: {b.error}")
                continue
            assert b.outcome is not None and b.outcome.result is not None  # built (b.ok)
            result = b.outcome.result
            rows.append({"variant": b.variant.unit, "status": "built", "image": result.tags[0] if result.tags else None,
                         "digest": result.digest or result.config_digest, "seconds": seconds, "error": ""})
            if not as_json:
                click.echo(f"{b.variant.unit}: built {result.tags[0]} ({result.digest or result.config_digest})")
        for index in indexes:
            platforms = [u.variant.request.platform for u in index.units]
            if not index.ok:
                failed += 1
                rows.append({"variant": index.key, "status": "failed", "image": None, "digest": None,
                             "platforms": platforms, "error": index.error})
                if not as_json:
                    click.echo(f"{index.key}: no index: {index.error}")
                continue
            manifests = {}
            for u in index.units:
                assert u.outcome is not None and u.outcome.result is not None  # an index has built platforms only
                manifests[u.variant.request.platform] = u.outcome.result.digest
            rows.append({"variant": index.key, "status": "built", "image": index.tags[0] if index.tags else None,
                         "digest": index.digest, "index": True, "platforms": platforms, "manifests": manifests,
                         "error": ""})
            if not as_json:
                click.echo(f"{index.key}: index {index.digest} of {', '.join(platforms)}")
    if as_json:
        emit_json({"lock": str(lock_path), "ok": not failed, "variants": rows,
                   "excluded": [{"combination": c, "reason": r} for c, r in excluded]})
    else:
        click.echo(f"lock: {lock_path}")
    sys.exit(1 if failed else 0)
