"""Under CI a test that cannot have the real thing fails instead of skipping (tests/fixtures_docker.py)."""

from __future__ import annotations

import pytest

from fixtures_docker import in_ci, need_containerd_store


def test_ci_is_read_from_ci_or_our_own_variable():
    assert in_ci({"CI": "true"}) and in_ci({"LLAMA_BUILDKIT_CI": "1"}) and in_ci({"CI": "YES"})
    assert not in_ci({}) and not in_ci({"CI": "false"}) and not in_ci({"LLAMA_BUILDKIT_CI": ""})


@pytest.fixture
def no_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("LLAMA_BUILDKIT_CI", raising=False)
    return monkeypatch


def test_an_engine_without_the_containerd_store_skips_locally(no_ci):
    with pytest.raises(pytest.skip.Exception, match="containerd image store.*'overlay2'"):
        need_containerd_store("overlay2")


@pytest.mark.parametrize("name", ["CI", "LLAMA_BUILDKIT_CI"])
def test_an_engine_without_the_containerd_store_fails_under_ci(no_ci, name):
    no_ci.setenv(name, "true")
    with pytest.raises(pytest.fail.Exception, match="containerd image store.*failure, not a skip"):
        need_containerd_store("overlay2")


def test_the_containerd_store_passes(no_ci):
    no_ci.setenv("CI", "true")
    need_containerd_store("containerd")
