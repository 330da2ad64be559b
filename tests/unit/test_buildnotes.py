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
from buildkit.plan.plantypes import Resolved
from buildkit.plan.config import ConfigDocument, load_config
from buildkit.plan.plantypes import plan_inputs
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
    return make_plan(make_request(cfg), Resolved(replace(FACTS), templates_sha256(), "9.9.9"))


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


# ----------------------------------------------------------------------------- issue 50 item 4: a DFlash fork

DRAFTER = "// the DFlash drafter's graph\n"


@pytest.fixture(scope="module")
def dflash_fork(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("fork") / "dflash-fork"
    make_fork_repo(repo, ROOT / "examples" / "tiny-fork",
                   fork_files={"CLAUDE.md": CLAUDE_MD, "src/models/dflash_draft.cpp": DRAFTER})
    return repo


def test_a_dflash_fork_gets_the_dflash_profile_and_the_flag_said_with_its_cost(tmp_path, dflash_fork):
    from buildkit.plan.profiles import get_profile
    from buildkit.plan.starter import DFLASH_PROFILE

    proc = run_cli(tmp_path, "init", "--fork", str(dflash_fork), "--arch", "sm_120")
    assert proc.returncode == 0, proc.stderr
    assert "[profiles.dflash]: the fork is a DFlash fork (src/models/dflash_draft.cpp)" in proc.stdout
    assert "+18% compile time" in proc.stdout and "--no-fork-flags" in proc.stdout
    config = tmp_path / "buildkit.toml"
    document = tomllib.loads(config.read_text())
    assert document["profiles"]["dflash"] == DFLASH_PROFILE
    profile = get_profile(ConfigDocument(config, document), "dflash")
    assert profile.needs_draft and profile.args[:2] == ("--spec-type", "dflash")
    printed = run_cli(tmp_path, "run", "--profile", "dflash", "--image", "buun-llama-cpp:cuda13.1-sm120",
                      "--model", "target.gguf", "--model-draft", "dflash-draft.gguf", "--print")
    assert printed.returncode == 0 and "--spec-type dflash" in printed.stdout, printed.stderr


def test_the_proposed_flag_is_easy_to_decline(tmp_path, dflash_fork):
    proc = run_cli(tmp_path, "init", "--fork", str(dflash_fork), "--arch", "sm_120", "--no-fork-flags")
    assert proc.returncode == 0, proc.stderr
    assert "proposed, left out (--no-fork-flags): -DGGML_CUDA_FA_ALL_QUANTS=ON" in proc.stdout
    text = (tmp_path / "buildkit.toml").read_text()
    assert tomllib.loads(text)["build"].get("cmake_args") is None
    assert 'to take them: cmake_args = ["-DGGML_CUDA_FA_ALL_QUANTS=ON"]' in " ".join(
        line.lstrip("# ") for line in text.splitlines())


def test_the_seeds_dflash_profile_is_the_one_init_writes():
    from buildkit.plan.starter import DFLASH_PROFILE

    assert tomllib.loads((ROOT / "buildkit.toml").read_text())["profiles"]["dflash"] == DFLASH_PROFILE


def test_a_cpu_arch_gets_the_dflash_profile_without_gpu_arguments():
    from buildkit.plan.starter import starter_toml

    profile = tomllib.loads(starter_toml({"build.arch": "cpu"}, dflash="CLAUDE.md line 3"))["profiles"]["dflash"]
    assert "gpus" not in profile and not any("gpu-layers" in a for a in profile["args"])


@pytest.mark.parametrize("dflash", ["", "src/models/dflash_draft.cpp"])
def test_every_page_the_generated_file_points_at_exists(dflash):
    """The comments of the generated buildkit.toml name buildkit's pages (docs/bench.md#runtime-profiles, the
    measurement of a proposed flag): each file exists and each #anchor is one of its headings."""
    import re

    from buildkit.plan.starter import starter_toml
    from buildkit.source.buildnotes import Proposal
    from test_reference_pages import slug

    notes = {"build.cmake_args": " ".join(Proposal(("-DGGML_CUDA_FA_ALL_QUANTS=ON",), "CLAUDE.md line 6").notes())}
    text = " ".join(line.lstrip("# ") for line in starter_toml({"build.arch": "sm_120"}, notes, dflash).splitlines())
    pointers = set(re.findall(r"(?<![\w/])((?:[\w.-]+/)*[\w.-]+\.md)(?:#([\w-]+))?", text))
    assert {p for p, _ in pointers} >= {"docs/bench.md", "docs/gpu-runs/2026-12-06-h100/README.md"}, pointers
    for page, anchor in pointers:
        assert (ROOT / page).is_file(), page
        if anchor:
            assert anchor in {slug(h) for h in re.findall(r"^#+ (.+)$", (ROOT / page).read_text(), re.M)}, anchor
