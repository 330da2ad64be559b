"""The workflow `buildkit ci github` writes, run job by job on this machine as GitHub would run it.

tests/ghactions.py reads the generated YAML and runs its jobs in order (plan, one build job per
entry of the plan's matrix, assemble) with the matrix values, `needs` outputs, `env` and `if`s
wired as GitHub wires them; its `run:` steps are executed as written (with `buildkit` on PATH
standing for the runner's pip install), its `uses:` actions are stood in for with file copies
(checkout: the project; cache and artifacts: folders; login and buildx set-up: nothing to do here).
The registry is the loopback one, the fork the bundled example; the matrix is two cheap cpu units
(targets server and light, CPU level none) that share the compile in the engine's layer cache.
A second night with no new commit ends after the plan job.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from buildkit.oci.registry import RegistryClient
from cliutil import cli_env, run_cli, write_project
from buildkit.release.signkeys import generate_keys
from test_signing_cosign import cosign
from images import remove_local_images
from registryserver import head_digest
from ghactions import NIGHTLY_CONTEXT, ArtifactStore, CacheStore, Runner, nightly_stand_ins, runner_env

pytestmark = pytest.mark.docker

REPO = "ci/tiny"
UNITS = ["cpu-none", "cpu-none-light"]  # the variants (CPU level none), each one unit of one platform
SKIPPED_STEPS = {"Install buildkit": "the runner's pip install; `buildkit` on PATH runs this checkout",
                 "Free disk space": "frees GitHub's runner (sudo docker image prune would empty the shared engine)"}


@pytest.fixture(scope="module")
def workflow_run(tmp_path_factory, example_fork, registry_plain, debian_base_image, docker_engine):
    tmp = tmp_path_factory.mktemp("ci-run")
    project = write_project(tmp / "project",
                            source={"url": example_fork["url"], "branch": "master", "patch_dir": "patches"},
                            image={"name": f"{registry_plain.host}/{REPO}", "default_variant": "cpu"},
                            build={"jobs": 2, "cpu_level": "none", "progress": "plain"},
                            base={"provider": "wheels", "os_image": debian_base_image, "cublas": False},
                            matrix={"archs": ["cpu"], "cuda_versions": ["13.1"], "targets": ["server", "light"]})
    proc = run_cli(project, "ci", "github", "--buildkit-repo", "https://example.invalid/llama-buildkit",
                   "--layer-cache", "none")  # a registry layer cache needs a docker-container builder
    assert proc.returncode == 0, proc.stderr
    bindir = tmp / "bin"
    bindir.mkdir()
    (bindir / "buildkit").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m buildkit.cli "$@"\n')
    (bindir / "buildkit").chmod(0o755)
    cache, artifacts = CacheStore(tmp / "gha-cache"), ArtifactStore(tmp / "artifacts")
    cache.gh_script(bindir, tmp / "gh.log")

    def checkout(inputs: dict, workspace: Path) -> dict:
        """The repository's committed files (no lock: runners keep none)."""
        shutil.copytree(project, workspace, dirs_exist_ok=True, ignore=shutil.ignore_patterns("buildkit.lock"))
        return {}

    def login(inputs: dict, workspace: Path) -> dict:
        assert inputs["registry"] == registry_plain.host
        return {}

    env = runner_env(bindir, {k: v for k, v in cli_env(tmp / "buildkit-cache").items()
                              if k in ("PYTHONPATH", "LLAMA_BUILDKIT_CACHE_DIR")})
    stand_ins = nightly_stand_ins(checkout, cache, artifacts, login)
    generate_keys(tmp / "cosign.key", tmp / "cosign.pub")  # the key form of signing: the PEM as a secret
    context = {**NIGHTLY_CONTEXT, "secrets": {**NIGHTLY_CONTEXT["secrets"],
                                              "LLAMA_BUILDKIT_SIGN_KEY": (tmp / "cosign.key").read_text()}}
    runner = Runner(project / ".github" / "workflows" / "buildkit-nightly.yml", env=env, stand_ins=stand_ins,
                    skip=SKIPPED_STEPS, context=context, work_root=tmp / "runs")
    yield {"runner": runner, "cache": cache, "artifacts": artifacts, "registry": registry_plain, "tmp": tmp,
           "fork": example_fork}
    remove_local_images(f"{registry_plain.host}/{REPO}")


def failed(job) -> str:
    return "\n".join(f"--- {s.name} ({s.outcome})\n{s.output[-3000:]}" for s in job.steps if s.ran)


def test_the_generated_jobs_run_in_order_against_the_loopback_registry(workflow_run):
    runner, cache, artifacts = workflow_run["runner"], workflow_run["cache"], workflow_run["artifacts"]
    plan = runner.run_job("plan", {})
    assert plan.result == "success", failed(plan)
    assert plan.outputs["build"] == "true" and plan.outputs["commit"] == workflow_run["fork"]["commit"]
    assert plan.outputs["version"].startswith("0.1.0-nightly.")
    matrix = runner.matrix("build", {"plan": plan})
    assert [(m["id"], m["variant"], m["runner"]) for m in matrix] == [(u, u, "ubuntu-latest") for u in UNITS]
    assert runner.jobs["build"]["strategy"]["fail-fast"] is False

    builds = [runner.run_job("build", {"plan": plan}, matrix=m) for m in matrix]
    for job in builds:
        assert job.result == "success", failed(job)
        assert job.step("Restore the ccache").ran and job.step("Save the ccache").ran
        assert not job.step("Delete the ccache entry").ran  # nothing restored, nothing replaced
        assert job.step("Install buildkit").output.startswith("not run here")
    commit = plan.outputs["commit"]
    assert cache.keys() == [f"buildkit-ccache-{u}-{commit}" for u in UNITS]
    assert artifacts.names() == [f"buildkit-job-{u}" for u in UNITS] + ["buildkit-plan"]

    with RegistryClient(workflow_run["registry"].host) as client:
        results = {}
        for m in matrix:
            result = json.loads((artifacts.root / f"buildkit-job-{m['id']}" / f"{m['id']}.json").read_text())
            assert result["status"] == "passed" and result["built"], result
            assert result["tag"].startswith("bk-") and result["tag"].endswith(m["variant"])
            assert head_digest(client, REPO, result["tag"]) == result["digest"]  # pushed by digest
            assert client.head_manifest(REPO, f"nightly-{m['variant']}") is None  # not tagged by the jobs
            results[m["variant"]] = result

        assemble = runner.run_job("assemble", {"plan": plan, "build": builds[0]})
        assert assemble.result == "success", failed(assemble)
        version = plan.outputs["version"]
        for variant, result in results.items():
            for tag in (f"nightly-{variant}", f"{version}-{variant}"):
                assert head_digest(client, REPO, tag) == result["digest"], tag
            # each job signed what it pushed, with the secret's key: cosign verifies it under the nightly tag
            done = cosign(workflow_run["tmp"], "verify", "--key", str(workflow_run["tmp"] / "cosign.pub"),
                          f"{workflow_run['registry'].host}/{REPO}:nightly-{variant}")
            assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((assemble.workspace / "buildkit-nightly.json").read_text())
    assert summary["ok"] and summary["new_commit"] == commit and summary["version"] == version
    assert [(v["variant"], v["status"], v["digest"]) for v in summary["variants"]] == [
        (k, "passed", r["digest"]) for k, r in results.items()]
    markdown = (assemble.workspace.parent / "runner-temp" / "step-summary.md").read_text()
    assert all(f"| `{u}` | passed" in markdown for u in UNITS)
    # no --bench-runner: the summary says there is no gate, and nothing is promoted
    no_gate = "bench gate: none (no GPU runner configured; nightlies are not promoted automatically)"
    assert summary["bench_gate"] == no_gate and no_gate in markdown and "bench" not in runner.jobs

    # the next night, nothing moved: the plan says so and the other jobs do not run
    again = runner.run_job("plan", {})
    assert again.result == "success", failed(again)
    assert again.outputs["build"] == "false" and json.loads(again.outputs["matrix"]) == {"include": []}
    assert runner.run_job("build", {"plan": again}).result == "skipped"
    assert runner.run_job("assemble", {"plan": again, "build": again}).result == "skipped"
    markdown = (again.workspace.parent / "runner-temp" / "step-summary.md").read_text()
    assert "up to date" in markdown and f"| `{UNITS[1]}` | skipped" in markdown
    jobs = (plan, *builds, assemble, again)
    print("job wall times here (s): " + ", ".join(f"{j.name} {j.seconds:.1f}" for j in jobs))
