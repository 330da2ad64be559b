"""`buildkit workload-check` against a real llama-server (issue 46 item 3's logic in CI; marker e2e).

The server is the real llama.cpp tree built by buildkit (tests/realserver.py, the session's `real_server_image`),
on the CPU, with upstream's own speculative decoding: a draft model given with --model-draft. The target is the
tiny llama of tests/tinymodel.py and the drafter the same weights in another file, so the drafts are accepted:
the lossless check compares real greedy tokens of a real speculative path with the target alone's (each prompt
on a fresh container and in sequence on one), acceptance reads the server's own draft figures, and kv compares
a q8_0 cache with f16. The verdict is recorded in the lock and the step summary as the nightly's GPU job does.
The fork's DFlash on a GPU is the truth (docs/gpu-runs); this proves the checks themselves on a real server.
"""

from __future__ import annotations

import json
import shutil

import pytest

from buildkit.core.printable import markdown_cell
from cliutil import run_cli
from tinymodel import Shape, write_llama_model

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

PROFILE = """
[profiles.spec]
description = "upstream's speculative decoding with a draft model, on the CPU"
gpus = "none"
needs_draft = true
args = ["--spec-type", "draft-simple", "--spec-draft-n-max", "8", "--spec-draft-n-min", "0", "--spec-draft-p-min", "0",
        "--ctx-size", "2048", "--parallel", "1"]
"""


def test_workload_check_on_a_real_server_passes_and_is_recorded(real_server_image, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(real_server_image.project, project, ignore=shutil.ignore_patterns("*.lock"))
    shutil.copy(real_server_image.lock, project / "buildkit.lock")
    toml = project / "buildkit.toml"
    toml.write_text(toml.read_text() + PROFILE)
    target = write_llama_model(tmp_path / "target.gguf", Shape(n_head=2))  # 32-wide heads: q8_0's blocks fit
    draft = tmp_path / "draft.gguf"
    shutil.copy(target, draft)
    summary = tmp_path / "summary.md"
    proc = run_cli(project, "workload-check", real_server_image.ref, "--profile", "spec", "--model", str(target),
                   "--model-draft", str(draft), "--checks", "lossless,acceptance,kv", "--kv", "q8_0",
                   "--n-predict", "32", "--runs", "2", "--max-tokens", "96", "--json", str(tmp_path / "v.json"),
                   "--attach-lock", "--lock-entry", "cpu/server", "--step-summary", str(summary), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "lossless spec: PASS 8/8 identical" in lines, proc.stdout  # 4 prompts, fresh and in sequence
    acceptance = next(ln for ln in lines if ln.startswith("acceptance spec: "))
    verdict = json.loads((tmp_path / "v.json").read_text())
    acc = verdict["acceptance"][0]
    assert acc["drafted"] > 0 and acc["rate"] > 0.5 and acc["mean_length"] > 1.5, acceptance  # its own weights
    assert verdict["kv"][0]["total"] == 4 * 64 and verdict["passed"]
    lock = json.loads((project / "buildkit.lock").read_text())
    assert lock["builds"]["cpu/server"]["workload"]["passed"] is True
    assert f"| lossless spec | {markdown_cell('PASS 8/8 identical')} |" in summary.read_text()

    # the release's record gates the next nightly: one that accepts half as many drafts is refused
    (tmp_path / "release.json").write_text(json.dumps(verdict))
    worse = dict(verdict, acceptance=[dict(acc, accepted=acc["drafted"] // 2)])
    (tmp_path / "nightly.json").write_text(json.dumps(worse))
    again = run_cli(project, "workload-check", "--result", str(tmp_path / "nightly.json"), "--compare",
                    str(tmp_path / "release.json"), timeout=120)
    assert again.returncode == 1 and "points below the release's" in again.stdout, again.stdout + again.stderr
    same = run_cli(project, "workload-check", "--result", str(tmp_path / "v.json"), "--compare",
                   str(tmp_path / "release.json"), timeout=120)
    assert same.returncode == 0, same.stdout + same.stderr
