"""Git URLs as git reads them (core/giturls.py, issue 47): local folders, loopback hosts, the git+ URI."""

from pathlib import Path

from buildkit.core.giturls import local_path, loopback_host, vcs_uri
from buildkit.flows.nightly.installorigin import Checkout, Remote, reachable

import pytest

from buildkit.core.errors import ConfigError

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_local_folders_are_paths_and_file_urls_not_scp_or_network_urls():
    assert local_path("/srv/fork") == Path("/srv/fork")
    assert local_path("fork", Path("/work/p")) == Path("/work/p/fork")
    assert local_path("../fork", Path("/work/p")) == Path("/work/fork")
    assert local_path("file:///srv/my%20fork") == Path("/srv/my fork")
    assert local_path("./host:x", Path("/w")) == Path("/w/host:x")  # a slash before the colon: a path
    for network in ("https://github.com/a/b", "git://127.0.0.1/x", "ssh://git@h/x", "git@github.com:a/b.git",
                    "host:path/x"):
        assert local_path(network) is None, network


def test_loopback_hosts():
    assert loopback_host("http://127.0.0.1:8080/x") == "127.0.0.1"
    assert loopback_host("git://localhost/x") == "localhost"
    assert loopback_host("http://[::1]:9/x") == "::1"
    assert loopback_host("git@127.0.0.2:x.git") == "127.0.0.2"
    assert loopback_host("https://github.com/a/b") is None and loopback_host("/srv/x") is None


def test_the_git_uri_of_a_local_fork_is_a_file_url():
    """Issue 47 item 5: a local fork was git+/path@commit, which is no URI."""
    assert vcs_uri("/srv/fork", SHA) == f"git+file:///srv/fork@{SHA}"
    assert vcs_uri("file:///srv/fork", SHA) == f"git+file:///srv/fork@{SHA}"
    assert vcs_uri("fork dir", SHA, Path("/w")) == f"git+file:///w/fork%20dir@{SHA}"
    assert vcs_uri("https://u:tok@github.com/a/b", SHA) == f"git+https://github.com/a/b@{SHA}"
    assert vcs_uri("git@github.com:a/b.git", SHA) == f"git+ssh://git@github.com/a/b.git@{SHA}"
    assert vcs_uri("git+https://github.com/a/b", SHA) == f"git+https://github.com/a/b@{SHA}"


def test_a_checkout_is_installed_from_the_first_reachable_remote_that_holds_its_commit():
    remotes = (Remote("mine", "/srv/mirror", True), Remote("origin", "https://github.com/a/b", False),
               Remote("fork", "https://github.com/me/b", True))
    origin = reachable(Checkout("the checkout /x", SHA, remotes))
    assert origin.spec == f"git+https://github.com/me/b@{SHA}" and origin.notes == ()
    dirty = reachable(Checkout("the checkout /x", SHA, remotes, dirty=True))
    assert "uncommitted changes" in dirty.notes[0]
    with pytest.raises(ConfigError, match=r"mine /srv/mirror: a folder on this machine; origin https://github.com/a/b: "
                                          r"no branch holds it\): a runner cannot install it"):
        reachable(Checkout("the checkout /x", SHA, remotes[:2]))
    with pytest.raises(ConfigError, match="which has no remote"):
        reachable(Checkout("the checkout /x", SHA, ()))
