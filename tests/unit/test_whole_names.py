"""Values that reach a generated file (the Dockerfile, tags, labels) are matched whole (issue 39, class 5):
`re.match` with `$` lets a trailing newline through, which then breaks the file it lands in."""

from __future__ import annotations

import pytest

from buildkit.core.errors import ConfigError
from buildkit.plan.buildplan import make_request
from buildkit.plan.config import load_config
from fakeengine import FakeEngine


@pytest.mark.parametrize("key,value,message", [
    ("build.cmake_args", ["-DGGML_NATIVE=OFF\n"], "build.cmake_args"),
    ("image.version", "1.0.0\n", "image.version"),
    ("build.platform", "linux/amd64\n", "build.platform"),
    ("build.build_platform", "linux/amd64\n", "build.build_platform"),
    ("build.user", "llama\n", "build.user"),
])
def test_a_trailing_newline_is_refused_in_one_line(key, value, message):
    cfg = load_config(None, {}, {"build.arch": ("cpu", "--arch"), "build.cpu_level": ("none", "--cpu-level"),
                                 key: (value, "--x")})
    with pytest.raises(ConfigError, match=message) as caught:
        make_request(cfg)
    assert "\n" not in str(caught.value)  # the value is shown with repr: one line


@pytest.mark.parametrize("key,value", [("build.cmake_args", ["-DGGML_NATIVE=OFF"]), ("image.version", "1.0.0"),
                                       ("build.platform", "linux/amd64"), ("build.user", "llama")])
def test_the_same_values_without_it_pass(key, value):
    make_request(load_config(None, {}, {"build.arch": ("cpu", "--arch"), "build.cpu_level": ("none", "--cpu-level"),
                                        key: (value, "--x")}))


def test_a_nightly_job_refuses_a_commit_with_a_trailing_newline():
    """The commit becomes a tag and a label of the job's image: the plan's 40 hex digits, whole."""
    from buildkit.cli.nightlyspecs import job_spec, nightly_spec
    from buildkit.flows.nightly.jobs import run_job

    cfg = load_config(None, {}, {"matrix.archs": (["cpu"], "t"), "source.commit": ("a" * 40 + "\n", "--commit"),
                                 "image.version": ("1.0.0", "--release")})
    with pytest.raises(ConfigError, match="--job needs --commit with the plan's full 40-hex commit"):
        job_spec(cfg, FakeEngine())  # the command's, before the matrix is resolved
    with pytest.raises(ConfigError, match="--job needs --commit with the plan's full 40-hex commit"):
        run_job(nightly_spec(cfg, FakeEngine()), "cpu", engine=FakeEngine())
