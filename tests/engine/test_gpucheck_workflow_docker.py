"""The whole nightly of `buildkit ci github --gpu-check`, run by the stand-in runner (tests/ghactions.py) against
the loopback registry, as generated (issue 46 item 1): the plan job, the unit's build job (its image and its
tests image, both pushed by digest), assemble (the nightly tags, and the tests images the gate pulls by digest),
then the bench job, whose gpu-check step runs before the bench. A nightly with a failing case that the release
did not have is not benched, not promoted, the job is red and the step summary names the cases (issue 37 item 5).

The fork is the example's, its test-backend-ops the stand-in's (examples/tiny-fork/tests), run on the CPU
backend ([gpu_check] backend = "CPU", gpus = "none", as a GPU runner's would say CUDA0 and all); with the CPU
backend a cpu variant's job builds its tests image, as every CUDA variant's does. The first night builds the
fork's commit; there is no release yet, so its bench job stops at pulling one, and the maintainer promotes the
nightly by hand (the first release) and runs the failed job again: gpu-check judges the nightly alone (assemble
found no release) and passes, and the bench runs (no model on this runner: the bench itself fails, which is
not this test's). The second night has a patch in the queue that makes the stand-in's argmax write a second
row past its output, as the fork's CUDA argmax does: its gpu-check, against the release's tests image (found
through the release's build key), is red.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from buildkit.oci.registry import RegistryClient
from buildkit.release.signkeys import generate_keys
from cliutil import cli_env, run_cli, write_project
from ghactions import NIGHTLY_CONTEXT, ArtifactStore, CacheStore, JobResult, Runner, nightly_stand_ins, runner_env
from images import remove_local_images
from registryserver import head_digest, tag_digests
from test_gpucheck_docker import stray_write_patch

pytestmark = pytest.mark.docker

REPO = "ci/gpucheck"
VARIANT = "cpu-none"  # the variant of cpu_level none: one CPU backend, the cheapest build
SKIPPED = {"Install buildkit": "the runner's pip install; `buildkit` on PATH runs this checkout",
           "Free disk space": "frees GitHub's runner (sudo docker image prune would empty the shared engine)"}
CHECK = "gpu-check the new nightly against the release"
BENCH = "Bench the new nightly against the release"
NEW_FAILURES = ("new failing cases (not in the release, not known): ARGMAX(type=f32,ne=[32,513,1,1]), "
                "COUNT_EQUAL(type=f32,ne=[4,500,1,1]), COUNT_EQUAL(type=f32,ne=[4,5000,1,1])")


@pytest.fixture(scope="module")
def nightly(tmp_path_factory, example_fork, registry_plain, debian_base_image, docker_engine):
    tmp = tmp_path_factory.mktemp("gpucheck-ci")
    repository = f"{registry_plain.host}/{REPO}"
    project = write_project(tmp / "project",
                            source={"url": example_fork["url"], "branch": "master", "patch_dir": "patches"},
                            image={"name": repository, "default_variant": VARIANT},
                            build={"arch": "cpu", "jobs": 2, "cpu_level": "none", "progress": "plain"},
                            base={"provider": "wheels", "os_image": debian_base_image, "cublas": False},
                            matrix={"archs": ["cpu"], "cuda_versions": ["13.1"], "targets": ["server"]},
                            gpu_check={"backend": "CPU", "gpus": "none"})
    proc = run_cli(project, "ci", "github", "--buildkit-repo", "https://example.invalid/llama-buildkit",
                   "--layer-cache", "none", "--no-ccache", "--bench-runner", "gpu", "--bench-model",
                   str(tmp / "no-model.gguf"), "--gpu-check")
    assert proc.returncode == 0, proc.stderr
    bindir = tmp / "bin"
    bindir.mkdir()
    (bindir / "buildkit").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m buildkit.cli "$@"\n')
    (bindir / "buildkit").chmod(0o755)

    def checkout(inputs: dict, workspace: Path) -> dict:
        shutil.copytree(project, workspace, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.lock"))
        return {}

    env = cli_env(tmp / "buildkit-cache")
    generate_keys(tmp / "cosign.key", tmp / "cosign.pub")  # the key form of signing: the PEM as a secret
    context = {**NIGHTLY_CONTEXT, "secrets": {**NIGHTLY_CONTEXT["secrets"],
                                              "LLAMA_BUILDKIT_SIGN_KEY": (tmp / "cosign.key").read_text()}}
    nights: list[Runner] = []

    def night() -> dict[str, JobResult]:
        """One night, job by job: plan, the build job of each unit, assemble (the bench job: bench(night)). Each
        night is a run of its own, with its own artifacts."""
        runner = Runner(project / ".github" / "workflows" / "buildkit-nightly.yml",
                        env=runner_env(bindir, {k: v for k, v in env.items()
                                                if k in ("PYTHONPATH", "LLAMA_BUILDKIT_CACHE_DIR")}),
                        stand_ins=nightly_stand_ins(checkout, CacheStore(tmp / "cache"),
                                                    ArtifactStore(tmp / f"artifacts-{len(nights)}")),
                        skip=SKIPPED, context=context, work_root=tmp / f"run-{len(nights)}")
        nights.append(runner)
        plan = runner.run_job("plan", {})
        assert plan.result == "success" and plan.outputs["build"] == "true", failed(plan)
        builds = [runner.run_job("build", {"plan": plan}, matrix=m) for m in runner.matrix("build", {"plan": plan})]
        assert [b.result for b in builds] == ["success"], "\n".join(map(failed, builds))
        assemble = runner.run_job("assemble", {"plan": plan, "build": builds[0]})
        assert assemble.result == "success", failed(assemble)
        print("job wall times here (s): " + ", ".join(f"{j.name} {j.seconds:.1f}" for j in (plan, *builds, assemble)))
        return {"plan": plan, "build": builds[0], "assemble": assemble}

    def bench(jobs: dict[str, JobResult]) -> JobResult:
        """The last night's bench job (GitHub's "re-run failed jobs" runs it again with the same needs)."""
        job = nights[-1].run_job("bench", {"plan": jobs["plan"], "assemble": jobs["assemble"]})
        print(f"bench job wall time here (s): {job.seconds:.1f}")
        return job

    yield {"night": night, "bench": bench, "project": project, "env": env, "repository": repository,
           "registry": registry_plain}
    remove_local_images(repository)


def failed(job: JobResult) -> str:
    return "\n".join(f"--- {s.name} ({s.outcome})\n{s.output[-2000:]}" for s in job.steps if s.ran)


def workspace(job: JobResult) -> Path:
    assert job.workspace is not None, f"{job.name} did not run"
    return job.workspace


def job_result(job: JobResult) -> dict:
    """The build job's result (its artifact, .buildkit-nightly/<unit>.json)."""
    return json.loads(next((workspace(job) / ".buildkit-nightly").glob("*.json")).read_text())


def step_outputs(job: JobResult) -> dict[str, str]:
    """Every NAME=VALUE the job's steps wrote to $GITHUB_OUTPUT."""
    lines = [ln for f in sorted((workspace(job).parent / "runner-temp").glob("output-*")) for ln in
             f.read_text().splitlines()]
    return dict(ln.split("=", 1) for ln in lines if "=" in ln)


def step_summary(job: JobResult) -> str:
    return (workspace(job).parent / "runner-temp" / "step-summary.md").read_text()


def test_the_nightly_builds_its_tests_image_and_its_gate_runs_as_generated(nightly):
    repository, repo = nightly["repository"], REPO
    first = nightly["night"]()
    # no release yet: the bench job stops at pulling it; the maintainer promotes the first nightly by hand and
    # runs the failed job again
    bench = nightly["bench"](first)
    assert bench.result == "failure" and bench.step("Pull the new nightly").outcome == "failure", failed(bench)
    done = run_cli(nightly["project"], "promote", f"nightly-{VARIANT}", "--release", "0.1.0", env=nightly["env"])
    assert done.returncode == 0, done.stderr

    # the gate as generated: gpu-check of the nightly (assemble found no release, so alone) passes, and the
    # bench runs (and fails: no model on this runner)
    bench = nightly["bench"](first)
    check = bench.step(CHECK)
    assert check.ran and check.outcome == "success", failed(bench)
    assert "gpu-check CPU: PASS 6/6 cases passed" in check.output
    assert "the release has no tests image" in check.output
    assert bench.step(BENCH).ran and bench.result == "failure"
    assert "- gpu-check (the fork's test-backend-ops against the release's): success" in step_summary(bench)

    # the build job pushed the image and its tests image, each by digest; the tests image under the build-key
    # tag with -tests only, not signed (the image is: the job had the key)
    result = job_result(first["build"])
    assert result["status"] == "passed", result
    assert result["tests_tag"] == result["tag"] + "-tests" and result["tag"].startswith("bk-")
    assert step_outputs(first["build"])["tests_reference"] == f"{repository}@{result['tests_digest']}"
    with RegistryClient(nightly["registry"].host) as client:
        tags = tag_digests(client, repo)
    assert [t for t, d in tags.items() if d == result["tests_digest"]] == [result["tests_tag"]]
    assert f"sha256-{result['digest'].split(':')[1]}.sig" in tags
    assert f"sha256-{result['tests_digest'].split(':')[1]}.sig" not in tags
    # ... and the image is the one a job that builds no tests image pushes: same digest, same build key (the
    # same bake, from the layer cache; not verified again)
    start = time.monotonic()
    alone = run_cli(nightly["project"], "nightly", "--job", VARIANT, "--commit", result["commit"], "--release",
                    result["version"], "--json", "--no-verify",
                    env={**nightly["env"], "LLAMA_BUILDKIT_GPU_CHECK_BACKEND": "CUDA0"}, timeout=1200)
    print(f"the job without its tests image (s): {time.monotonic() - start:.1f}")
    assert alone.returncode == 0, alone.stderr[-3000:]
    without = json.loads(alone.stdout)
    assert (without["digest"], without["build_key"]) == (result["digest"], result["build_key"])
    assert without["tests_tag"] == without["tests_digest"] == ""

    # assemble hands the gate tonight's tests image by digest; there is no release yet
    assert first["assemble"].outputs == {"tests": f"{repository}@{result['tests_digest']}", "release_tests": ""}
    summary = json.loads((workspace(first["assemble"]) / "buildkit-nightly.json").read_text())
    assert summary["variants"][0]["tests"] == first["assemble"].outputs["tests"]

    # the release is that nightly; its tests image has no tag of the release's
    released = result["tests_digest"]
    with RegistryClient(nightly["registry"].host) as client:
        assert head_digest(client, repo, VARIANT) == result["digest"]
        assert [t for t, d in tag_digests(client, repo).items() if d == released] == [result["tests_tag"]]

    # the second night: the stray write in the patch queue
    (nightly["project"] / "patches" / "0001-argmax-stray-write.patch").write_text(stray_write_patch())
    second = nightly["night"]()
    bench = nightly["bench"](second)
    result = job_result(second["build"])
    # the gate gets tonight's tests image and the release's: the first night's, found through its build key
    assert second["assemble"].outputs == {"tests": f"{repository}@{result['tests_digest']}",
                                          "release_tests": f"{repository}@{released}"}
    assert bench.result == "failure", failed(bench)
    check = bench.step(CHECK)
    assert check.ran and check.outcome == "failure", failed(bench)
    assert NEW_FAILURES in check.output
    assert not bench.step(BENCH).ran and not bench.step("Promote").ran
    assert bench.step("Not promoted").ran
    text = step_summary(bench)
    assert "| `ARGMAX(type=f32,ne=[32,513,1,1])` | sentinel mismatch\\: sent\\_2 | no |" in text
    assert "- gpu-check (the fork's test-backend-ops against the release's): failure" in text
    assert "- bench (at most 5% slower than the release): skipped" in text
