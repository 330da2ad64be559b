"""The source stage over every git transport we can serve on 127.0.0.1, and the limits of gitcmd.py.

Transports: a local path, file://, git:// (git daemon), dumb HTTP (update-server-info + a static file
server), smart HTTP (git http-backend), and ssh through a stand-in for the ssh program that runs the
real git-upload-pack locally (this machine has no sshd). Each must give the right commit, build
number and tree, and leave a history mirror that is no partial clone (so it can never fetch lazily).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from buildkit.core.errors import SourceError
from buildkit.core.children import group_size as _group_size
from buildkit.source.gitcmd import STOP_GRACE, Git
from buildkit.source.fetch import export_tree, fetch_source, mirror_dir
from githttp import prepare_dumb, serve_http
from gitserver import GitDaemon, commit_all, run_git

T0 = 1_700_000_000
KINDS = ["path", "file", "git", "dumb-http", "smart-http", "ssh"]


@dataclass(frozen=True)
class Served:
    bare: Path
    commits: tuple[str, ...]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Served:
    work = tmp_path_factory.mktemp("protocols") / "work"
    run_git(work.parent, "init", "-q", "-b", "main", work.name)
    commits = []
    for i in range(6):
        (work / "a.txt").write_text(f"a{i}\n")
        (work / "sub").mkdir(exist_ok=True)
        (work / "sub" / f"f{i}.txt").write_text(f"file {i}\n" * 20)
        commits.append(commit_all(work, f"change {i}", T0 + 100 * i))
    bare = work.parent / "fork.git"
    run_git(work.parent, "clone", "-q", "--bare", str(work), str(bare))
    run_git(bare, "config", "uploadpack.allowFilter", "true")
    prepare_dumb(bare)
    return Served(bare=bare, commits=tuple(commits))


@pytest.fixture()
def fake_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """GIT_SSH_COMMAND that runs the remote command (git-upload-pack 'PATH') here instead of on a host."""
    script = tmp_path / "fake-ssh"
    log = tmp_path / "ssh.log"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\nfor last; do :; done\nexec sh -c "$last"\n')
    script.chmod(0o755)
    monkeypatch.setenv("GIT_SSH_COMMAND", str(script))
    monkeypatch.setenv("GIT_SSH_VARIANT", "simple")
    return log


def _url(kind: str, served: Served, git_daemon: GitDaemon, http_url: str | None) -> str:
    if kind == "path":
        return str(served.bare)
    if kind == "file":
        return served.bare.as_uri()
    if kind == "git":
        return git_daemon.url_for(served.bare)
    if kind == "ssh":
        return f"ssh://git@127.0.0.1{served.bare}"
    assert http_url is not None
    return http_url


def _history(cache: Path, url: str) -> Path:
    content = mirror_dir(cache, url)
    return content.with_name(content.stem + ".history.git")


@pytest.mark.parametrize("kind", KINDS)
def test_every_transport_fetches_counts_and_exports(kind: str, served: Served, git_daemon: GitDaemon,
                                                    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    request: pytest.FixtureRequest) -> None:
    monkeypatch.setenv("LLAMA_BUILDKIT_GIT_TIMEOUT", "60")  # a hang fails in a minute, not never
    if kind == "ssh":
        ssh_log = request.getfixturevalue("fake_ssh")
    with serve_http(served.bare.parent, smart=kind == "smart-http") as server:
        url = _url(kind, served, git_daemon, server.url_for(served.bare) if "http" in kind else None)
        by_sha = fetch_source(url, served.commits[3], served.commits[3], tmp_path / "cache")
        by_branch = fetch_source(url, "main", None, tmp_path / "cache")
    assert by_sha.commit == served.commits[3] and by_sha.build_number == 4
    assert by_branch.commit == served.commits[5] and by_branch.build_number == 6
    assert by_branch.commit_time == T0 + 500 and by_branch.subject == "change 5"
    history = _history(tmp_path / "cache", url)
    config = (history / "config").read_text().lower()
    assert "promisor" not in config and "partialclone" not in config  # nothing can fetch lazily
    kinds = set(run_git(history, "cat-file", "--batch-all-objects", "--batch-check=%(objecttype)").split())
    # filters where the protocol has them; dumb HTTP cannot filter and sends everything
    assert kinds == ({"commit", "tree", "blob"} if kind == "dumb-http" else {"commit"})
    dest = tmp_path / "src"
    export_tree(by_branch, tmp_path / "cache", dest)
    assert (dest / "a.txt").read_text() == "a5\n" and (dest / "sub" / "f5.txt").is_file()
    if kind == "ssh":
        assert "git-upload-pack" in ssh_log.read_text() and "git@127.0.0.1" in ssh_log.read_text()


def test_dumb_http_over_a_mirror_left_as_partial_clone(served: Served, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The reported bug: a history mirror registered as promisor (what `--filter` leaves, or an
    interrupted run) fetched over dumb HTTP made git start `git fetch --filter=blob:none --stdin`
    without end. The promisor settings are removed before any fetch."""
    monkeypatch.setenv("LLAMA_BUILDKIT_GIT_TIMEOUT", "60")
    with serve_http(served.bare.parent, smart=False) as server:
        url = server.url_for(served.bare)
        history = _history(tmp_path / "cache", url)
        run_git(history.parent if history.parent.exists() else tmp_path, "init", "-q", "--bare", str(history))
        run_git(history, "config", "remote.origin.url", url)
        run_git(history, "config", "remote.origin.promisor", "true")
        run_git(history, "config", "remote.origin.partialclonefilter", "tree:0")
        info = fetch_source(url, "main", None, tmp_path / "cache")
    assert info.build_number == 6
    assert "promisor" not in (history / "config").read_text()


def test_dumb_http_refusing_credentials_is_one_line(served: Served, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_BUILDKIT_GIT_TIMEOUT", "60")
    with serve_http(served.bare.parent, smart=False, auth=("u", "right")) as server:
        url = server.url_for(served.bare).replace("http://", "http://u:wrong@")
        with pytest.raises(SourceError) as caught:
            fetch_source(url, "main", None, tmp_path / "cache")
    message = str(caught.value)
    assert "\n" not in message and "wrong" not in message and "cannot fetch from http://127.0.0.1" in message


def _pgid_writer(path: Path) -> str:
    """sh builtins only (no process to wait for): field 5 of /proc/$$/stat is the process group."""
    return f"read -r line < /proc/$$/stat; set -- $line; echo $5 > {path}"


def test_deadline_stops_the_whole_process_group(tmp_path: Path) -> None:
    pgid_file = tmp_path / "pgid"
    runner = Git(timeout=3)  # long enough for the alias to write its group on a loaded machine
    start = time.monotonic()
    with pytest.raises(SourceError, match=r"git sleeper did not finish within 3 s; it was stopped"):
        runner.run("-c", f"alias.sleeper=!sh -c '{_pgid_writer(pgid_file)}; sleep 300 & sleep 300 & wait'",
                   "sleeper", what="sleeper")
    assert time.monotonic() - start < 3 + STOP_GRACE + 10  # the deadline (plus its grace), not the 300 s
    assert _group_size(int(pgid_file.read_text())) == 0  # the children went with it


def test_runaway_process_count_is_stopped(tmp_path: Path) -> None:
    """Bounded processes: a git that keeps starting processes is stopped at MAX_PROCESSES."""
    pgid_file = tmp_path / "pgid"
    runner = Git(timeout=60)
    script = f"!sh -c '{_pgid_writer(pgid_file)}; for i in $(seq 80); do sleep 120 & done; wait'"
    with pytest.raises(SourceError, match="started more than 32 processes"):
        runner.run("-c", f"alias.spawner={script}", "spawner", what="spawner")
    assert _group_size(int(pgid_file.read_text())) == 0


def test_group_size_counts_a_group() -> None:
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while _group_size(proc.pid) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _group_size(proc.pid) == 3
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
