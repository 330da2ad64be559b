"""The `reproduce` command (registered in cli/main.py).

Exit codes: 0 reproduced / identical; 2 the digests differ (the report says where); 1 an error
(one `error:` line), e.g. a recorded input that is missing or does not match.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from buildkit.cli.diff import DIFFERENT
from buildkit.cli.options import handle_errors
from buildkit.cli.output import emit_json, json_text
from buildkit.core.errors import ConfigError
from buildkit.engine.current import get_engine


@click.command()
@click.argument("target")
@click.option("--build", "build_key", metavar="VARIANT/TARGET",
              help="Which entry of a lock with several builds (e.g. cpu/server).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="buildkit.toml for the settings a record does not fix (builder, progress, cache folder).")
@click.option("--patches", help="Patch folder to use (it must hash to the recorded patch set).")
@click.option("--source", help="Fetch the recorded commit from this URL, path or mirror instead.")
@click.option("--keep", type=click.Path(file_okay=False), help="Keep the rebuilt OCI archive in this folder.")
@click.option("--cache", "use_cache", is_flag=True,
              help="Allow BuildKit's build cache and ccache hits (default: --no-cache, and every object "
                   "compiled again, a clean rebuild).")
@click.option("--provenance", is_flag=True,
              help="Attach a provenance attestation (it carries invocation ids; the digest then differs).")
@click.option("--attest", is_flag=True,
              help="When reproduced, sign a SLSA verification summary (VSA) with your own key (--sign-key FILE, "
                   "else LLAMA_BUILDKIT_SIGN_KEY) saying so, attached beside the image in its registry.")
@click.option("--sign-key", "sign_key", type=click.Path(path_type=Path), default=None,
              help="The rebuilder's private key for --attest (cosign's PEM; `buildkit keys generate`).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def reproduce(target: str, build_key: str | None, config_path: str | None, patches: str | None,
              source: str | None, keep: str | None, use_cache: bool, provenance: bool, attest: bool,
              sign_key: Path | None, as_json: bool) -> None:
    """Rebuild TARGET (a buildkit.lock, or an image reference) from its recorded inputs and compare.

    \b
    Every input is checked first: commit, patch set hash (against the patch files), template hash
    (against the templates), base image digests, CUDA version and wheels, arch, flags, epoch; a
    missing or mismatching input is an error, a different tool version a warning. The rebuild is
    cache-less (a build recorded with the ccache compiles every object again through it, reading
    no hit) and goes through the OCI exporter (rewrite-timestamp, no provenance); nothing in the
    engine or the lock changes. Same manifest digest: "reproduced", exit 0. Otherwise exit 2 and a
    report of the layers that differ and, inside them, the files (path, size, sha256).
    """
    from buildkit.plan.config import find_config_file
    from buildkit.flows.reproduce.record import IndexRecorded, Recorded, load_record
    from buildkit.flows.reproduce.rebuild import reproduce as run, reproduce_index
    from buildkit.cli.reproducespecs import reproduce_spec
    from buildkit.flows.reproduce.spec import ReproduceSpec
    from buildkit.cli.signing import make_signer

    if sign_key is not None and not attest:
        raise ConfigError("--sign-key goes with --attest")
    signer = make_signer(sign_key) if attest else None  # made first: a bad key stops before the rebuild
    if attest and signer is None:
        raise ConfigError("--attest signs with the rebuilder's own key: give --sign-key FILE or set "
                          "LLAMA_BUILDKIT_SIGN_KEY")
    if attest and use_cache:
        raise ConfigError("--attest vouches for a clean rebuild: leave out --cache")
    engine = get_engine()
    record = load_record(target, build_key, engine)
    cfg_path = find_config_file(config_path, os.environ, Path.cwd())
    if isinstance(record, IndexRecorded) and attest:
        raise ConfigError("--attest is for one image for now: reproduce a platform's entry (--build)")

    def spec_of(rec: Recorded) -> ReproduceSpec:
        return reproduce_spec(rec, engine, config_path=cfg_path, env=os.environ, source=source, patches=patches,
                              use_cache=use_cache, provenance=provenance)

    if isinstance(record, IndexRecorded):  # a multi-platform build: every platform, then the index
        index = reproduce_index(record, {p: spec_of(r) for p, r in record.platforms},
                                keep=Path(keep).resolve() if keep else None, engine=engine)
        click.echo(json_text(index) if as_json else index.report())
        if not index.reproduced:
            sys.exit(DIFFERENT)
        return
    result = run(record, spec_of(record), keep=Path(keep).resolve() if keep else None,
                 engine=engine)
    attested: tuple[str, ...] = ()
    if signer is not None and result.reproduced:
        from buildkit.flows.unit.signpublished import attest_reproduction

        attested = attest_reproduction(record.image_digest, record.originals, signer)
    if as_json:
        emit_json({
            "reproduced": result.reproduced, "recorded": record.image_digest, "rebuilt": result.digest,
            "origin": record.origin, "warnings": result.warnings, "archive": str(result.archive or ""),
            "compared_with": result.original, "diff": result.diff.to_json() if result.diff else None,
            "attested": list(attested),
        })
    else:
        click.echo(result.report())
        if attested:
            click.echo(f"attested (your key, a SLSA verification summary): {' '.join(attested)}")
    if not result.reproduced:
        sys.exit(DIFFERENT)
