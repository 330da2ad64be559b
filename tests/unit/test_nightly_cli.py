"""`buildkit nightly`'s --json is a flag like every other command's (issue 24): the JSON document on stdout,
the text lines on stderr; `--summary FILE` writes that document to a file. The old `--json FILE` is refused
in one line that names the new form, before anything runs. The nightly's own work (git, registry, engine)
is replaced by its result here: what is tested is what the command line makes of it."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from click.testing import CliRunner, Result

from buildkit.cli.main import main
from buildkit.flows.nightly.plan import NightlyPlan, VariantStatus
from buildkit.flows.nightly.summary import Summary, VariantResult

from test_nightly_jobs import PLAN

ENV = {k: None for k in os.environ if k.startswith(("LLAMA_BUILDKIT_", "GITHUB_"))}
C = "c" * 40


def summary() -> Summary:
    return Summary(repository="r.example/t/l", url="git://x/f", branch="master", date="20261202",
                   old_commit="b" * 40, new_commit=C, version="0.1.1-nightly.20261202",
                   variants=[VariantResult(variant="cpu", arch="cpu", cuda_version=None, target="server",
                                           status=VariantStatus.PASSED, digest="sha256:" + "1" * 64,
                                           build_seconds=12.0)])


@pytest.fixture
def nightly(monkeypatch, tmp_path):
    """`buildkit nightly ARGS` in a project folder; the runs the command started are in .runs."""
    from buildkit.flows.nightly import run as flow
    from buildkit.flows.nightly import jobs as nightlyjobs

    runs: list[str] = []

    def run_nightly(cfg, **_):
        runs.append("nightly")
        return summary()

    def plan_nightly(cfg, **_):
        runs.append("plan")
        return NightlyPlan.from_dict(PLAN)

    monkeypatch.setattr(flow, "run_nightly", run_nightly)
    monkeypatch.setattr(nightlyjobs, "plan_nightly", plan_nightly)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "buildkit.toml").write_text('schema_version = 1\n[image]\nname = "r.example/t/l"\n')

    return Invoke(runs)


class Invoke:
    """`buildkit nightly ARGS` when called; .runs: the runs the command started."""

    def __init__(self, runs: list[str]) -> None:
        self.runs = runs

    def __call__(self, *args: str) -> Result:
        return CliRunner().invoke(main, ["nightly", *args], env=ENV)


def test_json_is_a_flag_the_document_on_stdout_the_text_on_stderr(nightly, tmp_path):
    out = nightly("--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == summary().to_dict()
    assert "cpu: passed in 12s sha256:" in out.stderr and out.stderr.startswith("nightly 0.1.1-nightly.20261202")
    plain = nightly()
    assert plain.exit_code == 0 and plain.stdout.startswith("nightly 0.1.1") and "{" not in plain.stdout


def test_summary_writes_the_document_to_a_file_with_or_without_json(nightly, tmp_path):
    both = nightly("--json", "--summary", "out/night.json")
    assert both.exit_code == 0, both.output
    assert json.loads((tmp_path / "out" / "night.json").read_text()) == json.loads(both.stdout)
    alone = nightly("--summary", "alone.json")
    assert alone.exit_code == 0 and alone.stdout.startswith("nightly 0.1.1")
    assert json.loads((tmp_path / "alone.json").read_text())["variants"][0]["variant"] == "cpu"


def test_plan_json_prints_the_plan_and_summary_writes_it(nightly, tmp_path):
    out = nightly("--plan", "--json", "--summary", "results/plan.json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == PLAN == json.loads((tmp_path / "results" / "plan.json").read_text())
    assert out.stderr.strip() == f"to build from {C[:12]} as 0.1.1-nightly.20261202: cpu-light"


@pytest.mark.parametrize("args, fix", [
    (["--json", "night.json"], "write the summary to a file with --summary FILE (here --summary night.json)"),
    (["--json=night.json"], "write the summary to a file with --summary FILE (here --summary night.json)"),
    (["--plan", "--json", "night.json", "--force"],
     "write the summary to a file with --summary FILE (here --summary night.json)"),
    (["--json", "-"], "it prints the JSON on stdout by itself: drop the '-'"),
])
def test_the_old_json_file_form_is_refused_in_one_line_and_nothing_runs(nightly, tmp_path, args, fix):
    out = nightly(*args)
    assert out.exit_code == 1
    assert out.stderr.splitlines() == [f"error: --json is a flag now; {fix}"]
    assert out.stdout == "" and nightly.runs == [] and not (tmp_path / "night.json").exists()


def test_summary_on_a_folder_or_stdout_is_refused_and_nothing_runs(nightly, tmp_path):
    (tmp_path / "results").mkdir()
    folder = nightly("--summary", "results")
    assert folder.exit_code == 1
    assert folder.stderr.splitlines() == ["error: --summary results is a folder; name the summary's file"]
    dash = nightly("--summary", "-")
    assert dash.exit_code == 1 and dash.stderr.splitlines() == [
        "error: --summary takes a file; --json prints the JSON on stdout"]
    assert nightly.runs == []


def test_a_stray_word_without_json_is_still_a_usage_error(nightly):
    out = nightly("tonight")
    assert out.exit_code == 2 and "unexpected extra argument (tonight)" in out.stderr and nightly.runs == []


def test_the_generated_workflow_writes_its_documents_with_summary():
    from buildkit.flows.nightly.ciworkflow import WorkflowOptions, render_workflow

    doc = yaml.safe_load(render_workflow(WorkflowOptions(registry="ghcr.io", install="git+https://x/b@v1",
                                                         cache_ref="ghcr.io/a/x")))
    runs = {job: [s["run"] for s in doc["jobs"][job]["steps"] if "buildkit nightly" in s.get("run", "")]
            for job in ("plan", "build", "assemble")}
    assert [len(r) for r in runs.values()] == [1, 1, 1]
    plan, build, assemble = (r[0] for r in runs.values())
    assert "--summary .buildkit-nightly/plan.json" in plan
    assert '--summary ".buildkit-nightly/$UNIT.json"' in build
    assert '--summary "buildkit-nightly.json"' in assemble
    assert not any("--json" in run for run in (plan, build, assemble))
