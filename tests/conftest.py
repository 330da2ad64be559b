"""Shared fixtures. Helpers live in their own modules (gitserver.py); only fixtures are declared here."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The helper modules (gitserver.py, cliutil.py, ...) live here in tests/ and are imported by every tier
# (tests/unit, tests/engine, tests/e2e).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cliutil import Cli, cli_env  # noqa: E402
from gitserver import GitDaemon, serve  # noqa: E402

E2E_TIMEOUT = 3600  # seconds; the default build of the real tree takes about 22 minutes cold (pyproject: 900)


# Modules whose proof depends on the machine's binfmt_misc handlers: some register QEMU for a while
# (the seed's build machine, e2e; the cross-CUDA module, engine), the others prove "no arm64 program ran"
# by there being no handler. Under pytest-xdist a tier's ones run one after the other on one worker; the
# tiers run one after the other. (No other module builds for another platform.)
BINFMT_MODULES = {"test_emulated_build_machine_docker.py", "test_e2e_cross.py",  # e2e
                  "test_cross_cuda_docker.py", "test_cross_build_docker.py", "test_multiplatform_docker.py"}

# The engine tier's longest groups, longest first (seconds on a cold engine, bench/tier_times.py's logs):
# the workers take them first, so no long group starts near the end while the other workers sit idle.
# (pytest-xdist would order groups by their number of tests, which put the three tests of the second
# engine, about 230 s, last; the Makefile says --no-loadscope-reorder.) The other groups follow in
# collection order.
LONG_GROUPS = ("binfmt",                         # ~450: the cross builds, multi-platform reproduce
               "test_reproduce_elsewhere_docker.py",  # an index built, then reproduced on a second, empty engine
               "test_reproduce_docker.py",       # ~400: clean builds and their reproductions, CUDA too
               "test_remote_builder_docker.py",  # ~230: a second engine, built on from a registry cache
               "test_build_docker.py",           # ~200: the CUDA archs, cpu, build.user
               "test_base_images_docker.py",     # ~180: local-only bases, three routes
               "test_publish_archive_docker.py", "test_nightly_docker.py", "test_publish_docker.py")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the xdist_group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """e2e tests (their session builds included) get E2E_TIMEOUT from pytest-timeout, however run; tests
    marked `measures` go last. Under pytest-xdist (`--dist loadgroup`) a module's tests stay on one
    worker, so its module fixtures (the builds they share) are made once."""
    for item in items:
        if item.get_closest_marker("e2e") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT))
        item.add_marker(pytest.mark.xdist_group(_group(item)))
    # tests that compare speeds run last (a stable sort keeps the rest in order): by then the other
    # workers' compiles are ending, so their wait for a quiet machine (tests/quiet.py) is short, and the
    # tests after them in their group do not wait with them
    items[:] = sorted(items, key=lambda item: (item.get_closest_marker("measures") is not None, _rank(item)))


def _rank(item: pytest.Item) -> int:
    group = _group(item)
    return LONG_GROUPS.index(group) if group in LONG_GROUPS else len(LONG_GROUPS)


def _group(item: pytest.Item) -> str:
    """The xdist group of a test: its module's, the binfmt modules' one group, or (e2e) one group for every
    test of the real tree's session image, which is built once per worker and so on one worker only."""
    if "real_server_image" in getattr(item, "fixturenames", ()):
        return "real-tree"
    return "binfmt" if item.path.name in BINFMT_MODULES else item.path.name


@pytest.fixture(scope="session")
def git_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitDaemon]:
    """A git daemon on 127.0.0.1 serving pytest's whole temp root: `git_daemon.url_for(repo_path)` is
    the git:// URL of any repository a test makes under tmp_path; str(git_daemon) is the base URL."""
    with serve(tmp_path_factory.getbasetemp()) as daemon:
        yield daemon


@pytest.fixture(scope="session")
def example_fork(tmp_path_factory: pytest.TempPathFactory, git_daemon: GitDaemon) -> dict:
    """examples/tiny-fork committed as "upstream" plus one fork commit (tests/forkrepo.py: the same SHAs
    every time), served over git://: {"url", "commit", "upstream", "path"}. Read-only: a test that
    commits makes its own."""
    from forkrepo import make_fork_repo

    repo = tmp_path_factory.mktemp("example-upstream") / "tiny-fork"
    upstream, commit = make_fork_repo(repo, Path(__file__).resolve().parent.parent / "examples" / "tiny-fork")
    return {"url": git_daemon.url_for(repo), "commit": commit, "upstream": upstream, "path": repo}


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """The real `buildkit` CLI in a subprocess, in tmp_path (write a project there with
    cliutil.write_project), this checkout on PYTHONPATH and a cache of its own under tmp_path/cache:
    `cli("config", "--json")`, `cli("build", cwd=project, LLAMA_BUILDKIT_BUILD_JOBS="1")`."""
    return Cli(tmp_path, cli_env(tmp_path / "cache"))


from fixtures_docker import (busybox_image, debian_base_image, docker_engine, multiarch_base_image,  # noqa: E402,F401
                             trixie_multiarch_base_image)  # noqa: E402,F401  (fixtures)
from registryserver import registry_auth, registry_plain, registry_token  # noqa: E402,F401  (fixtures)
from realserver import real_server_image, single_level_build  # noqa: E402,F401  (fixture: the real llama-server image, built by buildkit)
