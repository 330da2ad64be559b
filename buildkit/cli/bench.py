"""The `buildkit bench` command (registered in cli/main.py)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from buildkit.bench.protocol import (DEFAULT_MAX_TOKENS, DEFAULT_PROMPT, DEFAULT_RUNS, DEFAULT_TIMEOUT,
                                     DEGRADATION_THRESHOLD, Protocol, check_seconds, read_prompt)
from buildkit.cli.options import handle_errors
from buildkit.cli.output import emit_json
from buildkit.core import interrupts
from buildkit.plan.config import find_config_file, load_config, read_document
from buildkit.core.errors import BenchError
from buildkit.engine.current import get_engine
from buildkit.plan.profiles import ServerSpec, get_profile, make_spec

if TYPE_CHECKING:
    from buildkit.bench.results import BenchReport, RunResult


def project_config(config_path: str | None) -> Path | None:
    return find_config_file(config_path, os.environ, Path.cwd())


def _progress(msg: str) -> None:
    click.echo(msg, err=True)


def _run_line(run: RunResult) -> str:
    server = []
    if run.predicted_tps is not None:
        server.append(f"gen {run.predicted_tps:.2f} tok/s")
    if run.prompt_tps is not None:
        server.append(f"prompt {run.prompt_tps:.2f} tok/s")
    if run.draft_n:
        server.append(f"draft {run.draft_accepted or 0}/{run.draft_n} accepted")
    return (f"run {run.run}: {run.tokens} tokens in {run.wall_s:.2f}s = {run.client_tps:.2f} tok/s"
            + (f" (server: {', '.join(server)})" if server else ""))


@click.command(context_settings={"ignore_unknown_options": False})
@click.option("--url", help="A running OpenAI-compatible server (llama-server), e.g. http://127.0.0.1:8080.")
@click.option("--image", help="Image to start with docker and measure (its entrypoint is llama-server).")
@click.option("--model", type=click.Path(dir_okay=False), help="--image: model file (GGUF), mounted read-only.")
@click.option("--model-draft", type=click.Path(dir_okay=False), help="--image: draft model for speculative decoding.")
@click.option("--profile", "profile_name", help="--image: runtime profile of buildkit.toml ([profiles.NAME]).")
@click.option("--gpus", help="--image: docker --gpus value (all, 2, device=0); none = no GPU. "
                             "Default: the profile's gpus, else no GPU.")
@click.option("--startup-timeout", type=float, default=300.0, show_default=True,
              help="--image: seconds to wait for the server's /health.")
@click.option("--prompt", help="Prompt of every run (default: the HTML Space Invaders game request).")
@click.option("--prompt-file", type=click.Path(dir_okay=False, exists=True), help="Read the prompt from a file.")
@click.option("--runs", type=int, default=DEFAULT_RUNS, show_default=True, help="Runs, one after another.")
@click.option("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, show_default=True,
              help="Tokens to generate in each request.")
@click.option("--concurrency", type=int, default=1, show_default=True,
              help="Identical requests sent at once in each run.")
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True,
              help="Seconds each request may take, first byte sent to last byte received.")
@click.option("--ignore-eos/--no-ignore-eos", default=True, show_default=True,
              help="Ask llama-server to generate max-tokens even past end-of-sequence, so runs compare.")
@click.option("--thinking/--no-thinking", default=False, show_default=True,
              help="chat_template_kwargs.enable_thinking for models that think.")
@click.option("--cache-prompt/--no-cache-prompt", default=False, show_default=True,
              help="Let llama-server reuse the previous run's prompt cache (off: every run processes the prompt).")
@click.option("--degradation-threshold", type=float, default=DEGRADATION_THRESHOLD, show_default=True,
              help="Flag the bench as degraded when the last run's tok/s is below this fraction of the first's.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (progress goes to stderr).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Also write the JSON report to this file.")
@click.option("--compare", "compare_file", type=click.Path(dir_okay=False),
              help="A previous report (--json/--output): print both side by side with the ratio now/before.")
@click.option("--compare-image", help="--image: also measure this image with the same model and profile, "
                                      "and compare (it is the 'before').")
@click.option("--max-slowdown", type=click.FloatRange(0, 100), metavar="PCT",
              help="With --compare or --compare-image: exit 1 when the mean tok/s is more than PCT percent below "
                   "before's (a gate, e.g. 5 before promoting a nightly).")
@click.option("--attach-lock", is_flag=True,
              help="Record the results in the lock entry of the image measured (builds[KEY].bench; with "
                   "--max-slowdown the gate's ratio and verdict too, builds[KEY].bench.gate).")
@click.option("--lock-entry", help="With --attach-lock: the lock entry (e.g. cpu/server); needed with --url.")
@click.option("--lock", "lock_path", help="Lock file [lock.path].")
@click.option("--step-summary", "step_summary", type=click.Path(dir_okay=False), metavar="FILE",
              help="Append a Markdown table to FILE (CI: \"$GITHUB_STEP_SUMMARY\"): with --max-slowdown the gate, "
                   "new vs release tok/s, ratio, threshold and verdict; else the mean tok/s.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="buildkit.toml to read (default: ./buildkit.toml, or $LLAMA_BUILDKIT_CONFIG).")
@click.argument("server_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- LLAMA-SERVER ARGS...]")
@handle_errors
def bench(url: str | None, image: str | None, model: str | None, model_draft: str | None, profile_name: str | None,
          gpus: str | None, startup_timeout: float, prompt: str | None, prompt_file: str | None, runs: int,
          max_tokens: int, concurrency: int, timeout: float, ignore_eos: bool, thinking: bool, cache_prompt: bool,
          degradation_threshold: float, as_json: bool, output: str | None, compare_file: str | None,
          compare_image: str | None, max_slowdown: float | None, attach_lock: bool, lock_entry: str | None,
          lock_path: str | None, step_summary: str | None, config_path: str | None,
          server_args: tuple[str, ...]) -> None:
    """Measure tokens/s of a llama-server: a running one (--url) or an image started for it (--image).

    \b
    The default protocol: 3 runs of the same prompt (an HTML Space Invaders game), one after another,
    max_tokens 800 with ignore_eos, temperature 0, thinking off. Per run: tokens, wall time, tokens/s,
    the server's own timings and draft acceptance; then mean/min/max and a degradation flag.
    \b
      buildkit bench --url http://127.0.0.1:8080
      buildkit bench --image buun-llama-cpp:cpu --model m.gguf -- --ctx-size 4096
      buildkit bench --image new:tag --profile dflash --model m.gguf --model-draft d.gguf --compare old.json
    """
    # the client, the results and the container come with requests and docker-py: loaded when measuring,
    # not for every `buildkit` command
    from buildkit.bench.client import run_bench
    from buildkit.bench.container import docker_client, local_image_id, served
    from buildkit.bench.format import compare, format_compare, format_report, invalid_text
    from buildkit.bench.lockrecord import attach_to_lock
    from buildkit.bench.results import load_report, save_report
    from buildkit.bench.gate import failed_markdown, make_gate

    if bool(url) == bool(image):
        raise BenchError("give either --url (a running server) or --image (buildkit starts it)")
    if url:
        used = [flag for flag, value in (("--model", model), ("--model-draft", model_draft),
                                         ("--profile", profile_name), ("--gpus", gpus),
                                         ("--compare-image", compare_image)) if value]
        if used or server_args:
            raise BenchError(f"{', '.join(used) or 'llama-server arguments (after --)'}: only with --image "
                             f"(the server buildkit starts), not with --url")
    if prompt and prompt_file:
        raise BenchError("give --prompt or --prompt-file, not both")
    if prompt_file:
        prompt = read_prompt(prompt_file)
    if output and not Path(output).resolve().parent.is_dir():
        raise BenchError(f"--output {output}: the folder {Path(output).resolve().parent} does not exist; create it "
                         "first (the report is written after the runs)")
    check_seconds("--startup-timeout", startup_timeout)
    protocol = Protocol(prompt=prompt or DEFAULT_PROMPT, runs=runs, max_tokens=max_tokens, concurrency=concurrency,
                        timeout=timeout, ignore_eos=ignore_eos, enable_thinking=thinking, cache_prompt=cache_prompt,
                        degradation_threshold=degradation_threshold).check()
    if max_slowdown is not None and not (compare_file or compare_image):
        raise BenchError("--max-slowdown needs --compare or --compare-image (what it is measured against)")
    other = load_report(Path(compare_file)) if compare_file else None
    if other is not None and compare_image:
        raise BenchError("give --compare or --compare-image, not both")
    if other is not None and other.invalid:
        raise BenchError(f"--compare {compare_file}: {invalid_text(other)}; an invalid bench is not compared")
    cfg_path = project_config(config_path)

    # everything is checked before anything starts
    spec = document = None  # buildkit.toml, parsed once if a profile or the lock needs it
    if image:
        profile = None
        if profile_name:
            document = read_document(cfg_path)
            profile = get_profile(document, profile_name)
        spec = make_spec(image=image, model=model, model_draft=model_draft, profile=profile,
                         extra_args=tuple(server_args), gpus=gpus, host_port=None, use_profile_port=False,
                         bind="127.0.0.1")
    engine = get_engine()
    client = image_id = None
    if image:
        client = docker_client(engine)
        image_id = local_image_id(client, image)
        if compare_image and local_image_id(client, compare_image) == image_id:  # --compare-image needs --image
            raise BenchError(f"--image {image} and --compare-image {compare_image} are the same image "
                             f"({image_id[:19]}); a local tag moves to the latest build of its variant, the "
                             "bk-<key>-<variant> tag of each build does not")
    lock_file = key = None
    if attach_lock:
        overrides = {"lock.path": (lock_path, "--lock")} if lock_path else {}
        cfg = load_config(document if document is not None else cfg_path, os.environ, overrides)
        lock_file = cfg.lock.path
        from buildkit.release.lockfile import Lock

        lock = Lock.read(lock_file)
        builds = lock.builds
        if lock_entry:
            key = lock_entry
            if key not in builds:
                raise BenchError(f"{lock_file} has no entry {key!r} (entries: {', '.join(builds) or 'none'})")
        elif image:
            key = lock.describing(image, image_id)
            if key is None:
                raise BenchError(f"no entry of {lock_file} describes image {image} "
                                 f"(entries: {', '.join(builds) or 'none'}); name one with --lock-entry")
        else:
            raise BenchError("--attach-lock with --url needs --lock-entry KEY (which build is being measured?)")

    def target_of(s: ServerSpec | None, img_id: str | None) -> dict[str, Any]:
        if s is None:
            return {}
        return {"image": s.image, "image_id": img_id, "model": str(s.model),
                "model_draft": str(s.model_draft) if s.model_draft else None, "profile": s.profile or None,
                "server_args": list(s.args), "gpus": s.gpus or None}

    def measure(s: ServerSpec | None, img_id: str | None) -> BenchReport:
        _progress(f"bench {s.image if s else url}: {protocol.runs} runs, max_tokens {protocol.max_tokens}, "
                  f"concurrency {protocol.concurrency}")
        shown: dict[str, Any] = {"on_run": lambda r: _progress(_run_line(r)),
                                 "on_invalid": lambda i, why: _progress(f"run {i}: INVALID, left out: {why}")}
        if s is None:
            assert url is not None  # no --image: --url (checked above)
            return run_bench(url, protocol, **shown)
        with served(s, engine, startup_timeout, log=_progress) as srv:
            return run_bench(srv.url, protocol, target=target_of(s, srv.image_id), **shown)

    new_label = image or url or ""  # one of them is given (checked above)
    old_label = compare_image or (other.label if other is not None else "")
    try:
        report = measure(spec, image_id)
        if compare_image and not report.error and not report.invalid:
            from dataclasses import replace

            assert spec is not None and client is not None  # --compare-image comes with --image (checked above)
            other = measure(replace(spec, image=compare_image), None)
            other.target["image_id"] = local_image_id(client, compare_image)
    except BenchError as exc:  # the server did not start, ...: the step summary says there is no verdict
        if step_summary:
            _write_step_summary(step_summary, failed_markdown(str(exc), new_label, old_label))
        raise

    compared = other is not None and not report.invalid and not other.invalid  # nothing invalid is compared
    doc = report.to_dict()
    gate = gate_problem = None
    if compared:
        assert other is not None
        doc["compare"] = {"base": other.to_dict() if compare_image else {"file": compare_file, "label": other.label},
                          "rows": compare(other, report)}
        if max_slowdown is not None:
            try:  # the gate's figures are checked before anything prints or records them
                gate = make_gate(doc["compare"]["rows"], max_slowdown, new_label, old_label,
                                 [r.client_tps for r in other.runs])
                doc["gate"] = gate.to_dict()
                gate_problem = gate.problem()
            except BenchError as exc:
                gate_problem = str(exc)
    unsaved = save_report(Path(output), report, doc) if output else ""  # "" or where the report went instead
    if as_json:
        emit_json(doc)
    else:
        click.echo(format_report(report))
        if compare_image and other is not None:
            click.echo(format_report(other))
        if compared:
            assert other is not None
            before = Path(compare_file).name if compare_file else "before"  # --compare's file, or --compare-image
            click.echo(format_compare(other, report, before, "now"))
        if gate is not None:
            click.echo(f"gate: {gate.verdict} (new/before {gate.ratio:.3f}x, at most {gate.max_slowdown:g}% slower)")
    if attach_lock and report.runs and not report.invalid:
        assert lock_file is not None and key is not None  # set above for --attach-lock, or it raised
        attach_to_lock(lock_file, key, report, gate)
        _progress(f"attached the results{' and the gate' if gate else ''} to {lock_file} entry {key}")
    also = f"; {unsaved}" if unsaved else ""
    try:
        _fail_after_report(report, protocol, also, unsaved, compare_image, other, gate_problem)
    except BenchError as exc:
        exc.answered = as_json  # the report above holds the error: stdout gets no second document
        if step_summary and gate is None:
            _write_step_summary(step_summary, failed_markdown(str(exc), new_label, old_label))
        raise
    finally:
        if step_summary and gate is not None:
            _write_step_summary(step_summary, gate.to_markdown())
    if step_summary and gate is None:
        _write_step_summary(step_summary, _plain_markdown(report, doc))


def _write_step_summary(path: str, text: str) -> None:
    from buildkit.core.savefile import write_or_keep

    problem = write_or_keep(Path(path), text, "the step summary", append=True)
    if problem:
        _progress(f"warning: {problem}")


def _plain_markdown(report: BenchReport, doc: dict[str, Any]) -> str:
    """--step-summary without a gate: the mean tok/s (and the ratio of a comparison)."""
    mean = (report.summary()["client_tps"] or {}).get("mean")
    ratio = next((r["ratio"] for r in doc.get("compare", {}).get("rows", []) if r["key"] == "client_tps.mean"), None)
    line = f"- `{report.label}`: mean {mean:.2f} tok/s over {len(report.runs)} runs" if mean else \
        f"- `{report.label}`: no run completed"
    return f"## bench\n\n{line}" + (f", {ratio:.3f}x of before" if ratio else "") + "\n"


def _fail_after_report(report: BenchReport, protocol: Protocol, also: str, unsaved: str, compare_image: str | None,
                       other: BenchReport | None, gate_problem: str | None) -> None:
    """Exit or raise for what the report says went wrong (it is printed by then)."""
    from buildkit.bench.format import invalid_text

    if report.interrupted:
        click.echo(f"error: {report.error} ({len(report.runs)} of {protocol.runs} runs done, kept){also}", err=True)
        sys.exit(128 + (interrupts.received() or signal.SIGINT))
    if report.error:
        raise BenchError(report.error + also)
    if report.invalid:
        raise BenchError(f"{invalid_text(report)}; an invalid bench is not attached to a lock or compared{also}")
    if unsaved:
        raise BenchError(unsaved)
    if compare_image and other is not None and (other.error or other.invalid):
        raise BenchError(f"{compare_image}: {other.error or invalid_text(other) + '; it is not compared'}")
    if gate_problem:
        raise BenchError(gate_problem)
