"""`buildkit ci github` pins the buildkit that runs, wherever it was installed from (issue 47, item 3).

This checkout's files as one commit in a git repository on disk (tests/engine/test_readme_quickstart_docker.py's
snapshot), with a remote `origin` at a network URL whose remote-tracking branch holds the commit, then installed
by pip into virtual environments the way users install it: `pip install "git+file:///...@main"` (pip's record,
PEP 610, names a folder), and a wheel built from the repository (pip's record names the wheel file; the wheel
recorded its origin, scripts/hatch_origin.py). Each venv's own `buildkit ci github` is run with nothing of this
checkout on its path. Before, both were refused ("not installed from a git URL"), and --buildkit-repo alone
pinned @v<version>, a tag that does not exist.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from cliutil import run_cli, write_project
from gitserver import run_git
from test_readme_quickstart_docker import snapshot_repository

REMOTE = "https://example.invalid/acme/llama-buildkit.git"


def clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")
           and not k.startswith(("LLAMA_BUILDKIT_", "PYTEST_"))}
    home.mkdir(parents=True, exist_ok=True)
    return {**env, "HOME": str(home)}


def venv(path: Path) -> Path:
    """A venv that sees this Python's packages (buildkit's dependencies: nothing to download but the build
    backend), without a pip of its own: this Python's pip installs into it (--python), ensurepip takes a minute
    on a busy machine."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def pip_install(python: Path, env: dict[str, str], *install: str) -> None:
    """buildkit installed into python's venv as pip installs it, without its dependencies (there already)."""
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                           "--force-reinstall", *install], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def ci_github(python: Path, project: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "buildkit.cli", "ci", "github", "--stdout"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)


def install_line(workflow: str) -> str:
    build = yaml.safe_load(workflow)["jobs"]["build"]["steps"]
    return next(s["run"] for s in build if s["name"].startswith("Install buildkit"))


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    root = tmp_path_factory.mktemp("install-origin")
    repo = root / "llama-buildkit"
    commit = snapshot_repository(repo)
    run_git(repo, "remote", "add", "origin", REMOTE)
    run_git(repo, "update-ref", "refs/remotes/origin/main", commit)  # as a fetch of origin leaves it
    env = clean_env(root / "home")
    project = write_project(root / "project", image={"name": "registry.example.com/team/llama"})
    return {"root": root, "repo": repo, "commit": commit, "env": env, "project": project,
            "python": venv(root / "venv")}


def test_a_git_file_install_pins_its_commit_from_the_remote_that_holds_it(snapshot):
    repo, commit, env = snapshot["repo"], snapshot["commit"], snapshot["env"]
    python = snapshot["python"]
    pip_install(python, env, f"git+file://{repo}@main")
    direct = json.loads(next((python.parent.parent / "lib").glob("python3*/site-packages/llama_buildkit-*.dist-info"))
                        .joinpath("direct_url.json").read_text())
    assert direct["url"] == f"file://{repo}" and direct["vcs_info"]["commit_id"] == commit
    done = ci_github(python, snapshot["project"], env)
    assert done.returncode == 0, done.stderr
    assert install_line(done.stdout) == f'python -m pip install "git+{REMOTE}@{commit}"'
    # the commit on no branch of the remote: a runner could not install it, and it is said in one line
    run_git(repo, "update-ref", "-d", "refs/remotes/origin/main")
    try:
        refused = ci_github(python, snapshot["project"], env)
    finally:
        run_git(repo, "update-ref", "refs/remotes/origin/main", commit)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert (f"commit {commit[:12]} of git+file://{repo}, a folder on this machine it was installed from, which is on "
            f"no remote a runner can reach (origin {REMOTE}: no branch holds it)") in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr


def test_a_wheel_pins_the_origin_it_recorded_when_it_was_built(snapshot):
    repo, commit, env = snapshot["repo"], snapshot["commit"], snapshot["env"]
    dist = snapshot["root"] / "dist"
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(repo)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    wheel, = dist.glob("llama_buildkit-*.whl")
    recorded = json.loads(zipfile.ZipFile(wheel).read("buildkit/_origin.json"))
    assert recorded["commit"] == commit and recorded["remotes"] == [
        {"name": "origin", "url": REMOTE, "has_commit": True}] and recorded["dirty"] is False
    python = snapshot["python"]
    pip_install(python, env, str(wheel))
    direct = json.loads(next((python.parent.parent / "lib").glob("python3*/site-packages/llama_buildkit-*.dist-info"))
                        .joinpath("direct_url.json").read_text())
    assert "archive_info" in direct and "vcs_info" not in direct  # pip's record names the file only
    done = ci_github(python, snapshot["project"], env)
    assert done.returncode == 0, done.stderr
    assert install_line(done.stdout) == f'python -m pip install "git+{REMOTE}@{commit}"'


def test_a_fork_on_this_machine_is_refused_saying_so(tmp_path):
    project = write_project(tmp_path / "p", source={"url": str(tmp_path / "fork")},
                            image={"name": "registry.example.com/team/llama"})
    done = run_cli(project, "ci", "github", "--buildkit-repo", REMOTE, "--stdout")
    assert done.returncode == 1
    assert done.stderr.strip() == (f"error: source.url {tmp_path / 'fork'} is a folder on this machine: the workflow's "
                                   "runners fetch the fork, and cannot reach it; push the fork and set source.url "
                                   "to its URL")
