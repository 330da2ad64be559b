"""The `buildkit workload-check` command (registered in cli/main.py): the fork's own features from an image, the
way its users run them (issue 46): speculative decoding lossless against the target alone, its drafts accepted
and faster, KV-cache types against f16. gpu-check's sibling: gpu-check runs the fork's kernel suite, this runs
the workload (bench/workload.py), each through the engine with --gpus where there is Docker; on a GPU host
without Docker `scripts/gpu_workload.py` runs the same checks on the bundle's server and this command judges its
workload.json (--result), records it (--attach-lock) and compares it with the release's (--compare).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from buildkit.bench.acceptance import ACCEPTANCE_TOLERANCE
from buildkit.bench.lossless import NEAR_TIE
from buildkit.cli.options import handle_errors
from buildkit.cli.output import json_text
from buildkit.core.errors import BenchError, BuildkitError, LockError
from buildkit.engine.current import get_engine

CHECKS = ("lossless", "acceptance", "kv")
RESULT_LIMIT = 16 * 2**20


def _read_report(path: str, what: str) -> dict[str, Any]:
    from buildkit.core.boundedread import read_json_object

    try:
        return read_json_object(path, RESULT_LIMIT)
    except (OSError, ValueError, RecursionError) as exc:
        raise BenchError(f"{what} {path}: not a workload report ({' '.join(str(exc).split())[:200]})") from None


def _release(path: str | None, lock_path: Path, entry: str | None) -> Any:
    from buildkit.bench.workloadverdict import from_record

    if not path and not entry:
        return None
    if path:
        record, where = _read_report(path, "--compare"), f"--compare {path}"
    else:
        from buildkit.release.lockfile import Lock

        where = f"{lock_path} builds[{entry!r}].workload"
        found = Lock.read(lock_path).builds.get(entry or "")
        if found is None or found.workload is None:
            raise BenchError(f"{where}: the release has no workload record to compare with")
        record = found.workload
    try:
        return from_record(record)
    except (ValueError, TypeError) as exc:
        raise BenchError(f"{where}: not a workload record ({exc})") from None


def _attach(lock_path: Path, image: str, key: str | None, record: dict[str, Any]) -> str:
    from buildkit.release.lockfile import Lock, update_lock

    lock = Lock.read(lock_path)
    key = key or lock.describing(image)
    if key is None or key not in lock.builds:
        raise LockError(f"no entry of {lock_path} describes {key or image} "
                        f"(entries: {', '.join(lock.builds) or 'none'}); name one with --lock-entry")
    update_lock(lock_path, lambda lock: lock.with_attached(key, "workload", record))
    return key


def _run(image: str, profile_name: str, model: str | None, model_draft: str | None, gpus: str | None,
         checks: list[str], kv: list[str], label: str, n_predict: int, runs: int, max_tokens: int,
         config_path: str | None) -> dict[str, Any]:
    from buildkit.bench.container import docker_client, local_image_id
    from buildkit.bench.containerservers import ContainerServers
    from buildkit.bench.protocol import Protocol
    from buildkit.bench.workload import Setup, draft_only, run_checks
    from buildkit.plan.config import find_config_file, read_document
    from buildkit.plan.profiles import get_profile, make_spec

    document = read_document(find_config_file(config_path, os.environ, Path.cwd()))
    profile = get_profile(document, profile_name)
    spec = make_spec(image=image, model=model, model_draft=model_draft, profile=profile, gpus=gpus, host_port=None,
                     use_profile_port=False, bind="127.0.0.1")  # every file checked before anything starts
    if ("lossless" in checks or "acceptance" in checks) and spec.model_draft is None:
        raise BenchError("lossless and acceptance compare the drafter with the target alone: give --model-draft "
                         "(or model_draft in the profile)")
    engine = docker_client(get_engine())
    local_image_id(engine, image)

    def say(msg: str) -> None:
        click.echo(msg, err=True)
    servers = ContainerServers(image=image, model=spec.model, model_draft=spec.model_draft, gpus=spec.gpus,
                               engine=engine, log=say)
    setup = Setup(label or profile_name, spec.args, draft_only(spec.args))
    report = run_checks(servers, [setup], checks=checks, kv_types=kv, n_predict=n_predict, log=say,
                        protocol=Protocol(runs=runs, max_tokens=max_tokens).check())
    return {"label": setup.label, "image": image, "spec_args": list(setup.spec_args),
            "base_args": list(setup.base_args), **report.to_dict()}


@click.command("workload-check")
@click.argument("image", required=False)
@click.option("--profile", "profile_name", default="dflash", show_default=True,
              help="Runtime profile of buildkit.toml whose arguments the servers get ([profiles.NAME]).")
@click.option("--model", type=click.Path(dir_okay=False), help="Target model (GGUF) [the profile's model].")
@click.option("--model-draft", type=click.Path(dir_okay=False), help="Draft model [the profile's model_draft].")
@click.option("--checks", default="lossless,acceptance", show_default=True,
              help=f"Comma-separated, of: {', '.join(CHECKS)}.")
@click.option("--kv", "kv_types", default="", help="With the kv check: KV-cache types to compare with f16, "
                                                   "comma-separated (e.g. turbo4,turbo3,q8_0).")
@click.option("--label", default="", help="Names this configuration in the report (default: the profile's name).")
@click.option("--n-predict", type=click.IntRange(1, 4096), default=128, show_default=True,
              help="Greedy tokens per prompt for the lossless check.")
@click.option("--runs", type=click.IntRange(1, 100), default=3, show_default=True, help="Bench runs (acceptance).")
@click.option("--max-tokens", type=click.IntRange(1, 100000), default=800, show_default=True,
              help="Tokens per bench run (acceptance).")
@click.option("--gpus", help="docker --gpus for the containers (none: no GPU) [the profile's gpus].")
@click.option("--result", "result_file", type=click.Path(dir_okay=False),
              help="Judge this recorded workload.json (scripts/gpu_workload.py on a GPU host) instead of running.")
@click.option("--json", "json_file", type=click.Path(dir_okay=False), help="Write the verdict as JSON to this file.")
@click.option("--compare", "compare_file", type=click.Path(dir_okay=False),
              help="The release's verdict (--json): acceptance may be at most --tolerance below it.")
@click.option("--compare-entry", help="As --compare, from this lock entry's workload record.")
@click.option("--tolerance", type=click.FloatRange(0, 1), default=ACCEPTANCE_TOLERANCE, show_default=True,
              help="How far (absolute, 0-1) the acceptance rate may fall below the release's.")
@click.option("--near-tie", type=click.FloatRange(0, 10), default=NEAR_TIE, show_default=True,
              help="Nats: a speculative token that is the target's second choice within this margin is a near-tie.")
@click.option("--kv-floor", type=click.FloatRange(0, 1), help="Fail a KV type whose top-1 agreement is under this.")
@click.option("--attach-lock", is_flag=True, help="Record the verdict in the image's lock entry: builds[KEY].workload.")
@click.option("--lock-entry", help="With --attach-lock: the lock entry (default: the one whose tags name IMAGE).")
@click.option("--lock", "lock_path", help="Lock file [lock.path].")
@click.option("--step-summary", type=click.Path(dir_okay=False), help="Append a Markdown table to this file (CI).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="buildkit.toml to read.")
@handle_errors
def workload_check(image: str | None, profile_name: str, model: str | None, model_draft: str | None, checks: str,
                   kv_types: str, label: str, n_predict: int, runs: int, max_tokens: int, gpus: str | None,
                   result_file: str | None, json_file: str | None, compare_file: str | None,
                   compare_entry: str | None, tolerance: float, near_tie: float, kv_floor: float | None,
                   attach_lock: bool, lock_entry: str | None, lock_path: str | None, step_summary: str | None,
                   config_path: str | None) -> None:
    """Check the fork's own features from IMAGE with a runtime profile; print one line per check.

    \b
    lossless    greedy tokens with the drafter equal the target alone's (no draft model loaded), each
                prompt on a fresh server and in sequence on one; a near-tie flip is named, not failed
    acceptance  the bench protocol with and without the drafter: drafted and accepted tokens, the rate,
                the mean accepted length, tokens/s with/without; gated against --compare
    kv          a KV-cache type's top-1 agreement with f16 (teacher-forced), --kv TYPES

    Exit 0: every check passed; 1: one failed (or an error). On a GPU host without Docker run
    scripts/gpu_workload.py there and judge its workload.json here with --result.
    """
    from buildkit.bench.workloadverdict import judge
    from buildkit.core.savefile import write_or_keep
    from buildkit.plan.config import find_config_file, load_config

    wanted = [c.strip() for c in checks.split(",") if c.strip()]
    if unknown := [c for c in wanted if c not in CHECKS]:
        raise BuildkitError(f"--checks: unknown check(s) {', '.join(unknown)} (known: {', '.join(CHECKS)})")
    kv = [k.strip() for k in kv_types.split(",") if k.strip()]
    if "kv" in wanted and not kv:
        raise BuildkitError("the kv check needs --kv TYPES (e.g. --kv turbo4)")
    if not image and not result_file:
        raise BuildkitError("workload-check needs an IMAGE to run, or --result FILE to judge")
    if compare_file and compare_entry:
        raise BuildkitError("give --compare or --compare-entry, not both")
    overrides = {"lock.path": (lock_path, "--lock")} if lock_path else {}
    cfg = load_config(find_config_file(config_path, os.environ, Path.cwd()), os.environ, overrides)
    release = _release(compare_file, cfg.lock.path, compare_entry)  # read before the long part
    if result_file:
        report = _read_report(result_file, "--result")
    else:
        assert image is not None
        report = _run(image, profile_name, model, model_draft, gpus, wanted, kv, label, n_predict, runs, max_tokens,
                      config_path)
    try:
        verdict = judge(report, release, tolerance=tolerance, near_tie=near_tie, kv_floor=kv_floor)
    except (ValueError, TypeError) as exc:
        raise BenchError(f"{result_file or 'the report'}: not a workload report ({exc})") from None
    for line in verdict.lines():
        click.echo(line)
    record = verdict.to_dict()
    for path, text, what, append in ((json_file, json_text(record) + "\n", "the verdict", False),
                                     (step_summary, verdict.markdown(), "the step summary", True)):
        if path and (trouble := write_or_keep(path, text, what, append=append)):
            click.echo(f"warning: {trouble}", err=True)
    if attach_lock:
        key = _attach(cfg.lock.path, image or "", lock_entry, record)
        click.echo(f"recorded in {cfg.lock.path} builds[{key!r}].workload", err=True)
    click.echo("workload: PASS" if verdict.passed else "workload: FAIL")
    raise SystemExit(0 if verdict.passed else 1)
