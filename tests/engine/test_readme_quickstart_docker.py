"""README.md's Install and Quickstart commands, run as written, in a fresh environment.

What is fresh: a new HOME (no ~/.docker, no pip or buildkit cache), a virtual environment made by
the README's own `python3 -m venv` line (no system site packages, no PYTHONPATH, nothing of this
checkout importable), buildkit installed by the README's `pip install` lines with its dependencies
from the package index. buildkit itself comes from a git repository holding this checkout's files
(tracked and untracked-not-ignored) as one commit on its `main` branch and nothing added (no tag: the
project makes none, so a README naming one fails here as it fails for a user), served over git's
smart HTTP protocol on 127.0.0.1 (tests/githttp.py) at the placeholder's own path, OWNER/llama-buildkit.

What is substituted, and nothing else:

* the host of the repository URL placeholder (`https://github.com` of
  `https://github.com/OWNER/llama-buildkit`) by that server's `http://127.0.0.1:PORT`;
* the registry (`registry.example.com`) by a loopback registry with TLS and htpasswd
  (tests/registryserver.py), logged in to with `docker login` as the README says (with
  `--password-stdin`: there is no terminal to type into);
* the fork (`https://github.com/spiritbuun/buun-llama-cpp`, unreachable here, and a 45-minute
  compile) by the bundled example fork served by a git daemon: `buildkit init` pins that one's head;
  LLAMA_BUILDKIT_BASE_* give the test's Debian base with the PyPI-wheel CUDA provider (no image can
  be pulled here);
* `buildkit run` gets `--print` (no GPU here): the README says that shows the docker run command.

Then what the user gets is checked: the console script is the venv's, `buildkit doctor` as the
README shows it passes, the image and its labels, the pushed manifest's digest (from the registry
API, with requests) against the lock's, and the printed `docker run` command against the profile.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import requests

from cliutil import buildkit_env, write_project
from forkrepo import make_fork_repo
from gitserver import run_git
from githttp import serve_http

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
REPO_PLACEHOLDER = "https://github.com/OWNER/llama-buildkit"
REPO_HOST = "https://github.com"  # what the test substitutes: the host part only
REPO_PATH = REPO_PLACEHOLDER.removeprefix(REPO_HOST + "/")  # OWNER/llama-buildkit, served at that path
REGISTRY_PLACEHOLDER = "registry.example.com"
FORK_PLACEHOLDER = "https://github.com/spiritbuun/buun-llama-cpp"
VENV = ".venvs/buildkit"  # below HOME, as the README's venv line makes it
LOCK_KEY = "cuda13.1-sm120/server"
MEDIA_TYPES = ", ".join(["application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
                         "application/vnd.docker.distribution.manifest.v2+json",
                         "application/vnd.docker.distribution.manifest.list.v2+json"])


# --------------------------------------------------------------------------- reading the README

def section(text: str, title: str) -> str:
    """The text of the `## title...` section, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(title)}.*?$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README.md has no section '## {title}'"
    return match.group(1)


def code_blocks(text: str) -> list[list[str]]:
    """Indented (4-space) code blocks, each as its commands: `\\`-continued lines joined; in a block
    that shows a session (`$ cmd` then output), only the `$ ` lines."""
    blocks, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("    ") and line.strip():
            current.append(line[4:])
        elif current and not line.strip():
            blocks.append(current)
            current = []
        elif current:
            blocks.append(current)
            current = []
    result = []
    for block in blocks:
        if any(line.startswith("$ ") for line in block):
            block = [line[2:] for line in block if line.startswith("$ ")]
        commands, pending = [], ""
        for line in block:
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1].rstrip() + " "
                continue
            commands.append((pending + line.strip()).strip())
            pending = ""
        result.append(commands)
    return result


def readme_commands() -> dict[str, list[str]]:
    """The README's Install and Quickstart commands, by what they are for. Every code block of the
    two sections must be one of these, so a command added to the README is a command this test runs."""
    text = README.read_text()
    install = code_blocks(section(text, "Install"))
    quick = code_blocks(section(text, "Quickstart"))
    found: dict[str, list[str]] = {}
    for block in install:
        joined = "\n".join(block)
        kind = ("venv" if "python3 -m venv" in joined else "git" if 'pip install "git+' in joined
                else "wheel" if "make dist" in joined else "doctor" if joined.startswith("buildkit doctor") else None)
        assert kind and kind not in found, f"an Install block this test does not know how to run: {block}"
        found[kind] = block
    assert set(found) == {"venv", "git", "wheel", "doctor"}, found
    assert len(quick) == 1 and len(quick[0]) == 4, quick
    found["quickstart"] = quick[0]
    return found


def test_readme_commands_are_found_and_name_the_placeholders():
    """The pure part: the README's blocks parse, and name the placeholders the engine test replaces."""
    cmds = readme_commands()
    assert any(REPO_PLACEHOLDER in c for c in cmds["git"]) and any(REPO_PLACEHOLDER in c for c in cmds["wheel"])
    init, build, push, run = cmds["quickstart"]
    assert init.startswith(f"buildkit init --fork {FORK_PLACEHOLDER} --image {REGISTRY_PLACEHOLDER}/")
    assert build == "buildkit build" and push == "buildkit build --push"
    assert run.startswith("buildkit run --profile server ") and REGISTRY_PLACEHOLDER in run
    assert REGISTRY_PLACEHOLDER in cmds["doctor"][0]


# --------------------------------------------------------------------------- a fresh machine

def snapshot_repository(dest: Path) -> str:
    """A git repository holding this checkout's files as they are now, one commit on `main` (what the
    project's repository has: no tag); its commit."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    dest.mkdir(parents=True)
    for rel in filter(None, listed):
        src = ROOT / rel
        if not (src.is_file() or src.is_symlink()):
            continue  # deleted in the work tree
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel, follow_symlinks=False)
    run_git(dest, "init", "-q", "-b", "main")
    run_git(dest, "add", "-A")
    run_git(dest, "commit", "-q", "-m", "llama-buildkit snapshot for the README test")
    return run_git(dest, "rev-parse", "HEAD")


def fresh_env(home: Path) -> dict[str, str]:
    """A user's login environment on a fresh machine: a new HOME, nothing of this test run's Python."""
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DOCKER_CONFIG", "XDG_CACHE_HOME", "XDG_CONFIG_HOME",
            "PYTEST_ADDOPTS", "PIP_USER", "PIP_REQUIRE_VIRTUALENV"}
    env = {k: v for k, v in buildkit_env().items() if k not in drop and not k.startswith("PYTEST_")}
    home.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    return env


def activated(env: dict[str, str]) -> dict[str, str]:
    """env after the README's `. ~/.venvs/buildkit/bin/activate`."""
    venv = Path(env["HOME"]) / VENV
    return {**env, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}:{env['PATH']}"}


def sh(script: str, cwd: Path, env: dict[str, str], timeout: int = 1800) -> subprocess.CompletedProcess:
    """Run README lines with bash, as a user pastes them (stopping at the first failure)."""
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """This checkout as a git repository on its main branch, over smart HTTP at the placeholder's path."""
    root = tmp_path_factory.mktemp("readme-git")
    repo = root / REPO_PATH
    commit = snapshot_repository(repo)
    with serve_http(root, smart=True) as server:
        assert server.url_for(repo) == f"{server.url}/{REPO_PATH}"
        yield {"url": server.url_for(repo), "host": server.url, "commit": commit}


def install_lines(block: list[str], served: dict) -> str:
    """README lines with only the repository URL's host replaced by the loopback server's."""
    return "\n".join(c.replace(REPO_HOST + "/", served["host"] + "/") for c in block)


def assert_fresh_install(env: dict[str, str]) -> None:
    """The venv's console script runs the venv's buildkit, not this checkout's."""
    venv = Path(env["HOME"]) / VENV
    script = venv / "bin" / "buildkit"
    assert script.is_file()
    where = ok(sh("python -c 'import buildkit; print(buildkit.__file__)'", Path(env["HOME"]), activated(env)))
    assert where.stdout.strip().startswith(str(venv / "lib")), where.stdout  # installed, not a checkout's
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    import buildkit
    version = ok(sh("buildkit --version", Path(env["HOME"]), activated(env))).stdout.strip()
    assert version == f"buildkit, version {buildkit.__version__}", version


@pytest.mark.docker
def test_install_from_a_wheel_as_written(tmp_path, served, fork, debian_base_image, registry_plain):
    cmds = readme_commands()
    env = fresh_env(tmp_path / "home")
    script = "\n".join(cmds["venv"]) + "\n" + install_lines(cmds["wheel"], served)
    ok(sh(script, Path(env["HOME"]), env, timeout=900))
    assert_fresh_install(env)
    # the wheel carries the templates and the patch queue: render works from a folder that is no checkout
    project = tmp_path / "render"
    project.mkdir()
    ok(sh(f"buildkit render --arch cpu --out out --source {fork['url']} --commit {fork['commit']} "
          f"--os-image {debian_base_image}", project, activated(env), timeout=600))
    assert "FROM " in (project / "out" / "Dockerfile").read_text()

    # Issue 47: with only what the wheel's dependencies installed (no test extras: kubernetes-validate had
    # brought jsonschema in, which the SBOM's validation needs), a signed `build --push` of the example fork to
    # the loopback registry, then `verify-image` of what it pushed against its lock
    user = activated(env)
    listed = json.loads(ok(sh("python -m pip list --format json", Path(env["HOME"]), user)).stdout)
    names = {p["name"].lower() for p in listed}
    assert not names & {"pytest", "kubernetes-validate", "mypy"}, sorted(names)
    ok(sh("buildkit keys generate --out cosign.key", project, user))
    signed = write_project(tmp_path / "signed", source={"url": fork["url"], "commit": fork["commit"]},
                           image={"name": f"{registry_plain.host}/wheel/tiny", "default_variant": "cpu"},
                           build={"arch": "cpu", "jobs": 2, "progress": "plain"},
                           base={"os_image": debian_base_image}, sign={"key_file": str(project / "cosign.key")})
    try:
        pushed = json.loads(ok(sh("buildkit build --push --json", signed, user, timeout=1200)).stdout)
        # cosign's .sig and .att tags first, the sigstore bundles under the referrers tag last (distribution 2.8
        # has no referrers API)
        assert [t.rsplit(".", 1)[-1] for t in pushed["signed"][:2]] == ["sig", "att"], pushed
        assert pushed["signed"][-1].split(":")[-1] == pushed["digest"].replace(":", "-"), pushed
        checked = ok(sh(f"buildkit verify-image {registry_plain.host}/wheel/tiny:0.1.0-cpu --key "
                        f"{project / 'cosign.pub'} --lock buildkit.lock", signed, user))
        assert checked.stdout.count("ok  ") == 4, checked.stdout
    finally:
        subprocess.run(["docker", "image", "rm", f"{registry_plain.host}/wheel/tiny:0.1.0-cpu"], capture_output=True)


# --------------------------------------------------------------------------- the quickstart

def registry_get(reg, path: str, accept: str = MEDIA_TYPES) -> requests.Response:
    user, password = next(iter(reg.users.items()))
    resp = requests.get(f"{reg.url}/v2/{path}", auth=(user, password), headers={"Accept": accept},
                        verify=str(reg.ca_cert), timeout=30)
    resp.raise_for_status()
    return resp


def registry_labels(reg, repo: str, body: bytes) -> dict[str, str]:
    manifest = json.loads(body)
    if "manifests" in manifest:  # an index: the linux/amd64 image
        child = next(m for m in manifest["manifests"] if m.get("platform", {}).get("architecture") == "amd64")
        manifest = registry_get(reg, f"{repo}/manifests/{child['digest']}").json()
    config = registry_get(reg, f"{repo}/blobs/{manifest['config']['digest']}", accept="*/*").json()
    return config["config"]["Labels"]


@pytest.fixture(scope="module")
def fork(tmp_path_factory, git_daemon):
    repo = tmp_path_factory.mktemp("readme-fork") / "tiny-fork"
    _, commit = make_fork_repo(repo, ROOT / "examples" / "tiny-fork")
    return {"url": git_daemon.url_for(repo), "commit": commit}


@pytest.mark.docker
def test_install_and_quickstart_as_written(tmp_path, served, fork, registry_auth, debian_base_image):
    cmds = readme_commands()
    reg = registry_auth
    env = fresh_env(tmp_path / "home")
    home = Path(env["HOME"])

    # Install: the venv line and the git line, as written, but for the URL
    install = "\n".join(cmds["venv"]) + "\n" + install_lines(cmds["git"], served)
    ok(sh(install, home, env, timeout=900))
    assert_fresh_install(env)
    direct = json.loads(next((home / VENV / "lib").glob("python3*/site-packages/llama_buildkit-*.dist-info"))
                        .joinpath("direct_url.json").read_text())
    assert direct["url"] == served["url"] and direct["vcs_info"]["commit_id"] == served["commit"]
    assert direct["vcs_info"].get("requested_revision") == "main", direct

    # "In an empty folder" (but for the model file the last command serves)
    project = home / "buun"
    project.mkdir()
    (project / "target.gguf").write_bytes(b"GGUF")
    user = activated(env)
    user.update(LLAMA_BUILDKIT_BASE_PROVIDER="wheels", LLAMA_BUILDKIT_BASE_OS_IMAGE=debian_base_image,
                LLAMA_BUILDKIT_BASE_CUBLAS="false")
    login_user, password = next(iter(reg.users.items()))
    ok(subprocess.run(["docker", "login", reg.host, "--username", login_user, "--password-stdin"], input=password,
                      env=user, capture_output=True, text=True, timeout=60))
    assert (home / ".docker" / "config.json").is_file()  # the fresh user's own login

    made: list[str] = []
    try:
        # buildkit doctor, as the README shows it, passes with the README's checks
        doctor_cmd = cmds["doctor"][0].replace(REGISTRY_PLACEHOLDER, reg.host)
        proc = ok(sh(doctor_cmd, project, user, timeout=300))
        shown = [line.split()[:2] for line in section(README.read_text(), "Install").splitlines()
                 if re.match(r"^    (ok|warn|fail) ", line)]
        got = [line.split()[:2] for line in proc.stdout.splitlines() if line.strip()]
        assert got == [["ok", name] for _, name in shown], proc.stdout
        assert f"readable as {login_user}" in proc.stdout

        init, build, push, run = cmds["quickstart"]
        ok(sh(init.replace(FORK_PLACEHOLDER, fork["url"]).replace(REGISTRY_PLACEHOLDER, reg.host), project, user,
              timeout=120))
        written = tomllib.loads((project / "buildkit.toml").read_text())
        assert written["source"]["commit"] == fork["commit"] and (project / "patches").is_dir()
        repo = "you/buun-llama-cpp"
        local_ref = f"{reg.host}/{repo}:cuda13.1-sm120"
        proc = ok(sh(build, project, user))
        lock = json.loads((project / "buildkit.lock").read_text())["builds"][LOCK_KEY]
        made += lock["tags"]
        assert "verify cuda-archs: passed" in proc.stdout and "summary: cuda13.1-sm120 built in" in proc.stdout
        for name in ("fetch", "patch", "render", "build", "verify"):  # the stage lines the README promises
            assert re.search(rf"^buildkit: {name} done in ", proc.stderr, re.M), proc.stderr[-3000:]
        assert local_ref in lock["tags"]
        local = json.loads(ok(subprocess.run(["docker", "image", "inspect", local_ref],
                                             capture_output=True, text=True)).stdout)[0]
        labels = local["Config"]["Labels"]
        assert labels["org.opencontainers.image.revision"] == fork["commit"]
        assert labels["org.llama-buildkit.arch"] == "sm_120" and labels["org.llama-buildkit.cuda-version"] == "13.1"
        version = ok(subprocess.run(["docker", "run", "--rm", local_ref, "--version"],
                                    capture_output=True, text=True, timeout=120))
        assert fork["commit"] in version.stdout + version.stderr

        proc = ok(sh(push.replace(REGISTRY_PLACEHOLDER, reg.host), project, user))
        lock = json.loads((project / "buildkit.lock").read_text())["builds"][LOCK_KEY]
        made += [ref for ref in lock.get("pushed", []) if ref.startswith(reg.host + "/")]
        # the image `buildkit build` made already has this build key (init named it in the registry): pushed,
        # not built again
        assert f"pushed the image with this build key already in the engine, nothing built: " \
               f"{reg.host}/{repo}@{lock['image_digest']}" in proc.stdout, proc.stdout
        tags = registry_get(reg, f"{repo}/tags/list").json()["tags"]
        assert {"0.1.0-cuda13.1-sm120", "cuda13.1-sm120"} <= set(tags), tags
        for tag in ("0.1.0-cuda13.1-sm120", "cuda13.1-sm120"):
            body = registry_get(reg, f"{repo}/manifests/{tag}").content
            assert "sha256:" + hashlib.sha256(body).hexdigest() == lock["image_digest"]  # the bytes the lock names
        pushed_labels = registry_labels(reg, repo, body)
        assert pushed_labels["org.opencontainers.image.revision"] == fork["commit"]
        assert pushed_labels["org.llama-buildkit.build-key"] == lock["build_key"]
        assert pushed_labels["org.opencontainers.image.version"] == "0.1.0"

        run_cmd = run.replace(REGISTRY_PLACEHOLDER, reg.host) + " --print"
        argv = shlex.split(ok(sh(run_cmd, project, user)).stdout.strip())
        image = f"{reg.host}/{repo}:cuda13.1-sm120"
        assert argv[:2] == ["docker", "run"] and image in argv
        assert argv[argv.index("--gpus") + 1] == "all"
        profile = written["profiles"]["server"]["args"]
        server_args = argv[argv.index(image) + 1:]
        joined = "\x00".join(server_args)
        assert "\x00".join(profile) in joined, server_args  # the profile's arguments, in order
        volumes = [argv[i + 1] for i, a in enumerate(argv) if a == "--volume"]
        assert any(v.startswith(f"{project / 'target.gguf'}:") and v.endswith(":ro") for v in volumes), volumes
        assert "--model" in server_args
    finally:
        for ref in dict.fromkeys(made):
            subprocess.run(["docker", "image", "rm", ref], capture_output=True)
        subprocess.run(["docker", "logout", reg.host], env=user, capture_output=True)


def test_readme_installs_a_revision_the_repository_has():
    """Issue 41: the README installed `@v0.3.0`, a tag the project never made (`pathspec 'v0.3.0' did not
    match`). The revision the git line names is a branch or tag of this repository (here: its refs, a
    clone's remote branches too), not one a test adds."""
    line, = readme_commands()["git"]
    match = re.search(r'@([^"@\s]+)"$', line)
    assert match, line
    rev = match.group(1)
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.split()
    names = {r.removeprefix("refs/heads/").removeprefix("refs/tags/") for r in refs
             if r.startswith(("refs/heads/", "refs/tags/"))}
    names |= {r.split("/", 3)[3] for r in refs if r.startswith("refs/remotes/") and r.count("/") >= 3}
    assert rev in names, f"the README installs @{rev}, which this repository does not have ({sorted(names)[:10]})"
