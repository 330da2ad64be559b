"""Issue 50 item 8: `buildkit --help` imports no command's module, and says what it said when every module was
imported (cli/main.py COMMANDS holds each command's line; here it is held to the command's own help)."""

from __future__ import annotations

import json
import subprocess
import sys

import click
from click.testing import CliRunner
from cliutil import cli_env

from buildkit.cli.main import COMMANDS, main


def test_help_imports_no_command_module():
    probe = ("import sys\nfrom buildkit.cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n"
             "    pass\nimport json\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('buildkit'))))")
    done = subprocess.run([sys.executable, "-c", probe], env=cli_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["buildkit", "buildkit.cli", "buildkit.cli.main"]


def test_each_commands_line_is_its_own_help_and_help_is_what_it_was():
    ctx = click.Context(main)
    eager = click.Group(name=main.name, callback=main.callback, params=main.params, help=main.help,
                        context_settings=main.context_settings)
    for name in COMMANDS:
        command = main.get_command(ctx, name)
        assert command is not None and command.name == name
        assert COMMANDS[name][2] == command.get_short_help_str(limit=80), name
        eager.add_command(command, name)
    assert sorted(main.commands) == sorted(COMMANDS)
    lazy_help = CliRunner().invoke(main, ["--help"], prog_name="buildkit").output
    eager_help = CliRunner().invoke(eager, ["--help"], prog_name="buildkit").output
    assert lazy_help == eager_help and "gpu-check" in lazy_help


def test_an_unknown_command_is_one_line():
    result = CliRunner().invoke(main, ["bulid"])
    assert result.exit_code == 2 and "No such command 'bulid'" in result.output
