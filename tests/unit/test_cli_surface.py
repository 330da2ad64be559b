"""The command line a new user reads (issue 24): `--help` shows a command's own options first, then the shared
ones under headings, and none that do nothing there; the release version is `--release` on every command
(a command's `--version` still works, with a warning); under `--json` an error is JSON on stdout too, and
`build --print --json` is JSON."""

import json
import os
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner

from buildkit.cli.main import main

from test_first_contact import C, _fake_prepare

CLEAN_ENV = {k: None for k in os.environ if k.startswith("LLAMA_BUILDKIT_")}


def invoke(*args, **kwargs):
    return CliRunner().invoke(main, list(args), env=CLEAN_ENV, **kwargs)


def help_sections(command: str) -> dict[str, list[str]]:
    """{heading: [option names]} of `buildkit COMMAND --help`, in order."""
    out = invoke(*command.split(), "--help")
    assert out.exit_code == 0, out.output
    sections: dict[str, list[str]] = {}
    heading = None
    for line in out.stdout.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            heading = line[:-1]
            sections[heading] = []
        elif heading and line.startswith("  -"):
            sections[heading].append(line.split()[0].rstrip(","))
    return sections


def test_build_help_lists_its_own_options_first_then_the_shared_ones_by_group():
    sections = help_sections("build")
    assert list(sections) == ["Options", "Source", "What the image is", "Base images", "Where and how it builds",
                              "Image name", "Config and files"]
    assert sections["Options"][0] == "--release" and "--push" in sections["Options"]
    assert "--arch" in sections["What the image is"] and "--source" in sections["Source"]
    assert "--os-image" in sections["Base images"] and "--builder" in sections["Where and how it builds"]
    every = [name for names in sections.values() for name in names]
    assert "--version" not in every and "--image-version" not in every  # one name for the release version


@pytest.mark.parametrize("command, absent", [
    ("tags", ("--source", "--patches", "--os-image", "--builder", "--jobs", "--lock")),
    ("promote", ("--arch", "--source", "--os-image", "--builder", "--cpu-level")),
    ("ccache export", ("--source", "--os-image", "--patches")),
])
def test_commands_offer_no_shared_option_that_does_nothing_there(command, absent):
    every = [name for names in help_sections(command).values() for name in names]
    assert not set(absent) & set(every), set(absent) & set(every)
    assert "--config" in every and "--set" in every


def test_tags_takes_release_and_its_old_version_with_a_warning(tmp_path):
    cfg = tmp_path / "buildkit.toml"
    cfg.write_text('schema_version = 1\n[image]\nname = "reg.example/t/l"\n[build]\narch = "cpu"\n')
    new = invoke("tags", "--config", str(cfg), "--release", "1.2.3", "--commit", C)
    old = invoke("tags", "--config", str(cfg), "--version", "1.2.3", "--commit", C)
    assert new.exit_code == old.exit_code == 0 and new.stdout == old.stdout
    assert "reg.example/t/l:1.2.3-cpu" in new.stdout
    assert "warning: a command's --version is now --release" in old.stderr and "warning" not in new.stderr
    missing = invoke("tags", "--config", str(cfg), "--commit", C)
    assert missing.exit_code == 2 and "Missing option '--release'" in missing.stderr
    both = invoke("tags", "--config", str(cfg), "--release", "1.2.3", "--version", "1.2.4", "--commit", C)
    assert both.exit_code == 2 and "different versions" in both.stderr


def test_an_error_under_json_is_json_on_stdout(tmp_path):
    cfg = tmp_path / "buildkit.toml"
    cfg.write_text('schema_version = 1\n[build]\narch = "cpu"\n')
    out = invoke("tags", "--config", str(cfg), "--release", "1.2.3", "--commit", "xyz", "--json")
    assert out.exit_code == 1
    answer = json.loads(out.stdout)
    assert answer["exit_code"] == 1 and "commit SHA" in answer["error"]
    assert out.stderr.count("error: ") == 1
    plain = invoke("tags", "--config", str(cfg), "--release", "1.2.3", "--commit", "xyz")
    assert plain.exit_code == 1 and plain.stdout == ""  # without --json, stdout stays empty


def test_build_print_json_is_the_command_and_the_plan(monkeypatch, tmp_path):
    from buildkit.cli import unitspecs
    from buildkit.flows.unit import pipeline

    _fake_prepare(monkeypatch)
    real: Callable[..., Any] = pipeline.prepare  # the fake's: it makes a SimpleNamespace

    def prepare(*a, **k):
        prepared = real(*a, **k)
        prepared.build_key = "k" * 16
        return prepared

    monkeypatch.setattr(pipeline, "prepare", prepare)
    monkeypatch.setattr(unitspecs, "reproducible_exporter", lambda cfg, engine: False)
    monkeypatch.chdir(tmp_path)
    out = invoke("build", "--arch", "cpu", "--print", "--json", "--cache-dir", str(tmp_path / "cache"),
                 catch_exceptions=False)
    assert out.exit_code == 0, out.output
    answer = json.loads(out.stdout)
    assert answer["argv"][:3] == ["docker", "buildx", "build"] and answer["commit"] == C
    assert answer["build_key"] == "k" * 16 and answer["variant"] == "cpu"
    assert any(a.startswith("-DGGML_CPU_ALL_VARIANTS=") for a in answer["cmake_args"])
    assert answer["labels"]["org.opencontainers.image.revision"] == C


def test_a_command_that_printed_its_own_json_answer_gets_no_second_document():
    """bench --json prints its report (with the error and the runs kept) and then fails: stdout stays one
    document, which scripts parse."""
    import click

    from buildkit.cli.options import handle_errors
    from buildkit.core.errors import BenchError

    @click.command()
    @click.option("--json", "as_json", is_flag=True)
    @click.option("--answered", is_flag=True)
    @handle_errors
    def cmd(as_json, answered):
        click.echo(json.dumps({"error": "cut", "runs": [1]}))
        exc = BenchError("cut")
        exc.answered = answered
        raise exc

    mine = CliRunner().invoke(cmd, ["--json", "--answered"])
    assert mine.exit_code == 1 and json.loads(mine.stdout) == {"error": "cut", "runs": [1]}
    theirs = CliRunner().invoke(cmd, ["--json"])  # not answered: the CLI adds its own document
    assert theirs.stdout.count("\n") == 2 and json.loads(theirs.stdout.splitlines()[-1])["error"] == "cut"


def test_a_closed_pipe_ends_quietly(tmp_path):
    """`buildkit config | head`: the reader is gone before buildkit writes; buildkit ends as a program that
    SIGPIPE ended does (141), with nothing on stderr (it printed 'error: Broken pipe')."""
    import subprocess
    import sys

    from cliutil import ROOT, cli_env

    (tmp_path / "buildkit.toml").write_text("schema_version = 1\n")
    read_end, write_end = os.pipe()
    os.close(read_end)  # no reader at all, before buildkit starts: its first write fails, every time
    try:
        done = subprocess.run([sys.executable, "-m", "buildkit.cli", "config"], cwd=tmp_path, env=cli_env(),
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert done.returncode == 141 and done.stderr == "", (done.returncode, done.stderr, str(ROOT))
