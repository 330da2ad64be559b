"""The bench job of `buildkit ci github --gpu-check`, run by the stand-in runner (tests/ghactions.py) against the
loopback registry: gpu-check comes before the bench, and a nightly with a failing case that the release did not
have is not benched, not promoted, the job is red and the step summary names the cases (issue 37 item 5).

The images are the example fork's cpu build and its tests target (the stand-in test-backend-ops, run on the
CPU backend: [gpu_check] backend = "CPU", gpus = "none" in the project, as a GPU runner's would say CUDA0
and all). The release is the fork's commit; the nightly the same commit with a patch in the queue that
makes the stand-in's argmax write a second row past its output, as the fork's CUDA argmax does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cliutil import cli_env, run_cli, write_project
from ghactions import NIGHTLY_CONTEXT, ArtifactStore, CacheStore, JobResult, Runner, nightly_stand_ins, runner_env
from test_gpucheck_docker import stray_write_patch

pytestmark = pytest.mark.docker

REPO = "ci/gpucheck"
VARIANT = "cpu-none"  # the variant of cpu_level none: one CPU backend, the cheapest build
SKIPPED = {"Install buildkit": "the runner's pip install; `buildkit` on PATH runs this checkout"}
CHECK = "gpu-check the new nightly against the release"
BENCH = "Bench the new nightly against the release"


def docker(*args: str) -> None:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


def publish(local: str, remote: str) -> None:
    docker("tag", local, remote)
    docker("push", remote)


@pytest.fixture(scope="module")
def bench_job(tmp_path_factory, example_fork, registry_plain, debian_base_image, docker_engine):
    tmp = tmp_path_factory.mktemp("gpucheck-ci")
    repository = f"{registry_plain.host}/{REPO}"
    project = write_project(tmp / "project",
                            source={"url": example_fork["url"], "branch": "master", "commit": example_fork["commit"],
                                    "patch_dir": "patches"},
                            image={"name": repository, "default_variant": VARIANT},
                            build={"arch": "cpu", "jobs": 2, "cpu_level": "none", "progress": "plain"},
                            base={"provider": "wheels", "os_image": debian_base_image, "cublas": False},
                            matrix={"archs": ["cpu"], "cuda_versions": ["13.1"], "targets": ["server"]},
                            gpu_check={"backend": "CPU", "gpus": "none"})
    env = cli_env(tmp / "buildkit-cache")
    built = {}
    for name, patch in (("release", ""), ("broken", stray_write_patch())):
        for old in (project / "patches").glob("*.patch"):
            old.unlink()
        if patch:
            (project / "patches" / "0001-argmax-stray-write.patch").write_text(patch)
        proc = run_cli(project, "build", "--tests", "--set", f"lock.path={name}.lock", env=env, timeout=1200)
        assert proc.returncode == 0, proc.stderr[-3000:]
        tests = proc.stdout.split("tests image: ", 1)[1].split()[0]  # <the build's first tag>-tests
        docker("tag", tests.removesuffix("-tests"), f"{repository}:{name}")
        docker("tag", tests, f"{repository}:{name}-tests")
        built[name] = f"{repository}:{name}"
    for old in (project / "patches").glob("*.patch"):
        old.unlink()
    proc = run_cli(project, "ci", "github", "--buildkit-repo", "https://example.invalid/llama-buildkit",
                   "--layer-cache", "none", "--bench-runner", "gpu", "--bench-model", str(tmp / "no-model.gguf"),
                   "--gpu-check")
    assert proc.returncode == 0, proc.stderr
    bindir = tmp / "bin"
    bindir.mkdir()
    (bindir / "buildkit").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m buildkit.cli "$@"\n')
    (bindir / "buildkit").chmod(0o755)

    def checkout(inputs: dict, workspace: Path) -> dict:
        shutil.copytree(project, workspace, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.lock"))
        return {}

    runner = Runner(project / ".github" / "workflows" / "buildkit-nightly.yml",
                    env=runner_env(bindir, {k: v for k, v in env.items()
                                            if k in ("PYTHONPATH", "LLAMA_BUILDKIT_CACHE_DIR")}),
                    stand_ins=nightly_stand_ins(checkout, CacheStore(tmp / "cache"), ArtifactStore(tmp / "artifacts")),
                    skip=SKIPPED, context=NIGHTLY_CONTEXT, work_root=tmp / "runs")

    def run(nightly: str) -> JobResult:
        """The bench job after a night whose nightly of cpu is `nightly`, the release being `release`."""
        for suffix in ("", "-tests"):
            publish(f"{built['release']}{suffix}", f"{repository}:{VARIANT}{suffix}")
            publish(f"{built[nightly]}{suffix}", f"{repository}:nightly-{VARIANT}{suffix}")
        matrix = json.dumps({"include": [{"variant": VARIANT}]}, separators=(",", ":"))
        needs = {"plan": JobResult("plan", "success", {"matrix": matrix, "version": "0.1.0-nightly.20260101"}),
                 "assemble": JobResult("assemble", "success")}
        return runner.run_job("bench", needs)

    yield run
    import docker as docker_py

    client = docker_py.from_env()
    for image in client.images.list(name=repository):
        for tag in image.tags:
            if tag.startswith(repository + ":"):
                client.images.remove(tag, force=True)


def failed(job: JobResult) -> str:
    return "\n".join(f"--- {s.name} ({s.outcome})\n{s.output[-2000:]}" for s in job.steps if s.ran)


def test_a_nightly_with_a_new_failing_case_is_not_benched_nor_promoted_and_the_summary_names_it(bench_job):
    job = bench_job("broken")
    assert job.result == "failure", failed(job)
    check = job.step(CHECK)
    assert check.ran and check.outcome == "failure", failed(job)
    assert ("new failing cases (not in the release, not known): ARGMAX(type=f32,ne=[32,513,1,1]), "
            "COUNT_EQUAL(type=f32,ne=[4,500,1,1]), COUNT_EQUAL(type=f32,ne=[4,5000,1,1])") in check.output
    assert not job.step(BENCH).ran and not job.step("Promote").ran
    assert job.step("Not promoted").ran
    summary = (job.workspace.parent / "runner-temp" / "step-summary.md").read_text()
    assert "| `ARGMAX(type=f32,ne=[32,513,1,1])` | sentinel mismatch\\: sent\\_2 | no |" in summary


def test_a_nightly_that_fails_nothing_new_goes_on_to_the_bench(bench_job):
    job = bench_job("release")
    check = job.step(CHECK)
    assert check.ran and check.outcome == "success", failed(job)
    assert "gpu-check CPU: PASS 6/6 cases passed" in check.output
    assert job.step(BENCH).ran  # (no model on this runner: the bench itself fails, which is not this test's)
