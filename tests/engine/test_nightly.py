"""Nightly pieces without the engine: versions, the branch head over git://, the changelog, summaries.
(When a variant is current: tests/unit/test_nightly_config.py.)"""

from __future__ import annotations

import json

import pytest

from buildkit.source.changelog import changelog
from buildkit.core.errors import ConfigError, SourceError
from buildkit.flows.nightly.run import (VariantStatus, Summary, VariantResult, ls_remote_head, nightly_tags,
                              nightly_version, write_summaries)
from buildkit.release.promote import promote
from buildkit.source.changelog import Changelog, Commit
from buildkit.plan.config import load_config
from buildkit.plan.tagset import DefaultVariantRule
from buildkit.source.fetch import fetch_source
from gitserver import commit_all, run_git


def test_nightly_version_is_the_next_patch_with_the_date():
    assert nightly_version([], ["cpu"], "20261130") == "0.1.0-nightly.20261130"
    tags = ["0.3.1-cpu", "0.4.0-cuda13.1-sm120", "1.0.0-rc.1-cpu", "0.9.0-nightly.20261129-cpu", "latest"]
    assert nightly_version(tags, ["cpu", "cuda13.1-sm120"], "20261130") == "0.4.1-nightly.20261130"
    # a second nightly that day never reuses an immutable version tag
    tags += ["0.4.1-nightly.20261130-cpu"]
    assert nightly_version(tags, ["cpu", "cuda13.1-sm120"], "20261130") == "0.4.1-nightly.20261130.2"
    tags += ["0.4.1-nightly.20261130.2-cuda13.1-sm120"]
    assert nightly_version(tags, ["cpu", "cuda13.1-sm120"], "20261130") == "0.4.1-nightly.20261130.3"


def test_nightly_tags_are_the_version_and_the_moving_nightly_tag():
    tags = nightly_tags("0.4.1-nightly.20261130", "a" * 40, "cuda13.1-sm120")
    assert tags.immutable == ("0.4.1-nightly.20261130-cuda13.1-sm120",)
    assert tags.moving == ("nightly-cuda13.1-sm120",)


def test_ls_remote_head_over_git_protocol(tmp_path, git_daemon):
    repo = tmp_path / "up"
    repo.mkdir()
    run_git(repo, "init", "-q", "-b", "main")
    first = commit_all(repo, "one", 1_700_000_000)
    assert ls_remote_head(git_daemon.url_for(repo), "main") == first
    with pytest.raises(SourceError, match="no branch 'dev'"):
        ls_remote_head(git_daemon.url_for(repo), "dev")
    with pytest.raises(SourceError, match="cannot ask"):
        ls_remote_head("git://127.0.0.1:1/nothing.git", "main")


def test_changelog_lists_exactly_the_commits_between(tmp_path, git_daemon):
    repo = tmp_path / "up"
    repo.mkdir()
    run_git(repo, "init", "-q", "-b", "main")
    old = commit_all(repo, "base", 1_700_000_000)
    url = git_daemon.url_for(repo)
    cache = tmp_path / "cache"
    fetch_source(url, old, old, cache)
    a = commit_all(repo, "feat: a", 1_700_000_100)
    b = commit_all(repo, "fix: b", 1_700_000_200)
    fetch_source(url, b, b, cache)
    log = changelog(cache, url, old, b)
    assert [(c.sha, c.subject) for c in log.commits] == [(b, "fix: b"), (a, "feat: a")] and not log.note
    assert changelog(cache, url, b, b).commits == ()
    assert "no earlier nightly" in changelog(cache, url, None, b).note
    # the branch rewritten: the old head is not in the new history
    run_git(repo, "reset", "-q", "--hard", old)
    c = commit_all(repo, "rewritten", 1_700_000_300)
    fetch_source(url, c, c, cache)
    rewritten = changelog(cache, url, b, c)
    assert rewritten.subjects == ["rewritten"] and "not an ancestor" in rewritten.note


def summary(**kw) -> Summary:
    s = Summary(repository="127.0.0.1:5000/n/t", url="git://x/y", branch="master", date="20261130",
                old_commit="a" * 40, new_commit="b" * 40, version="0.1.0-nightly.20261130",
                changelog=Changelog("a" * 40, "b" * 40, (Commit("b" * 40, "fix: pipes | in subjects"),)))
    s.variants = [VariantResult("cpu", "cpu", None, "server", VariantStatus.PASSED, digest="sha256:" + "1" * 64,
                                tags=["0.1.0-nightly.20261130-cpu", "nightly-cpu"], build_seconds=12.3),
                  VariantResult("cuda13.1-sm120", "sm_120", "13.1", "server", VariantStatus.FAILED,
                                error="build failed: x"),
                  VariantResult("cuda13.1-sm89", "sm_89", "13.1", "server", VariantStatus.SKIPPED)]
    for key, value in kw.items():
        setattr(s, key, value)
    return s


def test_summary_json_and_markdown(tmp_path):
    s = summary()
    assert not s.ok and "1 of 2 variants failed (cuda13.1-sm120)" in s.headline()
    data = s.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert [v["skipped"] for v in data["variants"]] == [False, False, True]
    assert data["changelog"]["commits"][0]["subject"] == "fix: pipes | in subjects"
    md = s.to_markdown()
    assert "fix: pipes \\| in subjects" in md  # a pipe would break the table
    assert "| `cpu` | passed | `sha256:111111111111` | `0.1.0-nightly.20261130-cpu` `nightly-cpu` | 12 s | no |" in md
    assert "| `cuda13.1-sm89` | skipped |" in md and md.count("\n| `") == 3
    step = tmp_path / "step.md"
    write_summaries(s, str(tmp_path / "s.json"), env={"GITHUB_STEP_SUMMARY": str(step)})
    write_summaries(s, None, env={"GITHUB_STEP_SUMMARY": str(step)})
    assert step.read_text().count("## ❌ buildkit nightly") == 2  # appended, as GitHub expects
    assert json.loads((tmp_path / "s.json").read_text())["ok"] is False
    up = summary(up_to_date=True, variants=[], old_commit="b" * 40)
    assert up.ok and up.headline().startswith("up to date")


def test_promote_refuses_what_is_not_a_nightly_or_a_nightly_version():
    cfg = load_config(None, env={}, overrides={"image.name": ("127.0.0.1:1/n/t", "test")})
    target = (cfg.image.name, DefaultVariantRule.of(cfg))
    with pytest.raises(ConfigError, match="nightly-<variant>"):
        promote(*target, "cpu", "1.0.0")
    with pytest.raises(ConfigError, match="nightly version"):
        promote(*target, "nightly-cpu", "1.0.0-nightly.20261130")
    with pytest.raises(ConfigError, match="semver"):
        promote(*target, "nightly-cpu", "1.0")


def test_build_push_never_adopts_a_nightly_image_of_the_same_build_key():
    """publish reuses an engine image with the build key it is about to build; a nightly of the same
    inputs is not that image (its version label is a nightly's)."""
    from buildkit.release.publish import is_nightly_version

    assert is_nightly_version("0.1.0-nightly.20261130") and is_nightly_version("1.2.3-nightly.20261130.2")
    assert not is_nightly_version("0.1.0") and not is_nightly_version("1.0.0-rc.1")
    assert not is_nightly_version("not a version")


def test_the_no_op_path_helpers_agree_with_the_build_stages(tmp_path):
    """nightly keeps its own copy of normalise_url so that an unchanged night does not import the source
    stage (GitPython); it must give the same answers. (The patch queue's rule is one: plan/patchqueue.patch_policy.)"""
    from buildkit.flows.nightly import run as nightly
    from buildkit.source import fetch as source

    for url in ("git://h/x.git", "https://h/x", "git@github.com:o/r.git", "relative/path", str(tmp_path), "~/x"):
        assert nightly.normalise_url(url) == source.normalise_url(url)


def test_the_nightly_record_is_written_through_the_one_lock_update(tmp_path):
    from buildkit.flows.nightly.run import read_nightly_record, update_nightly_record
    path = tmp_path / "buildkit.lock"
    path.write_text(json.dumps({"lock_version": 1, "builds": {"cpu/server": {"commit": "c"}}}))  # an odd entry
    update_nightly_record(path, "u", "main", "cpu", {"commit": "a"})
    update_nightly_record(path, "u", "main", "cpu-full", {"commit": "b"})
    assert read_nightly_record(path, "u", "main")["variants"] == {"cpu": {"commit": "a"}, "cpu-full": {"commit": "b"}}
    assert json.loads(path.read_text())["builds"] == {"cpu/server": {"commit": "c"}}  # the builds are kept
    update_nightly_record(path, "other", "main", "cpu", {"commit": "d"})  # another repository: a new record
    assert read_nightly_record(path, "u", "main") == {}
    assert read_nightly_record(path, "other", "main")["variants"] == {"cpu": {"commit": "d"}}
