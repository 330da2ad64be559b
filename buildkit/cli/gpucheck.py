"""The `buildkit gpu-check` command (registered in cli/main.py): the fork's own `test-backend-ops` run from
an image (its `tests` target, which adds /app/test-backend-ops to the server image; docs/gpu.md), read back,
judged against gpu_check.known_failures, optionally kept in the lock and compared with a release's result.

Where there is Docker it runs through the engine with --gpus; where there is not (the H200), `scripts/gpu_run.py
backend-ops` runs the bundle's test-backend-ops and this command reads its log (--log) to judge and attach it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import click

from buildkit.cli.options import handle_errors
from buildkit.cli.output import json_text
from buildkit.core.errors import BuildkitError, LockError
from buildkit.core.printable import markdown_cell, markdown_code, printable
from buildkit.verify.backendops import BackendOps, parse
from buildkit.verify.backendverdict import Failing, GpuCheck, judge, known_failures, new_failures

PROGRAM = "/app/test-backend-ops"


def backend_ops_args(backend: str, ops: tuple[str, ...]) -> list[str]:
    """test-backend-ops' arguments: test mode on one backend, optionally narrowed to some ops."""
    return ["test", "-b", backend] + (["-o", ",".join(ops)] if ops else [])


def _attach(lock_path: Path, image: str, key: str | None, check: GpuCheck) -> str:
    from buildkit.release.lockfile import Lock, update_lock

    lock = Lock.read(lock_path)
    key = key or lock.describing(image)
    if key is None or key not in lock.builds:
        raise LockError(f"no entry of {lock_path} describes {key or image} "
                        f"(entries: {', '.join(lock.builds) or 'none'}); name one with --lock-entry")
    update_lock(lock_path, lambda lock: lock.with_attached(key, "gpu_check", check.to_dict()))
    return key


COMPARE_LIMIT = 16 << 20  # bytes of a --compare file (a full run's result with every case failing is a few MiB)


def _release(path: str | None, lock_path: Path, entry: str | None) -> GpuCheck | None:
    """The release's result to compare with: a gpu-check JSON file (a regular file, read within COMPARE_LIMIT),
    or a lock entry's gpu_check; each field checked (GpuCheck.from_dict). One line when it is not one."""
    from buildkit.core.boundedread import read_json_object

    where, record = f"--compare {path}", None
    try:
        if path:
            record = read_json_object(path, COMPARE_LIMIT)
        elif entry:
            from buildkit.release.lockfile import Lock

            where = f"{lock_path} builds[{entry!r}].gpu_check"
            found = Lock.read(lock_path).builds.get(entry)
            record = found.gpu_check if found is not None else None
        return GpuCheck.from_dict(record) if record is not None else None
    except (OSError, ValueError, RecursionError) as exc:
        why = ("nested too deeply" if isinstance(exc, RecursionError)
               else (exc.strerror or exc) if isinstance(exc, OSError) else exc)
        raise BuildkitError(printable(f"{where}: not a gpu-check result ({why})")) from None


def _read_log(path: str, keep: bool) -> tuple[BackendOps, str]:
    """The recorded run (--log), read bounded and line by line (core/logfile.py: regular files only, plain or
    xz/gzip/zstd, at most 64 MiB of text); its text too when it is to be saved again."""
    from buildkit.core.logfile import LogUnreadable, log_lines

    kept: list[str] = []

    def keeping(lines: Iterator[str]) -> Iterator[str]:
        for line in lines:
            kept.append(line)
            yield line

    try:
        run = parse(keeping(log_lines(path)) if keep else log_lines(path))
    except LogUnreadable as exc:
        raise BuildkitError(printable(f"--log: {exc}")) from None
    return run, "\n".join(kept) + ("\n" if kept else "")


def _run_in_engine(image: str, args: list[str], timeout: float, gpus: str) -> tuple[int, str]:
    """(exit code, output) of the image's test-backend-ops, in a container with the GPUs asked for."""
    import docker.errors
    import requests

    from buildkit.engine.api import EngineError
    from buildkit.engine.current import get_engine

    engine = get_engine()
    if engine.image(image) is None:
        raise EngineError(f"no image {image} in the engine: build its tests target (`buildkit build --tests`, tag "
                          "<tag>-tests) or pull it")
    try:
        return engine.run(image, [PROGRAM], args, timeout=timeout, gpus="" if gpus == "none" else gpus)
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        raise EngineError(f"gpu-check could not run {PROGRAM} in {image} (--gpus {gpus}): "
                          f"{getattr(exc, 'explanation', None) or exc}") from None


def _save(path: str, text: str, what: str, append: bool = False) -> None:
    from buildkit.core.savefile import write_or_keep

    if trouble := write_or_keep(path, text, what, append=append):
        click.echo(f"warning: {trouble}", err=True)


def _summary(check: GpuCheck, new: tuple[Failing, ...] | None) -> str:
    """The step summary's Markdown: every text of the run (case names, errors) one literal cell (a `|` or
    HTML in a case name is shown, never a column or a tag)."""
    rows = ["### gpu-check", "", markdown_code(check.line()), "", "| case | error | known |", "| --- | --- | --- |"]
    rows += [f"| {markdown_code(f.case)} | {markdown_cell(f.errors[-1] if f.errors else '')} | "
             f"{markdown_cell(f.known or 'no')} |" for f in check.failing]
    if new is not None:
        rows += ["", "new failing cases (not in the release, not known): "
                 + (", ".join(markdown_code(f.case) for f in new) if new else "none")]
    return "\n".join(rows) + "\n"


@click.command("gpu-check")
@click.argument("image", required=False)
@click.option("-o", "--op", "ops", multiple=True, help="Only this op (-o of test-backend-ops; repeatable). "
                                                       "Default: gpu_check.ops.")
@click.option("-b", "--backend", help="Backend tested against the CPU (default: gpu_check.backend, CUDA0).")
@click.option("--gpus", help="docker --gpus for the container (none: no GPU) [gpu_check.gpus, all].")
@click.option("--log", "log_file", type=click.Path(dir_okay=False, exists=True),
              help="Judge this recorded output (scripts/gpu_run.py backend-ops' backend-ops.log, plain or .xz, .gz, "
                   ".zst) instead of running.")
@click.option("--save-log", type=click.Path(dir_okay=False), help="Write test-backend-ops' output to this file.")
@click.option("--json", "json_file", type=click.Path(dir_okay=False), help="Write the result as JSON to this file.")
@click.option("--compare", "compare_file", type=click.Path(dir_okay=False),
              help="The release's gpu-check JSON: fail only on failing cases it did not have (the nightly gate).")
@click.option("--compare-entry", help="As --compare, from this lock entry's gpu_check.")
@click.option("--attach-lock", is_flag=True, help="Record the result in the image's lock entry: builds[KEY].gpu_check.")
@click.option("--lock-entry", help="With --attach-lock: the lock entry (default: the one whose tags name IMAGE).")
@click.option("--lock", "lock_path", help="Lock file [lock.path].")
@click.option("--step-summary", type=click.Path(dir_okay=False), help="Append a Markdown table to this file (CI).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="buildkit.toml to read.")
@handle_errors
def gpu_check(image: str | None, ops: tuple[str, ...], backend: str | None, gpus: str | None, log_file: str | None,
              save_log: str | None, json_file: str | None, compare_file: str | None, compare_entry: str | None,
              attach_lock: bool, lock_entry: str | None, lock_path: str | None, step_summary: str | None,
              config_path: str | None) -> None:
    """Run the fork's test-backend-ops from IMAGE's tests target (`test -b CUDA0`), print one verdict line.

    \b
    A failing case fails the check unless gpu_check.known_failures lists it with a reason; the report
    still names it as known. Exit 0: passed; 1: failed (or, with --compare, a failing case the release
    did not have). IMAGE is built with `--target tests` (see docs/gpu.md); on a GPU host without Docker
    run `scripts/gpu_run.py backend-ops BUNDLE` there and judge its log here with --log.
    """
    from buildkit.plan.config import find_config_file, load_config

    overrides = {"lock.path": (lock_path, "--lock")} if lock_path else {}
    cfg = load_config(find_config_file(config_path, os.environ, Path.cwd()), os.environ, overrides)
    settings = cfg.options.gpu_check
    backend = backend or settings.backend
    ops = tuple(ops) or settings.ops
    known = known_failures(settings.known_failures)
    if not image and not log_file:
        raise BuildkitError("gpu-check needs an IMAGE to run, or --log FILE to judge")
    code = None
    if log_file:
        run, text = _read_log(log_file, keep=bool(save_log))
    else:
        assert image is not None  # no --log: an IMAGE (checked above)
        click.echo(f"gpu-check {image}: {PROGRAM} {' '.join(backend_ops_args(backend, ops))}", err=True)
        code, text = _run_in_engine(image, backend_ops_args(backend, ops), settings.timeout, gpus or settings.gpus)
        run = parse(text)
    if save_log:
        _save(save_log, text, "the log")
    check = judge(run, backend, known, ops, exit_code=code)
    click.echo(printable(check.line()))
    release = _release(compare_file, cfg.lock.path, compare_entry)
    new = new_failures(check, release) if (compare_file or compare_entry) else None
    if new is not None:
        click.echo(printable(f"new failing cases (not in the release, not known): "
                             f"{', '.join(f.case for f in new) or 'none'}"))
    if json_file:
        _save(json_file, json_text(check.to_dict()) + "\n", "the result")
    if step_summary:
        _save(step_summary, _summary(check, new), "the step summary", append=True)
    if attach_lock:
        key = _attach(cfg.lock.path, image or "", lock_entry, check)
        click.echo(f"recorded in {cfg.lock.path} builds[{key!r}].gpu_check", err=True)
    failed = bool(check.problem) or (bool(new) if new is not None else not check.ok)
    raise SystemExit(1 if failed else 0)
