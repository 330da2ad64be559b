"""Issue 37: GGML_CUDA_FA_ALL_QUANTS as a per-fork setting. `buildkit init` proposes the CUDA flags the fork's
own build notes (CLAUDE.md at the pinned commit) recommend as build.cmake_args; they reach the rendered
Dockerfile's CMake line and the build key."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from cliutil import run_cli
from forkrepo import make_fork_repo
from test_plan_render import FACTS

from buildkit.plan.buildkey import key_of
from buildkit.plan.buildplan import make_plan, make_request
from buildkit.plan.config import ConfigDocument, load_config
from buildkit.plan.inputs import plan_inputs
from buildkit.plan.render import render_dockerfile, templates_sha256
from buildkit.source.buildnotes import proposed_flags

ROOT = Path(__file__).resolve().parents[2]
CLAUDE_MD = """# Fork notes

## Build

```bash
cmake -B build -DGGML_CUDA=ON -DGGML_NATIVE=ON \\
  -DGGML_CUDA_NO_VMM=ON -DGGML_CUDA_FA_ALL_QUANTS=ON \\
  -DCMAKE_CUDA_ARCHITECTURES=86
cmake --build build -j
```

A flag such as -DGGML_CUDA_FORCE_MMQ=ON in prose (no build command on its line) is not proposed.
"""


@pytest.fixture(scope="module")
def noted_fork(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("fork") / "noted-fork"
    make_fork_repo(repo, ROOT / "examples" / "tiny-fork", fork_files={"CLAUDE.md": CLAUDE_MD})
    return repo


def _plan(config: Path):
    cfg = load_config(ConfigDocument(config, tomllib.loads(config.read_text())), env={}, overrides={},
                      cwd=config.parent)
    return make_plan(make_request(cfg), replace(FACTS), template_sha256=templates_sha256(), tool_version="9.9.9")


def test_only_cuda_flags_on_cmake_lines_that_buildkit_does_not_set_itself():
    got = proposed_flags({"CLAUDE.md": CLAUDE_MD})
    assert got is not None and got.flags == ("-DGGML_CUDA_FA_ALL_QUANTS=ON",) and got.source == "CLAUDE.md line 6"
    assert proposed_flags({"README.md": "cmake -B build -DGGML_CUDA=ON\n"}) is None


def test_init_proposes_the_forks_flag_and_it_reaches_the_dockerfile_and_the_build_key(tmp_path, noted_fork):
    proc = run_cli(tmp_path, "init", "--fork", str(noted_fork), "--arch", "sm_90")
    assert proc.returncode == 0, proc.stderr
    assert "-DGGML_CUDA_FA_ALL_QUANTS=ON (from the fork's CLAUDE.md line 6)" in proc.stdout
    config = tmp_path / "buildkit.toml"
    text = config.read_text()
    assert tomllib.loads(text)["build"]["cmake_args"] == ["-DGGML_CUDA_FA_ALL_QUANTS=ON"]
    assert "# Proposed by `buildkit init` from the fork's CLAUDE.md line 6" in text
    plan = _plan(config)
    cmake_line = next(line for line in render_dockerfile(plan).splitlines() if "-DGGML_CUDA_FA_ALL_QUANTS=ON" in line)
    assert "cmake" in cmake_line or "CMAKE" in cmake_line or "-D" in cmake_line
    assert "-DGGML_CUDA_FA_ALL_QUANTS=ON" in plan_inputs(plan).cmake_args
    config.write_text(text.replace('cmake_args = ["-DGGML_CUDA_FA_ALL_QUANTS=ON"]', "cmake_args = []"))
    assert key_of(plan_inputs(_plan(config))) != key_of(plan_inputs(plan))


def test_a_fork_without_notes_gets_no_proposal(tmp_path):
    repo = tmp_path / "plain-fork"
    make_fork_repo(repo, ROOT / "examples" / "tiny-fork")
    work = tmp_path / "work"
    work.mkdir()
    proc = run_cli(work, "init", "--fork", str(repo), "--arch", "sm_90")
    assert proc.returncode == 0, proc.stderr
    assert "build.cmake_args =" not in proc.stdout
    assert tomllib.loads((work / "buildkit.toml").read_text())["build"].get("cmake_args") is None
