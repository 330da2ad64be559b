"""What tests need to write a project on disk and run the real `buildkit` CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


TEST_MIN_FREE_GB = 2  # GB: what the example fork's builds ask the disk for (see buildkit_env)


def buildkit_env() -> dict[str, str]:
    """This process's environment without any LLAMA_BUILDKIT_* setting, so a developer's own
    settings never leak into a test (tests then add the ones they mean), and with this checkout first on
    PYTHONPATH: a `python -m buildkit.cli` subprocess runs this tree's buildkit, whatever checkout the
    installed package points at (a second worktree's tests otherwise ran the other one's code)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_BUILDKIT_")}
    # The preflight's default disk figure is made for llama.cpp's whole tree (16 GB for one CUDA variant from
    # wheels); the tests' forks are a few files, and CI machines have had 7 GB free. The tests of the refusal
    # itself ask for more than any disk has (--min-free-gb 1000000); the estimate has unit tests.
    env["LLAMA_BUILDKIT_BUILD_MIN_FREE_GB"] = str(TEST_MIN_FREE_GB)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def cli_env(cache_dir: Path | str | None = None, **extra: str) -> dict[str, str]:
    """buildkit_env(), LLAMA_BUILDKIT_CACHE_DIR when `cache_dir` is given, and `extra`."""
    env = buildkit_env()
    if cache_dir is not None:
        env["LLAMA_BUILDKIT_CACHE_DIR"] = str(cache_dir)
    env.update(extra)
    return env


def run_cli(cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 600,
            input: str | None = None) -> subprocess.CompletedProcess:
    """`python -m buildkit.cli ARGS` in `cwd`, output captured as text (default env: cli_env())."""
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *args], cwd=cwd, env=cli_env() if env is None else env,
                          capture_output=True, text=True, timeout=timeout, input=input)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (str, Path)):
        return json.dumps(str(value))  # a JSON string is a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def project_toml(**tables: dict[str, object]) -> str:
    """The text of a buildkit.toml: `schema_version = 1`, then one [table] per keyword, in order."""
    lines = ["schema_version = 1"]
    for table, values in tables.items():
        lines.append(f"[{table}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in values.items())
    return "\n".join(lines) + "\n"


def write_project(root: Path, *, patches: bool = True, **tables: dict[str, object]) -> Path:
    """A project on disk: root/buildkit.toml from `tables` (see project_toml), and an empty root/patches
    folder unless `patches` is false. Returns root."""
    root.mkdir(parents=True, exist_ok=True)
    if patches:
        (root / "patches").mkdir(exist_ok=True)
    (root / "buildkit.toml").write_text(project_toml(**tables))
    return root


class Cli:
    """The real CLI in a subprocess, run in `cwd` with `env` (the `cli` fixture: tmp_path, own cache).
    cli(*args, **env_extra) -> CompletedProcess; `env_extra` adds variables for that one run."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd, self.env = cwd, env

    def __call__(self, *args: str, cwd: Path | None = None, timeout: float = 600, input: str | None = None,
                 **env_extra: str) -> subprocess.CompletedProcess:
        return run_cli(self.cwd if cwd is None else cwd, *args, env={**self.env, **env_extra}, timeout=timeout,
                       input=input)


def default_sigint() -> None:
    """preexec_fn for a CLI the test will Ctrl-C: SIGINT's default action, as from a terminal, even when
    the tests run in a background job (which POSIX shells start with SIGINT ignored, and children
    inherit the ignoring)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
