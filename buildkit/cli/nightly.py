"""`buildkit nightly`: build and push the matrix for the head of source.branch."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from buildkit.cli.options import BuildkitCommand, config_options, handle_errors, release_option, resolve
from buildkit.cli.output import emit_json, json_text
from buildkit.cli.signing import make_signer, sign_key_option
from buildkit.core.errors import ConfigError
from buildkit.engine.current import get_engine
from buildkit.flows.nightly.plan import VariantStatus

if TYPE_CHECKING:
    from buildkit.plan.config import ResolvedConfig
    from buildkit.release.signer import Signer


class NightlyCommand(BuildkitCommand):
    """Extra arguments reach the command (ctx.args) instead of failing in click's words: `--json FILE`, the
    summary's file before --json became a flag, is then refused in a line that names --summary. The other
    old spelling, `--json=FILE`, is split into that form first (click would say only "does not take a value")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", {})["allow_extra_args"] = True
        super().__init__(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        split: list[str] = []
        for i, arg in enumerate(args):
            if arg == "--":
                split += args[i:]
                break
            split += ["--json", arg[len("--json="):]] if arg.startswith("--json=") else [arg]
        return super().parse_args(ctx, split)


def refuse_leftovers(leftovers: list[str], as_json: bool) -> None:
    """Before anything runs: a word no option took is the old `--json FILE` (or a slip), never a build."""
    if not leftovers:
        return
    if as_json or leftovers == ["-"]:
        if leftovers == ["-"]:
            fix = "it prints the JSON on stdout by itself: drop the '-'"
        else:
            here = f"here --summary {leftovers[0]}" if len(leftovers) == 1 else f"unexpected: {' '.join(leftovers)}"
            fix = f"write the summary to a file with --summary FILE ({here})"
        exc = ConfigError(f"--json is a flag now; {fix}")
        exc.answered = True  # the caller asked for a file, not for JSON on stdout: the one line only
        raise exc
    raise click.UsageError(f"Got unexpected extra argument ({' '.join(leftovers)})")


@click.command(cls=NightlyCommand)
@config_options
@click.option("--json", "as_json", is_flag=True,
              help="Print the JSON document on stdout: the summary (with --plan the plan, with --job the job's "
                   "result); the text lines then go to stderr.")
@click.option("--summary", "summary_path", metavar="FILE",
              help="Write that JSON document to FILE (with or without --json); when FILE cannot be written, it is "
                   "kept in the temporary folder and the error line says where.")
@click.option("--date", help="Nightly date YYYYMMDD for the version (default: today, UTC).")
@click.option("--force", is_flag=True, help="Build every variant even if it is up to date.")
@click.option("--no-verify", is_flag=True, help="Skip the smoke checks on the built images.")
@click.option("--plan", "plan_only", is_flag=True,
              help="CI: only resolve the head and ask the registry; the plan (--json, --summary) says which "
                   "variants and platforms need a build, with the version and the GitHub matrix; build nothing.")
@click.option("--runner", "runners", multiple=True, metavar="ARCH=LABELS",
              help="With --plan: the runs-on label(s) of the runner that builds each CPU's units, repeatable "
                   "(amd64=ubuntu-latest, arm64=ubuntu-24.04-arm) [default: those two].")
@click.option("--job", "job_unit", metavar="UNIT",
              help="CI: build, verify and push one unit of the plan (its id: cpu, cuda13_1-sm120_linux_arm64) "
                   "at --commit as --release, by digest under its build-key tag; the result to --json/--summary.")
@release_option("With --job: the nightly version the plan gave (the image's version label).")
@click.option("--assemble", "assemble_dir", type=click.Path(file_okay=False), metavar="DIR",
              help="CI: put the nightly tags (and multi-platform indexes) on the digests the jobs pushed, "
                   "from DIR/plan.json and the jobs' results in DIR; nothing is built.")
@click.option("--bench-gate", metavar="VARIANT|none",
              help="With --assemble: the summary says which variant the workflow's bench gate benches on the GPU "
                   "runner, or that there is none (`ci github` without --bench-runner passes none).")
@click.option("--attest-dir", "attest_dir", type=click.Path(file_okay=False), metavar="DIR",
              help="With --job: write the pushed image's SLSA provenance (DIR/provenance.json) and CycloneDX SBOM "
                   "(DIR/sbom.json) as predicates for `cosign attest` (the workflow's keyless form).")
@sign_key_option
@handle_errors
def nightly(as_json: bool, summary_path: str | None, date: str | None, force: bool, no_verify: bool,
            plan_only: bool, runners: tuple[str, ...], job_unit: str | None, assemble_dir: str | None,
            bench_gate: str | None, version: str | None, sign_key: Path | None, attest_dir: str | None,
            **kwargs: Any) -> None:
    """Build and push the matrix for the head of source.branch, unless every variant has it already.

    \b
    Resolves the branch head with git ls-remote; a variant is up to date when the registry's
    nightly-<variant> image was built from that commit with the current patch queue. Otherwise
    the variants that are not are built with docker buildx bake, verified, and pushed as
    <next patch>-nightly.<YYYYMMDD>-<variant> and nightly-<variant>; the lock is updated.
    A failing variant does not stop the others; the exit code is 1 if any failed.
    The summary is JSON on stdout with --json, in FILE with --summary FILE, and Markdown in
    $GITHUB_STEP_SUMMARY when that is set.

    \b
    In CI the night is split in jobs (`buildkit ci github` writes them): --plan, then one --job
    per unit on its own runner, then --assemble. --plan and --job also write their outputs to
    $GITHUB_OUTPUT when it is set.
    """
    from buildkit.flows.nightly.run import run_nightly
    from buildkit.flows.nightly.summary import write_summaries

    refuse_leftovers(click.get_current_context().args, as_json)
    if sum(map(bool, (plan_only, job_unit, assemble_dir))) > 1:
        raise ConfigError("give one of --plan, --job and --assemble")
    if runners and not plan_only:
        raise ConfigError("--runner goes with --plan")
    if bench_gate is not None and not assemble_dir:
        raise ConfigError("--bench-gate goes with --assemble")
    if attest_dir and not job_unit:
        raise ConfigError("--attest-dir goes with --job")
    if (job_unit or version) and not (job_unit and version and kwargs.get("commit")):
        raise ConfigError("--job needs the plan's --commit and --release (and --release goes with --job)")
    if summary_path == "-":
        raise ConfigError("--summary takes a file; --json prints the JSON on stdout")
    if summary_path and Path(summary_path).is_dir():
        raise ConfigError(f"--summary {summary_path} is a folder; name the summary's file")
    if version:
        kwargs["image_version"] = version
    cfg = resolve(kwargs)
    signer = make_signer(sign_key, cfg)  # before any build: a bad key stops first (--plan: checks what it skips)
    if plan_only or job_unit:
        _ci_step(cfg, as_json, summary_path, plan_only, runners, job_unit, date, force, not no_verify, signer,
                 Path(attest_dir) if attest_dir else None)
        return
    if assemble_dir:
        from buildkit.flows.nightly.jobs import assemble
        from buildkit.flows.nightly.summary import bench_gate_line

        if bench_gate is not None:
            _check_bench_gate(Path(assemble_dir), bench_gate)
        from buildkit.cli.nightlyspecs import repository_of
        from buildkit.flows.nightly.jobs import write_github_outputs

        repository = repository_of(cfg)
        summary = assemble(repository, Path(assemble_dir), signer=signer)
        if bench_gate is not None:
            summary.bench_gate = bench_gate_line(bench_gate, summary)
        # what the night published (an index, or a job's image), for the workflow's keyless signing step
        published = [f"{repository.name}@{v.digest}" for v in summary.variants
                     if v.status == VariantStatus.PASSED and not v.skipped and v.digest]
        outputs = {"published": " ".join(published)}
        if bench_gate not in (None, "none"):  # the tests images the gate job pulls by digest
            from buildkit.flows.nightly.summary import gate_tests

            gate, lines = gate_tests(repository, summary.variants, bench_gate)
            outputs.update(gate)
            for line in lines:
                click.echo(line, err=True)
        for problem in write_github_outputs(outputs):
            click.echo(f"warning: {problem}", err=True)
    else:
        from buildkit.cli.nightlyspecs import nightly_spec

        engine = get_engine()
        summary = run_nightly(nightly_spec(cfg, engine), date=date, force=force, verify=not no_verify, signer=signer,
                              engine=engine)
    unsaved = write_summaries(summary, summary_path)
    out = sys.stderr if as_json else sys.stdout
    if as_json:
        emit_json(summary.to_dict())
    click.echo(summary.headline(), file=out)
    if not summary.up_to_date and summary.new_commit:
        click.echo(f"old commit: {summary.old_commit or 'none'}", file=out)
        click.echo(f"new commit: {summary.new_commit}", file=out)
        if summary.changelog is not None:
            for commit in summary.changelog.commits:
                click.echo(f"  {commit.sha[:12]} {commit.subject}", file=out)
            if summary.changelog.note:
                click.echo(f"  ({summary.changelog.note})", file=out)
    for v in summary.variants:
        took = f" in {v.build_seconds:.0f}s" if v.build_seconds is not None else ""
        detail = f": {v.error}" if v.error else (f" {v.digest}" if v.digest else "")
        why = f" ({v.reason})" if v.reason else ""
        click.echo(f"{v.variant}: {v.status}{took}{detail}{why}", file=out)
    if summary.bench_gate:
        click.echo(summary.bench_gate, file=out)
    errors = [summary.error] if summary.error else []
    if errors or unsaved:
        click.echo(f"error: {'; '.join(errors + unsaved)}", err=True)
    sys.exit(0 if summary.ok and not unsaved else 1)


def _check_bench_gate(folder: Path, gate: str) -> None:
    """Before anything is tagged: the gate is none or a variant of the night's plan (what --assemble reads)."""
    from buildkit.flows.nightly.jobs import read_results

    keys = [e.variant for e in read_results(folder)[0].variants]
    if gate != "none" and gate not in keys:
        raise ConfigError(f"--bench-gate {gate!r} is neither none nor a variant of the plan ({', '.join(keys)})")


def _ci_step(cfg: ResolvedConfig, as_json: bool, summary_path: str | None, plan_only: bool, runners: tuple[str, ...],
             job_unit: str | None, date: str | None, force: bool, verify: bool, signer: Signer | None = None,
             attest_dir: Path | None = None) -> None:
    """--plan or --job: a JSON document (--json, --summary), one-line outputs to $GITHUB_OUTPUT, a line of text."""
    from buildkit.flows.nightly.jobs import (DEFAULT_RUNNERS, github_outputs, parse_runners, plan_nightly,
                                            plan_summary, run_job, write_github_outputs)
    from buildkit.flows.nightly.summary import write_summaries
    from buildkit.cli.nightlyspecs import job_spec, nightly_spec

    engine = get_engine()
    if plan_only:
        plan = plan_nightly(nightly_spec(cfg, engine), runners=parse_runners(runners) or dict(DEFAULT_RUNNERS),
                            date=date, force=force, signer=signer)
        outputs = github_outputs(plan)
        units = [u.id for u in plan.units]
        line = (f"to build from {plan.commit[:12]} as {plan.version}: {' '.join(units)}" if units else
                plan_summary(plan).headline())
        problems = [] if plan.build else write_summaries(plan_summary(plan), None)
        data, ok = plan.to_dict(), True
    else:
        assert job_unit is not None  # --job, the other way here (nightly())
        spec = job_spec(cfg, engine)
        result = run_job(spec, job_unit, verify=verify, signer=signer, attest_dir=attest_dir, engine=engine)
        name = spec.repository.name
        outputs = {"built": "true" if result.built else "false",  # reference: what the job pushed, to sign
                   "reference": f"{name}@{result.digest}" if result.status == VariantStatus.PASSED else "",
                   # its tests image (not signed: the gate's input, pulled by this digest; flows/unit/testsimage.py)
                   "tests_reference": f"{name}@{result.tests_digest}" if result.status == VariantStatus.PASSED
                   and result.tests_digest else ""}
        line = (f"{result.unit}: {result.status} {result.digest or result.error}").rstrip()
        problems = []
        data, ok = result.to_dict(), result.status == VariantStatus.PASSED
    problems += write_github_outputs(outputs)
    if as_json:
        emit_json(data)
    if summary_path:
        from buildkit.core.savefile import write_or_keep

        try:
            Path(summary_path).parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # write_or_keep says why the file cannot be written
        what = "the plan" if plan_only else "the job's result"
        problems += [p for p in [write_or_keep(Path(summary_path), json_text(data) + "\n", what)] if p]
    click.echo(line, file=sys.stderr if as_json else sys.stdout)
    if problems:
        click.echo(f"error: {'; '.join(problems)}", err=True)
    sys.exit(0 if ok and not problems else 1)
