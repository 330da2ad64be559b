"""Credentials in a source URL never leave the credential path: not in labels, the lock, the image,
messages, the cache, git's config, or any process's argv; and the mirror stays the same when the
token rotates. Served by real git (git http-backend) behind Basic authentication on 127.0.0.1."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from buildkit.core.errors import SourceError
from buildkit.flows.nightly.run import ls_remote_head
from buildkit.source.fetch import export_tree, fetch_source, mirror_dir
from buildkit.core.urlcreds import clean_url, redact_text, redact_url, split_credentials
from cliutil import buildkit_env, write_project
from githttp import serve_http
from gitserver import commit_all, run_git

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("url, clean, user, secret", [
    ("https://u:t0k@example.com/a/b.git", "https://example.com/a/b.git", "u", "t0k"),
    ("https://t0k@example.com:8443/b", "https://example.com:8443/b", "t0k", ""),
    ("http://u%40x:p%2Fq@127.0.0.1:9/r", "http://127.0.0.1:9/r", "u@x", "p/q"),
    ("https://example.com/b.git", "https://example.com/b.git", None, None),
    ("ssh://git@example.com/b.git", "ssh://git@example.com/b.git", None, None),
    ("git://x@example.com/b.git", "git://example.com/b.git", None, None),
    ("git@example.com:b.git", "git@example.com:b.git", None, None),
    ("/srv/b.git", "/srv/b.git", None, None),
])
def test_split_credentials(url, clean, user, secret) -> None:
    got, auth = split_credentials(url)
    assert got == clean and clean_url(url) == clean
    assert (auth.username, auth.secret) == (user, secret) if auth else user is None
    if auth:
        assert secret not in repr(auth) or not secret and "hidden" in repr(auth)


def test_ssh_password_is_refused_without_showing_it() -> None:
    with pytest.raises(SourceError) as caught:
        split_credentials("ssh://git:hunter2@example.com/b.git")
    assert "hunter2" not in str(caught.value) and "ssh key" in str(caught.value)


def test_redaction_of_text() -> None:
    assert redact_url("https://u:tok@h/x") == "https://***@h/x"
    assert redact_text("cannot fetch from https://u:tok@h/x (403) or http://tok@h2") == \
        "cannot fetch from https://***@h/x (403) or http://***@h2"
    assert redact_text("ssh://git@h/x") == "ssh://git@h/x"


@pytest.fixture(scope="module")
def private_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    work = tmp_path_factory.mktemp("private") / "work"
    run_git(work.parent, "init", "-q", "-b", "main", work.name)
    for i in range(3):
        (work / "f.txt").write_text(f"{i}\n")
        head = commit_all(work, f"c{i}", 1_700_000_000 + i)
    bare = work.parent / "private.git"
    run_git(work.parent, "clone", "-q", "--bare", str(work), str(bare))
    run_git(bare, "config", "uploadpack.allowFilter", "true")
    return bare, head


class ArgvSampler(threading.Thread):
    """Reads every process's command line, over and over, while a run lasts; keeps those with needle."""

    def __init__(self, needle: str) -> None:
        super().__init__(daemon=True)
        self.needle, self.samples = needle.encode(), 0
        self.hits: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                    except OSError:
                        continue
                    if self.needle in cmdline:
                        self.hits.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
            self.samples += 1

    def __enter__(self) -> ArgvSampler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self._halt.set()
        self.join()


def grep_tree(root: Path, needle: str) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if needle.encode() in path.read_bytes():
                    found.append(str(path))
            except OSError:
                pass
    return found


def test_token_goes_to_git_only_by_its_credential_path(private_repo, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    bare, head = private_repo
    old, new = "tok-" + secrets.token_hex(12), "tok-" + secrets.token_hex(12)
    # a user's own helper that would store what it is given: it must never see our token
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[credential]\n\thelper = store\n")
    monkeypatch.setenv("HOME", str(home))
    cache = tmp_path / "cache"
    with serve_http(bare.parent, smart=True, auth=[("ci", old), ("ci", new)]) as server:
        base = server.url_for(bare)
        url = base.replace("http://", f"http://ci:{old}@")
        with ArgvSampler(old) as argv:
            info = fetch_source(url, "main", None, cache)
            export_tree(info, cache, tmp_path / "src")
            assert ls_remote_head(url, "main") == head
        assert server.authorized > 0
        mirrors = sorted(p.name for p in (cache / "git").iterdir())
        rotated = fetch_source(base.replace("http://", f"http://ci:{new}@"), head, head, cache)
    assert argv.samples > 0 and argv.hits == []
    assert info.url == base and rotated.url == base and info.commit == head and info.build_number == 3
    assert mirror_dir(cache, url) == mirror_dir(cache, base)  # the key is the clean URL
    assert sorted(p.name for p in (cache / "git").iterdir()) == mirrors  # no second mirror for the new token
    assert grep_tree(cache, old) == [] and grep_tree(cache, new) == []
    assert grep_tree(home, old) == [] and not (home / ".git-credentials").exists()


def test_wrong_token_is_one_line_without_it(private_repo, tmp_path: Path) -> None:
    bare, _ = private_repo
    with serve_http(bare.parent, smart=True, auth=("ci", "right")) as server:
        url = server.url_for(bare).replace("http://", "http://ci:wr0ngtoken@")
        with pytest.raises(SourceError) as caught:
            fetch_source(url, "main", None, tmp_path / "cache")
        proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "render", "--source", url, "--commit", "main",
                               "--arch", "cpu", "--out", str(tmp_path / "out"), "--cache-dir",
                               str(tmp_path / "cache2")], capture_output=True, text=True, cwd=tmp_path,
                              env={**buildkit_env(), "PYTHONPATH": str(ROOT)}, timeout=300)
    assert "wr0ngtoken" not in str(caught.value) and "\n" not in str(caught.value)
    assert proc.returncode == 1 and "wr0ngtoken" not in proc.stdout + proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "built-in defaults in use" not in ln]  # no buildkit.toml here
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr


def test_config_command_does_not_show_the_token(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "config", "--source",
                           "https://ci:s3cr3t-t0ken@example.invalid/x.git"], capture_output=True, text=True,
                          cwd=tmp_path, env={**buildkit_env(), "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "s3cr3t-t0ken" not in proc.stdout + proc.stderr and "https://***@example.invalid/x.git" in proc.stdout


# ------------------------------------------------------------------ engine tier: a whole build


@pytest.mark.docker
def test_build_with_a_token_in_the_source_url(tmp_path_factory, debian_base_image, docker_engine) -> None:
    import docker

    from forkrepo import make_fork_repo

    repo = tmp_path_factory.mktemp("secret-upstream") / "tiny-fork"
    _, fork_sha = make_fork_repo(repo, ROOT / "examples" / "tiny-fork")
    token = "tok-" + secrets.token_hex(16)
    project = tmp_path_factory.mktemp("secret-project")
    cache = project / "cache"
    image = "buildkit-test/secret-fork"
    write_project(project,
                  source={"commit": fork_sha, "patch_dir": "patches"},
                  image={"name": image},
                  build={"jobs": 2},
                  base={"os_image": debian_base_image})
    env = {**buildkit_env(), "PYTHONPATH": str(ROOT), "LLAMA_BUILDKIT_CACHE_DIR": str(cache),
           "LLAMA_BUILDKIT_BUILD_PROGRESS": "plain"}
    with serve_http(repo.parent, smart=True, auth=("ci", token)) as server:
        clean = server.url_for(repo)
        url = clean.replace("http://", f"http://ci:{token}@")
        # by variable, not --source: a flag of ours would put it in our own argv, which is the user's choice
        env["LLAMA_BUILDKIT_SOURCE_URL"] = url
        with ArgvSampler(token) as argv:
            proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "build", "--arch", "cpu"],
                                  cwd=project, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert server.authorized > 0 and argv.samples > 0
    assert argv.hits == []
    assert token not in proc.stdout and token not in proc.stderr
    lock = (project / "buildkit.lock").read_text()
    assert token not in lock and json.loads(lock)["builds"]["cpu/server"]["source_url"] == clean
    client = docker.from_env()
    attrs = client.images.get(f"{image}:cpu").attrs
    assert attrs["Config"]["Labels"]["org.opencontainers.image.source"] == clean
    assert token not in json.dumps(attrs)  # labels, env, history entries of the image config
    history = subprocess.run(["docker", "history", "--no-trunc", f"{image}:cpu"], capture_output=True, text=True,
                             check=True).stdout
    assert token not in history and "RUN" in history.upper()
    assert grep_tree(cache, token) == [] and grep_tree(project, token) == []
    for tag in json.loads(lock)["builds"]["cpu/server"]["tags"]:
        client.images.remove(tag, noprune=False)


def test_the_signing_keys_pem_reaches_no_child_process(tmp_path: Path, example_fork, debian_base_image) -> None:
    """Issue 48: LLAMA_BUILDKIT_SIGN_KEY holds the private key's PEM. buildkit reads it and takes it out of its
    own environment, so git, docker and buildx (wrapped here to record the environment they were given) never
    inherit it, whichever command runs them."""
    from buildkit.release.signkeys import generate_keys

    generate_keys(tmp_path / "k.key", tmp_path / "k.pub")
    pem = (tmp_path / "k.key").read_text()
    bindir, seen = tmp_path / "bin", tmp_path / "seen"
    bindir.mkdir()
    seen.mkdir()
    for tool in ("git", "docker"):
        real = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        (bindir / tool).write_text(f'#!/bin/sh\nenv > "{seen}/{tool}.$$"\nexec {real} "$@"\n')
        (bindir / tool).chmod(0o755)
    project = write_project(tmp_path / "project", source={"url": example_fork["url"], "commit": example_fork["commit"]},
                            image={"name": "127.0.0.1:1/secrets/tiny"}, build={"arch": "cpu"},
                            base={"os_image": debian_base_image})
    env = {**buildkit_env(), "PATH": f"{bindir}:{os.environ['PATH']}", "LLAMA_BUILDKIT_SIGN_KEY": pem,
           "LLAMA_BUILDKIT_CACHE_DIR": str(tmp_path / "cache")}
    for args in (("render", "--out", str(tmp_path / "ctx")), ("build", "--push", "--print"), ("doctor",)):
        done = subprocess.run([sys.executable, "-m", "buildkit.cli", *args], cwd=project, env=env,
                              capture_output=True, text=True, timeout=600)
        assert "Traceback" not in done.stderr, done.stderr
    recorded = sorted(seen.iterdir())
    assert {p.name.split(".")[0] for p in recorded} == {"git", "docker"}, recorded  # both ran, and were seen
    body = pem.splitlines()[1]
    assert [p.name for p in recorded if body in p.read_text() or "LLAMA_BUILDKIT_SIGN_KEY" in p.read_text()] == []
