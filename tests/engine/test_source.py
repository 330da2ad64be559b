"""source.py against real git: an upstream repository served by `git daemon` on 127.0.0.1."""

from __future__ import annotations

import os
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from buildkit.core.errors import SourceError
from buildkit.source.fetch import SourceInfo, export_tree, fetch_source, mirror_dir
from gitserver import GitDaemon, commit_all, free_port, run_git

T0 = 1_700_000_000


@dataclass(frozen=True)
class Upstream:
    path: Path
    url: str
    commits: tuple[str, ...]  # main, oldest first
    feature: str  # tip of branch "feature", forked from commits[2]


def _count(repo: Path, commit: str) -> int:
    return int(run_git(repo, "rev-list", "--count", commit))


def _build_upstream(path: Path) -> list[str]:
    run_git(path.parent, "init", "-q", "-b", "main", path.name)
    run_git(path, "config", "uploadpack.allowFilter", "true")  # as GitHub does
    (path / "dir").mkdir()
    (path / "dir" / "b.txt").write_text("b\n")
    (path / "a.txt").write_text("a0\n")
    (path / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (path / "run.sh").chmod(0o755)
    os.symlink("a.txt", path / "link")
    (path / ".gitattributes").write_text("ignored.txt export-ignore\nsubst.txt export-subst\n")
    (path / "ignored.txt").write_text("kept anyway\n")
    (path / "subst.txt").write_text("$Format:%H$\n")
    commits = [commit_all(path, "first", T0)]
    for i in range(1, 6):
        (path / "a.txt").write_text(f"a{i}\n")
        (path / f"f{i}.txt").write_text(f"file {i}\n" * 50)
        commits.append(commit_all(path, f"change {i}", T0 + 100 * i))
    run_git(path, "tag", "-a", "v1", "-m", "release 1", commits[3])
    run_git(path, "tag", "b0002", commits[2])  # llama.cpp-style tag that looks like hex
    return commits


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory, git_daemon: GitDaemon) -> Upstream:
    path = tmp_path_factory.mktemp("upstream") / "proj.git"
    commits = _build_upstream(path)
    run_git(path, "checkout", "-q", "-b", "feature", commits[2])
    (path / "feature.txt").write_text("feature\n")
    feature = commit_all(path, "feature work", T0 + 10_000)
    run_git(path, "checkout", "-q", "main")
    return Upstream(path=path, url=git_daemon.url_for(path), commits=tuple(commits), feature=feature)


def _objects(mirror: Path) -> dict[str, int]:
    return {str(p.relative_to(mirror)): p.stat().st_size for p in (mirror / "objects").rglob("*") if p.is_file()}


def _expect(info: SourceInfo, up: Upstream, commit: str) -> None:
    assert info.commit == commit
    assert info.build_number == _count(up.path, commit)
    assert info.commit_time == int(run_git(up.path, "log", "-1", "--format=%ct", commit))
    assert info.subject == run_git(up.path, "log", "-1", "--format=%s", commit)


def test_fetch_by_sha_is_shallow_and_counts_history(upstream: Upstream, tmp_path: Path) -> None:
    commit = upstream.commits[4]
    info = fetch_source(upstream.url, commit.upper(), commit, tmp_path)
    _expect(info, upstream, commit)
    assert info.build_number == 5 and info.commit_time == T0 + 400
    assert info.fetched and info.bytes_fetched > 0
    mirror = mirror_dir(tmp_path, upstream.url)
    assert (mirror / "shallow").read_text().split() == [commit]  # only the snapshot, no history
    assert run_git(mirror, "rev-list", "--all").split() == [commit]
    history = mirror.with_name(mirror.stem + ".history.git")  # commits only: the server allows filters
    kinds = run_git(history, "cat-file", "--batch-all-objects", "--batch-check=%(objecttype)").split()
    assert set(kinds) == {"commit"} and len(kinds) == 5


@pytest.mark.parametrize("ref, index", [("main", 5), ("v1", 3), ("b0002", 2), ("refs/tags/v1", 3)])
def test_fetch_by_branch_or_tag(upstream: Upstream, tmp_path: Path, ref: str, index: int) -> None:
    info = fetch_source(upstream.url, ref, None, tmp_path)
    assert info.ref == ref
    _expect(info, upstream, upstream.commits[index])


def test_fetch_side_branch(upstream: Upstream, tmp_path: Path) -> None:
    info = fetch_source(upstream.url, "feature", upstream.feature, tmp_path)
    _expect(info, upstream, upstream.feature)
    assert info.build_number == 4


def test_pin_mismatch(upstream: Upstream, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=rf"ref main resolved to {upstream.commits[5]} but the pin is "
                                          rf"{upstream.commits[1]}"):
        fetch_source(upstream.url, "main", upstream.commits[1], tmp_path)


def test_bad_pin(upstream: Upstream, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="40-hex"):
        fetch_source(upstream.url, "main", upstream.commits[1][:12], tmp_path)


def test_short_sha_is_refused(upstream: Upstream, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="full 40-hex SHA is required"):
        fetch_source(upstream.url, upstream.commits[1][:10], None, tmp_path)


def test_unknown_ref_and_sha(upstream: Upstream, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="neither a branch nor a tag"):
        fetch_source(upstream.url, "no-such-branch", None, tmp_path)
    unknown = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(SourceError, match=f"commit {unknown} is not in"):
        fetch_source(upstream.url, unknown, None, tmp_path)


@pytest.mark.parametrize("kind", ["daemon-down", "not-exported", "local-path"])
def test_unreachable_repository(tmp_path: Path, git_daemon: GitDaemon, kind: str) -> None:
    url = {"daemon-down": f"git://127.0.0.1:{free_port()}/x.git",
           "not-exported": f"{git_daemon.url}/no/such/repo.git",
           "local-path": str(tmp_path / "missing")}[kind]
    for ref in ("main", "0123456789abcdef0123456789abcdef01234567"):
        with pytest.raises(SourceError) as caught:
            fetch_source(url, ref, None, tmp_path / "cache")
        message = str(caught.value)
        assert url in message and "--source PATH_OR_URL" in message and "\n" not in message


def test_second_fetch_fetches_nothing(upstream: Upstream, tmp_path: Path) -> None:
    commit = upstream.commits[3]
    first = fetch_source(upstream.url, commit, None, tmp_path)
    mirror = mirror_dir(tmp_path, upstream.url)
    history = mirror.with_name(mirror.stem + ".history.git")
    before = (_objects(mirror), _objects(history))
    for ref in (commit, "v1"):  # by SHA (no network at all) and by tag (ls-remote only)
        again = fetch_source(upstream.url, ref, commit, tmp_path)
        assert (again.fetched, again.bytes_fetched) == (False, 0)
        assert again.build_number == first.build_number and again.commit_time == first.commit_time
    assert (_objects(mirror), _objects(history)) == before


def test_warm_mirror_fetches_newer_commit(upstream: Upstream, tmp_path: Path) -> None:
    fetch_source(upstream.url, upstream.commits[1], None, tmp_path)
    info = fetch_source(upstream.url, "main", None, tmp_path)
    _expect(info, upstream, upstream.commits[5])
    assert info.fetched
    older = fetch_source(upstream.url, upstream.commits[3], None, tmp_path)  # between the two: a new snapshot
    _expect(older, upstream, upstream.commits[3])
    assert older.fetched


def test_server_refusing_sha_wants_falls_back(upstream: Upstream, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Protocol v0 without uploadpack.allowAnySHA1InWant refuses a non-tip SHA.
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.version")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "0")
    info = fetch_source(upstream.url, upstream.commits[2], None, tmp_path)
    _expect(info, upstream, upstream.commits[2])
    with pytest.raises(SourceError, match="is not in"):
        fetch_source(upstream.url, "f" * 40, None, tmp_path)


@pytest.mark.parametrize("scheme", ["path", "file"])
def test_local_repository(upstream: Upstream, tmp_path: Path, scheme: str,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(upstream.path.parent)
    url = upstream.path.name if scheme == "path" else upstream.path.as_uri()
    info = fetch_source(url, "main", None, tmp_path)
    assert info.url == (str(upstream.path) if scheme == "path" else url)
    _expect(info, upstream, upstream.commits[5])


def test_concurrent_fetches_share_the_mirror(upstream: Upstream, tmp_path: Path) -> None:
    with ThreadPoolExecutor(4) as pool:
        infos = list(pool.map(lambda _: fetch_source(upstream.url, "v1", None, tmp_path), range(4)))
    assert {i.commit for i in infos} == {upstream.commits[3]}
    assert sum(i.fetched for i in infos) == 1


def test_export_tree(upstream: Upstream, tmp_path: Path) -> None:
    info = fetch_source(upstream.url, "main", None, tmp_path / "cache")
    dest = tmp_path / "out" / "src"
    export_tree(info, tmp_path / "cache", dest)
    assert not (dest / ".git").exists()
    tracked = run_git(upstream.path, "ls-tree", "-r", "--name-only", info.commit).splitlines()
    exported = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if not p.is_dir())
    assert exported == sorted(tracked)
    assert (dest / "a.txt").read_text() == "a5\n"
    assert (dest / "ignored.txt").read_text() == "kept anyway\n"  # export-ignore is not honoured
    assert (dest / "subst.txt").read_text() == "$Format:%H$\n"  # nor export-subst
    assert os.readlink(dest / "link") == "a.txt"
    assert stat.S_IMODE((dest / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "a.txt").stat().st_mode) == 0o644
    assert (dest / "dir" / "b.txt").read_text() == "b\n"


def test_export_refuses_non_empty_dest_and_unknown_commit(upstream: Upstream, tmp_path: Path) -> None:
    info = fetch_source(upstream.url, "v1", None, tmp_path / "cache")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(SourceError, match="not an empty folder"):
        export_tree(info, tmp_path / "cache", tmp_path / "busy")
    with pytest.raises(SourceError, match="fetch it first"):
        export_tree(info, tmp_path / "other-cache", tmp_path / "dest")
