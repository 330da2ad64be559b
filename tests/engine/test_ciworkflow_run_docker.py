"""The workflow `buildkit ci github` writes, run job by job on this machine as GitHub would run it.

tests/ghactions.py reads the generated YAML and runs its jobs in order (plan, one build job per
entry of the plan's matrix, assemble) with the matrix values, `needs` outputs, `env` and `if`s
wired as GitHub wires them; its `run:` steps are executed as written, its `uses:` actions are stood in
for with file copies (checkout: the project; cache and artifacts: folders; login and buildx set-up:
nothing to do here).

buildkit is installed as the workflow says (issue 47): this checkout's files as one commit, served over
git's smart HTTP on 127.0.0.1, installed by pip into a user's venv, whose own `buildkit ci github` writes
the workflow; its "Install buildkit" step (`python -m pip install "git+URL@COMMIT"`) runs in every job, into
the runner's venv (setup-python's stand-in: a venv that sees this Python's packages, so only buildkit itself
is built), and every later step runs the `buildkit` that step installed.
The registry is the loopback one, the fork the bundled example; the matrix is two cheap cpu units
(targets server and light, CPU level none) that share the compile in the engine's layer cache.
A second night with no new commit ends after the plan job.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from buildkit.oci.registry import RegistryClient
from cliutil import cli_env, write_project
from buildkit.release.signkeys import generate_keys
from test_signing_cosign import cosign
from images import remove_local_images
from registryserver import head_digest
from ghactions import NIGHTLY_CONTEXT, ArtifactStore, CacheStore, Runner, nightly_stand_ins, runner_env
from githttp import serve_http
from test_readme_quickstart_docker import snapshot_repository

pytestmark = pytest.mark.docker

REPO = "ci/tiny"
UNITS = ["cpu-none", "cpu-none-light"]  # the variants (CPU level none), each one unit of one platform
SKIPPED_STEPS = {"Free disk space": "frees GitHub's runner (sudo docker image prune would empty the shared engine)"}


def venv_python(path: Path) -> Path:
    """A venv that sees this Python's packages (buildkit's dependencies, pip): pip installs buildkit alone."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def clean_env(home: Path) -> dict[str, str]:
    """The user's environment: nothing of this checkout on the path, no buildkit setting of the tests'."""
    home.mkdir(parents=True, exist_ok=True)
    return {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")
               and not k.startswith(("LLAMA_BUILDKIT_", "PYTEST_"))}, "HOME": str(home)}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """This checkout as a git repository (one commit on main), over smart HTTP on 127.0.0.1."""
    root = tmp_path_factory.mktemp("ci-buildkit-git")
    repo = root / "acme" / "llama-buildkit"
    commit = snapshot_repository(repo)
    with serve_http(root, smart=True) as server:
        yield {"url": server.url_for(repo), "commit": commit}


@pytest.fixture(scope="module")
def workflow_run(tmp_path_factory, example_fork, registry_plain, debian_base_image, docker_engine, served):
    tmp = tmp_path_factory.mktemp("ci-run")
    project = write_project(tmp / "project",
                            source={"url": example_fork["url"], "branch": "master", "patch_dir": "patches"},
                            image={"name": f"{registry_plain.host}/{REPO}", "default_variant": "cpu"},
                            build={"jobs": 2, "cpu_level": "none", "progress": "plain"},
                            base={"provider": "wheels", "os_image": debian_base_image, "cublas": False},
                            matrix={"archs": ["cpu"], "cuda_versions": ["13.1"], "targets": ["server", "light"]})
    # the user's buildkit, installed from the served repository, writes the workflow: it pins what it runs
    user_env = clean_env(tmp / "home")
    user = venv_python(tmp / "user-venv")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(user), "install", "--quiet", "--no-deps",
                           f"git+{served['url']}@main"], env=user_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    proc = subprocess.run([str(user), "-m", "buildkit.cli", "ci", "github", "--layer-cache", "none"], cwd=project,
                          env=user_env, capture_output=True, text=True, timeout=120)  # (registry cache: a
    assert proc.returncode == 0, proc.stderr  # docker-container builder)
    assert f"the workflow installs buildkit from {served['url']}: 127.0.0.1 is this machine's loopback" in proc.stderr
    bindir = tmp / "bin"
    bindir.mkdir()
    runner_python = venv_python(tmp / "runner-venv")  # setup-python's: `python` and, once installed, `buildkit`
    (bindir / "python").symlink_to(runner_python)
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
                              if k == "LLAMA_BUILDKIT_CACHE_DIR"})
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{runner_python.parent}{os.pathsep}{env['PATH']}"
    stand_ins = nightly_stand_ins(checkout, cache, artifacts, login)
    generate_keys(tmp / "cosign.key", tmp / "cosign.pub")  # the key form of signing: the PEM as a secret
    context = {**NIGHTLY_CONTEXT, "secrets": {**NIGHTLY_CONTEXT["secrets"],
                                              "LLAMA_BUILDKIT_SIGN_KEY": (tmp / "cosign.key").read_text()}}
    runner = Runner(project / ".github" / "workflows" / "buildkit-nightly.yml", env=env, stand_ins=stand_ins,
                    skip=SKIPPED_STEPS, context=context, work_root=tmp / "runs")
    yield {"runner": runner, "cache": cache, "artifacts": artifacts, "registry": registry_plain, "tmp": tmp,
           "fork": example_fork, "served": served, "runner_python": runner_python}
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
    install = f'python -m pip install "git+{workflow_run["served"]["url"]}@{workflow_run["served"]["commit"]}"'
    assert [s["run"] for s in runner.jobs["build"]["steps"] if s.get("name", "").startswith("Install buildkit")] == [
        install]  # the commit the user's buildkit runs, from where it was installed
    for job in (plan, *builds):
        assert job.result == "success", failed(job)
        assert job.step("Install buildkit").ran and job.step("Install buildkit").outcome == "success"
    for job in builds:
        assert job.step("Restore the ccache").ran and job.step("Save the ccache").ran
        assert not job.step("Delete the ccache entry").ran  # nothing restored, nothing replaced
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
    # what ran on the runner is what the step installed: the served commit, in the runner's venv
    python = workflow_run["runner_python"]
    direct = json.loads(next((python.parent.parent / "lib").glob("python3*/site-packages/llama_buildkit-*.dist-info"))
                        .joinpath("direct_url.json").read_text())
    assert direct["vcs_info"]["commit_id"] == workflow_run["served"]["commit"]
    assert (python.parent / "buildkit").is_file()
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
    print("of which the pip install of buildkit (s): " + ", ".join(
        f"{j.name} {j.step('Install buildkit').seconds:.1f}" for j in jobs if j.step("Install buildkit").ran))
