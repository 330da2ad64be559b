"""The nightly as CI jobs, without engine or network: runners per unit, the cache budget, the plan's
outputs and the files the jobs hand on; and the stand-in runner's expressions (tests/ghactions.py),
which the engine test of the generated workflow relies on."""

from __future__ import annotations

import json
import os

import pytest

from buildkit.core.errors import ConfigError
from buildkit.flows.nightly.ciworkflow import cache_budget
from buildkit.flows.nightly.plan import NightlyPlan, VariantStatus
from buildkit.flows.nightly.jobs import (DEFAULT_RUNNERS, check_runners, github_outputs, label_arch, parse_runners,
                                        plan_summary, read_results, unit_id, write_github_outputs)
from buildkit.plan.config import load_config
from buildkit.cli.nightlyspecs import variant_specs
from fakeengine import FakeEngine
from ghactions import condition, read_outputs, substitute


def variants(**overrides):
    cfg = load_config(None, env={}, overrides={k: (v, "test") for k, v in overrides.items()})
    return variant_specs(cfg, FakeEngine())[0]


def test_a_runner_label_must_build_the_cpu_of_its_units():
    assert label_arch("ubuntu-latest") == "amd64" and label_arch("ubuntu-24.04-arm") == "arm64"
    assert label_arch("self-hosted,linux,ARM64") == "arm64" and label_arch("self-hosted,gpu") is None
    two = variants(**{"matrix.archs": ["cpu"], "build.platform": "linux/amd64,linux/arm64",
                      "build.cpu_level": "none"})
    assert [unit_id(v) for v in two] == ["cpu-none_linux_amd64", "cpu-none_linux_arm64"]
    check_runners(two, dict(DEFAULT_RUNNERS))
    with pytest.raises(ConfigError, match="'ubuntu-24.04-arm' is a arm64 machine; it cannot build the amd64"):
        check_runners(two, {**dict(DEFAULT_RUNNERS), **parse_runners(["amd64=ubuntu-24.04-arm"])})
    with pytest.raises(ConfigError, match="no runner is given for arm64"):
        check_runners(two, {"amd64": "ubuntu-latest"})
    check_runners(two, {"amd64": "self-hosted,big", "arm64": "self-hosted,arm64"})  # labels that do not say
    # a cross build compiles on the build machine's CPU: both platforms on amd64
    cross = variants(**{"matrix.archs": ["cpu"], "build.platform": "linux/amd64,linux/arm64",
                        "build.build_platform": "linux/amd64", "build.cpu_level": "none"})
    check_runners(cross, {"amd64": "ubuntu-latest"})
    for bad in ("amd64", "riscv64=x", "arm64="):
        with pytest.raises(ConfigError, match="--runner"):
            parse_runners([bad])


def test_the_cache_budget_of_a_big_cuda_matrix():
    big = variants(**{"matrix.archs": ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"],
                      "matrix.cuda_versions": ["12.8", "13.1"]})
    total, text = cache_budget(big, "registry")
    assert len(big) == 12 and total == pytest.approx(3.6) and "12 cuda unit(s) x 0.3 GB" in text
    with pytest.raises(ConfigError, match=r"--layer-cache gha: 12 cuda unit\(s\) x 1.1 GB = 13.2 GB"):
        cache_budget(big, "gha")
    assert cache_budget(big, "gha", ccache=False)[0] == pytest.approx(9.6)
    assert cache_budget(variants(**{"matrix.archs": ["cpu", "sm_120"]}), "gha")[0] == pytest.approx(1.3)


PLAN = {"plan_version": 1, "repository": "r.example/t/l", "url": "git://x/f", "branch": "master", "date": "20261202",
        "commit": "c" * 40, "old_commit": "b" * 40, "patch_set_sha256": "p", "version": "0.1.1-nightly.20261202",
        "build": True, "excluded": [],
        "variants": [{"variant": "cpu", "arch": "cpu", "cuda_version": None, "target": "server", "build": False,
                      "reason": "",
                      "previous": {"commit": "c" * 40, "patch_set": "p", "digest": "sha256:" + "1" * 64,
                                   "version": "0.1.0-nightly.20261201", "known_from": "registry"}},
                     {"variant": "cpu-light", "arch": "cpu", "cuda_version": None, "target": "light",
                      "build": True, "reason": "new commit", "previous": None}],
        "matrix": {"include": [{"id": "cpu-light", "unit": "cpu-light", "variant": "cpu-light",
                                "platform": "linux/amd64", "split": False, "runner": "ubuntu-latest",
                                "reason": "new commit"}]}}
RESULT = {"result_version": 2, "id": "cpu-light", "unit": "cpu-light", "variant": "cpu-light",
          "platform": "linux/amd64", "commit": "c" * 40, "version": "0.1.1-nightly.20261202", "status": "passed",
          "built": True, "digest": "sha256:" + "2" * 64, "build_key": "k", "tag": "bk-k-cpu-light",
          "build_seconds": 12.5, "checks": [{"name": "version", "ok": True}], "error": "", "tests_tag": "",
          "tests_digest": ""}


def test_the_plan_hands_one_line_outputs_to_the_jobs(tmp_path):
    outputs = github_outputs(NightlyPlan.from_dict(PLAN))
    assert outputs["build"] == "true" and outputs["commit"] == "c" * 40
    assert json.loads(outputs["matrix"]) == PLAN["matrix"] and "\n" not in outputs["matrix"]
    out = tmp_path / "out"
    assert write_github_outputs(outputs, env={"GITHUB_OUTPUT": str(out)}) == []
    assert read_outputs(out) == outputs  # what GitHub (and the stand-in runner) read back
    assert write_github_outputs(outputs, env={}) == []  # outside GitHub: nothing written
    summary = plan_summary(NightlyPlan.from_dict(PLAN))
    assert [(v.variant, v.status, v.version) for v in summary.variants] == [
        ("cpu", "skipped", "0.1.0-nightly.20261201")]


def test_assemble_reads_the_plan_and_the_jobs_results(tmp_path):
    with pytest.raises(ConfigError, match="no plan.json"):
        read_results(tmp_path)
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    (tmp_path / "cpu-light.json").write_text(json.dumps(RESULT))
    plan, results = read_results(tmp_path)
    assert plan.to_dict() == PLAN and set(results) == {"cpu-light"}
    assert results["cpu-light"].to_dict() == RESULT and results["cpu-light"].build_seconds == 12.5
    assert [u.runner for u in plan.units] == ["ubuntu-latest"] and plan.variants[0].previous is not None
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ConfigError, match="cannot read"):
        read_results(tmp_path)
    (tmp_path / "broken.json").write_text("[1]")  # JSON, but no object: one line, not a traceback later
    with pytest.raises(ConfigError, match="broken.json: not a JSON object but list"):
        read_results(tmp_path)
    (tmp_path / "broken.json").unlink()
    os.mkfifo(tmp_path / "fifo.json")  # a downloaded artifact is read as a file, never waited on
    with pytest.raises(ConfigError, match="cannot read .*fifo.json"):
        read_results(tmp_path)


CONTEXT = {"steps": {"build": {"outputs": {"built": "true"}}, "ccache": {"outputs": {"cache-matched-key": ""}}},
           "needs": {"plan": {"outputs": {"build": "false", "matrix": '{"include": [{"id": "cpu"}]}'}}},
           "inputs": {"force": True}, "matrix": {"id": "cpu"}}


@pytest.mark.parametrize("text,status,expected", [
    ("needs.plan.outputs.build == 'true'", "success", False),
    ("always() && needs.plan.outputs.build == 'false'", "failure", True),
    ("steps.build.outputs.built == 'true'", "failure", False),  # no status function: success() && ...
    ("${{ !cancelled() && steps.build.outputs.built == 'true' }}", "failure", True),
    ("steps.build.outputs.built == 'true' && steps.ccache.outputs.cache-matched-key != ''", "success", False),
])
def test_the_stand_in_runner_reads_conditions_as_github_does(text, status, expected):
    assert condition(text, CONTEXT, status) is expected


def test_the_stand_in_runner_substitutes_expressions():
    assert substitute("${{ inputs.force && '--force' || '' }}", CONTEXT) == "--force"
    assert substitute("${{ fromJSON(needs.plan.outputs.matrix) }}", CONTEXT) == {"include": [{"id": "cpu"}]}
    assert substitute("key-${{ matrix.id }}-${{ steps.build.outputs.built }}", CONTEXT) == "key-cpu-true"
    assert substitute("${{ matrix.missing }}x", CONTEXT) == "x"


GATE_CONTEXT = {"steps": {"gate": {"outcome": "failure", "conclusion": "success", "outputs": {}}},
                "needs": {"plan": {"outputs": {"matrix": '{"include":[{"id":"cpu","variant":"cpu"}]}'}}}}


def test_the_stand_in_runner_has_contains_and_step_outcomes():
    """What the bench job's conditions use: contains() (GitHub's: case-insensitive) and steps.<id>.outcome."""
    assert condition("contains(needs.plan.outputs.matrix, '\"variant\":\"cpu\"')", GATE_CONTEXT, "success")
    assert not condition("contains(needs.plan.outputs.matrix, '\"variant\":\"cpu-light\"')", GATE_CONTEXT, "success")
    assert substitute("${{ contains(fromJSON('[\"A\", \"b\"]'), 'a') }}", GATE_CONTEXT) is True
    assert not condition("steps.gate.outcome == 'success'", GATE_CONTEXT, "success")
    assert condition("steps.gate.outcome != 'success'", GATE_CONTEXT, "success")


def test_the_summary_says_whether_a_bench_gate_runs():
    from buildkit.flows.nightly.summary import NO_GATE, Summary, VariantResult, bench_gate_line

    def night(*results: tuple[str, str]) -> Summary:
        return Summary(repository="r", url="u", branch="b", date="d", old_commit=None, new_commit="c" * 40,
                       variants=[VariantResult(v, "cpu", None, "server", VariantStatus(status))
                                 for v, status in results])

    assert bench_gate_line("none", night(("cpu", "passed"))) == NO_GATE == \
        "bench gate: none (no GPU runner configured; nightlies are not promoted automatically)"
    assert bench_gate_line("cpu", night(("cpu", "passed"))) == \
        "bench gate: cpu benched on the GPU runner (see the bench job)"
    assert bench_gate_line("cpu", night(("cpu", "skipped"), ("cpu-light", "passed"))) == \
        "bench gate: cpu was not built tonight; nothing benched or promoted"
    assert "not benched: the nightly has failed variants" in bench_gate_line("cpu", night(("cpu", "passed"),
                                                                                            ("x", "failed")))
    summary = night(("cpu", "passed"))
    summary.bench_gate = NO_GATE
    assert summary.to_dict()["bench_gate"] == NO_GATE and f"- {NO_GATE}\n" in summary.to_markdown()
    assert night().to_dict()["bench_gate"] is None


@pytest.mark.parametrize("name, document, words", [
    ("plan.json", dict(PLAN, plan_version=2), "a nightly plan of version 2; this buildkit reads version 1"),
    ("plan.json", {k: v for k, v in PLAN.items() if k != "plan_version"}, "a nightly plan of no plan_version"),
    ("cpu-light.json", dict(RESULT, result_version=0), "a job result of version 0; this buildkit reads"),
    # a job of the buildkit before the tests image (no tests_tag, tests_digest): its version says so
    ("cpu-light.json", dict(RESULT, result_version=1), "a job result of version 1; this buildkit reads version 2"),
    ("cpu-light.json", {"id": "cpu-light", "status": "passed"}, "a job result of no result_version"),
    ("plan.json", dict(PLAN, commit=None), r"plan.json.commit: expected str, got NoneType"),
    ("plan.json", dict(PLAN, matrix={"include": [{"id": "cpu-light"}]}), r"matrix.include\[0\]: the key 'unit' is"),
    ("cpu-light.json", dict(RESULT, build_seconds="12"), "cpu-light.json.build_seconds: expected float | None"),
])
def test_a_plan_or_result_of_another_version_or_form_is_one_clear_error(tmp_path, name, document, words):
    """The contract between the CI jobs is versioned and checked as it is read: a document another buildkit
    wrote, or a broken one, is a ConfigError naming the file, not a KeyError deep in assemble."""
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    (tmp_path / "cpu-light.json").write_text(json.dumps(RESULT))
    (tmp_path / name).write_text(json.dumps(document))
    with pytest.raises(ConfigError, match=words):
        read_results(tmp_path)
