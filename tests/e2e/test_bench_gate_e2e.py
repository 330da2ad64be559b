"""The bench gate of the generated nightly workflow, run as GitHub runs it (marker e2e; issue 21 items 4, 6).

`buildkit ci github --bench-runner ...` writes the workflow; its `bench` job is run by the stand-in
runner (tests/ghactions.py) with `env` and the `needs` outputs the plan and assemble jobs would give
it (the plan's matrix holds the variant, the nightly version), its `run:` steps as written (`docker
pull`, `buildkit bench --image NEW --compare-image OLD --max-slowdown 5 --step-summary ...`, `buildkit
promote`), against images pushed to the loopback registry.

The images are the real llama.cpp tree's server (tests/realserver.py), the session's project built
with `--cpu-level x86-64-v3` (the `single_level_build`: AVX2) and again with `--cpu-level none` (one
backend with no SIMD at all), serving a generated ~28M-parameter Q8_0 model (tests/tinymodel.py), on
which `none` is several times slower than AVX2 on an x86 machine.

Not the default `all` image: on a CPU with AMX (Sapphire Rapids and later, which CI machines now are)
its sapphirerapids backend dies on this model's first Q8_0 product with an invalid opcode (exit 132):
ggml's AMX kernel loads a tile configuration from the stack whose row and column stores GCC 12 at -O3
dropped, so `tilezero` finds no configured tile (llama.cpp pull request 26954, open; the llama.cpp of
llama-cpp-python 0.3.36 has the bug). docs/reference/build.md tells users.
Both directions, one bench job run each (2 runs of few tokens per image):

* new = none, release = all: the gate refuses; the job ends red, the promotion does not run, the step
  summary says how much slower, and the release tag in the registry still points at the release;
* new = all, release = none: promoted; the release tags in the registry now point at the new digest.

The tier compiles for arm64 and under QEMU on its other worker: each bench job runs under
`quiet.measuring`, and last in the tier (marker `measures`), so no compile of another test process
shares the cores with the runs it compares (a release measured beside one would now promote nothing:
"the release's runs were not steady").
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from buildkit.oci.registry import RegistryClient
from cliutil import cli_env, run_cli, write_project
from ghactions import ArtifactStore, JobResult, Runner, no_op, runner_env
from quiet import measuring
from realserver import SingleLevelBuild, build_single_level
from registryserver import head_digest
from tinymodel import Shape, model_size, write_llama_model

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

VARIANT = "cpu"
VERSION = "0.2.0-nightly.20261203"  # the plan's nightly version; the gate promotes it to 0.2.0
MAX_SLOWDOWN = 5
# 8 layers of n_embd 512 and n_ff 1536: about 28M parameters, 29 MB in Q8_0; big enough that the
# matrix products dominate (where SIMD counts), small enough for 2 runs in seconds on 2 cores
GATE_SHAPE = Shape(n_layer=8, n_embd=512, n_head=8, n_ff=1536, n_ctx=2048)
SKIPPED_STEPS = {"Install buildkit": "the runner's pip install; `buildkit` on PATH runs this checkout"}


@pytest.fixture(scope="module")
def gate_model(tmp_path_factory) -> Path:
    params, _ = model_size(GATE_SHAPE, "q8_0")
    assert 25e6 < params < 32e6, params
    return write_llama_model(tmp_path_factory.mktemp("gate-model") / "gate-28m-q8_0.gguf", GATE_SHAPE,
                             file_type="q8_0")


@pytest.fixture(scope="module")
def none_image(real_server_image) -> str:
    """The real tree built again with --cpu-level none (only ggml-cpu compiles again)."""
    try:
        return build_single_level(real_server_image, "none").ref
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)


def docker(*args: str) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"docker {' '.join(args)}: {proc.stderr[-2000:]}"
    return proc.stdout


def push(local: str, ref: str) -> None:
    docker("tag", local, ref)
    docker("push", "--quiet", ref)


def remove_local(repository: str) -> None:
    for line in docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", repository).split():
        subprocess.run(["docker", "image", "rm", line], capture_output=True, timeout=120)


def plan_outputs(commit: str) -> dict[str, str]:
    """What the plan job hands on when the variant was built tonight (nightlyjobs.github_outputs)."""
    matrix = {"include": [{"id": VARIANT, "unit": VARIANT, "variant": VARIANT, "platform": "linux/amd64",
                           "split": False, "runner": "ubuntu-latest", "reason": "new commit"}]}
    return {"build": "true", "commit": commit, "version": VERSION,
            "matrix": json.dumps(matrix, separators=(",", ":"))}


# the bench profile the gate runs (a dotted table name: write_project's keyword cannot spell it)
GATE_PROFILE: dict[str, Any] = {"profiles.gate": {"description": "the gate's CPU bench", "gpus": "none",
                                                  "args": ["--ctx-size", "2048", "--threads", "2"]}}


def run_bench_job(tmp: Path, registry, repo: str, *, new: str, old: str, model: Path, commit: str, source_url: str):
    """Push old as REPO:VARIANT (the release) and new as REPO:nightly-VARIANT, generate the workflow with the
    gate, and run its bench job. Returns (job, artifacts, {tag: digest} before)."""
    image = f"{registry.host}/{repo}"
    project = write_project(tmp / "project", source={"url": source_url, "commit": commit},
                            image={"name": image, "default_variant": VARIANT},
                            build={"arch": "cpu", "jobs": 2}, matrix={"archs": ["cpu"]}, **GATE_PROFILE)
    proc = run_cli(project, "ci", "github", "--buildkit-repo", "https://example.invalid/llama-buildkit",
                   "--layer-cache", "none", "--bench-runner", "self-hosted,linux,x64", "--bench-model", str(model),
                   "--bench-profile", "gate", "--bench-runs", "2", "--bench-max-tokens", "96",
                   "--max-slowdown", str(MAX_SLOWDOWN))
    assert proc.returncode == 0, proc.stderr
    push(old, f"{image}:{VARIANT}")
    push(new, f"{image}:nightly-{VARIANT}")
    bindir = tmp / "bin"
    bindir.mkdir()
    (bindir / "buildkit").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m buildkit.cli "$@"\n')
    (bindir / "buildkit").chmod(0o755)
    artifacts = ArtifactStore(tmp / "artifacts")

    def checkout(inputs: dict, workspace: Path) -> dict:
        shutil.copytree(project, workspace, dirs_exist_ok=True, ignore=shutil.ignore_patterns("buildkit.lock"))
        return {}

    def login(inputs: dict, workspace: Path) -> dict:
        assert inputs["registry"] == registry.host
        return {}

    env = runner_env(bindir, {k: v for k, v in cli_env(tmp / "buildkit-cache").items()
                              if k in ("PYTHONPATH", "LLAMA_BUILDKIT_CACHE_DIR")})
    runner = Runner(project / ".github" / "workflows" / "buildkit-nightly.yml", env=env,
                    stand_ins={"actions/checkout": checkout, "actions/setup-python": no_op,
                               "docker/login-action": login, "actions/upload-artifact": artifacts.upload},
                    skip=SKIPPED_STEPS, context={"github": {"token": "not-a-token", "run_id": "4242"},
                                                 "inputs": {"force": False},
                                                 "secrets": {"REGISTRY_USERNAME": "u", "REGISTRY_PASSWORD": "p"}},
                    work_root=tmp / "runs")
    assert runner.jobs["bench"]["runs-on"] == ["self-hosted", "linux", "x64"]
    with RegistryClient(registry.host) as client:
        before = {t: head_digest(client, repo, t) for t in (VARIANT, f"nightly-{VARIANT}")}
    needs = {"plan": JobResult("plan", "success", plan_outputs(commit)), "assemble": JobResult("assemble", "success")}
    job = runner.run_job("bench", needs, timeout=1200)
    return job, artifacts, before


def steps_text(job) -> str:
    return "\n".join(f"--- {s.name} ({s.outcome})\n{s.output[-3000:]}" for s in job.steps if s.ran)


def gate_of(artifacts: ArtifactStore) -> dict:
    report = json.loads((artifacts.root / "buildkit-bench-report" / "buildkit-bench.json").read_text())
    return report["gate"]


@pytest.mark.measures
@pytest.mark.parametrize("direction", ["slower", "faster"])
def test_the_bench_gate_promotes_only_a_nightly_that_is_not_slower(direction, tmp_path, real_server_image,
                                                                   single_level_build: SingleLevelBuild,
                                                                   none_image, gate_model, registry_plain):
    repo = f"gate/{direction}"
    avx2 = single_level_build.ref
    new, old = (none_image, avx2) if direction == "slower" else (avx2, none_image)
    try:
        with measuring("the bench gate"):  # no compile of another test process beside the runs
            job, artifacts, before = run_bench_job(tmp_path, registry_plain, repo, new=new, old=old,
                                                   model=gate_model, commit=real_server_image.fork_commit,
                                                   source_url="https://example.invalid/llama.cpp")
    finally:
        remove_local(f"{registry_plain.host}/{repo}")
    report = artifacts.root / "buildkit-bench-report" / "buildkit-bench.json"
    assert report.is_file(), f"the bench job wrote no report ({job.result}):\n{steps_text(job)}"
    summary = (job.workspace.parent / "runner-temp" / "step-summary.md").read_text()
    gate = gate_of(artifacts)
    print(f"{direction}: new/release {gate['ratio']:.3f} ({gate['new']:.1f} / {gate['old']:.1f} tok/s)")
    assert gate["max_slowdown"] == MAX_SLOWDOWN and gate["new"] > 0 and gate["old"] > 0
    assert gate["ratio"] == pytest.approx(gate["new"] / gate["old"])
    with RegistryClient(registry_plain.host) as client:
        release = head_digest(client, repo, VARIANT)
        versioned = client.head_manifest(repo, f"0.2.0-{VARIANT}")
    nightly = before[f"nightly-{VARIANT}"]
    if direction == "slower":
        assert job.step("Bench the new nightly").outcome == "failure", steps_text(job)
        assert not job.step("Promote the nightly").ran  # a slower nightly stays a nightly
        assert job.step("Upload the bench report").ran
        assert job.step("Not promoted").ran and job.result == "failure"  # and the run says so: red
        slower = (1 - gate["ratio"]) * 100
        verdict = f"stays a nightly: {slower:.1f}% slower than the release (threshold {MAX_SLOWDOWN}%)"
        assert gate["verdict"] == verdict and not gate["passed"]
        assert f"bench gate: {verdict}" in summary and "| ratio new/release |" in summary
        assert "promoted `" not in summary
        assert release == before[VARIANT] != nightly and versioned is None  # the registry: nothing moved
    else:
        assert job.result == "success", steps_text(job)
        assert job.step("Promote the nightly").ran and not job.step("Not promoted").ran
        assert gate["verdict"] == "promoted" and gate["passed"]
        assert "bench gate: promoted" in summary
        assert f"## ✅ promoted `{registry_plain.host}/{repo}:nightly-{VARIANT}` to 0.2.0" in summary
        assert release == nightly != before[VARIANT]  # the release tag now points at the new digest
        assert versioned is not None and versioned.digest == nightly
