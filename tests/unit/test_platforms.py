"""Platforms in the arch catalogue (issue 11, its pure part): each arch lists where such GPUs exist,
the default platform follows the arch, and an impossible pair stops before any work."""

import pytest

from buildkit.core.errors import ArchError
from buildkit.plan.archs import ARCHS, default_platform, get_arch
from buildkit.plan.buildplan import make_request
from buildkit.plan.config import load_config
from buildkit.plan.matrix import matrix_variants


def cfg(**values):
    return load_config(None, env={}, overrides={k: (v, "test") for k, v in values.items()})


def test_sm121_is_arm64_only_and_sm90_is_both():
    assert get_arch("sm_121").platforms == ("linux/arm64",) == get_arch("sm_110").platforms
    assert get_arch("sm_103").platforms == ("linux/amd64", "linux/arm64")
    assert set(get_arch("sm_90").platforms) == {"linux/amd64", "linux/arm64"}
    assert all(a.platforms for a in ARCHS.values())


def test_the_default_platform_follows_the_arch():
    assert make_request(cfg(**{"build.arch": "sm_121"})).platform == "linux/arm64"
    assert make_request(cfg(**{"build.arch": "sm_120"})).platform == "linux/amd64"
    resolved = cfg(**{"build.arch": "sm_121"})
    assert resolved["build.platform"] == "linux/arm64"  # what `buildkit config` shows
    assert "follows build.arch" in resolved.origins["build.platform"]


def test_an_explicit_platform_wins_where_the_gpu_exists():
    assert make_request(cfg(**{"build.arch": "sm_90", "build.platform": "linux/arm64"})).platform == "linux/arm64"


def test_an_impossible_pair_is_one_line_naming_the_platform_that_works():
    with pytest.raises(ArchError) as info:
        make_request(cfg(**{"build.arch": "sm_121", "build.platform": "linux/amd64"}))
    message = str(info.value)
    assert "\n" not in message and "linux/arm64 only" in message and "--platform linux/arm64" in message


def test_matrix_variants_each_follow_their_own_arch():
    variants, _ = matrix_variants(cfg(**{"matrix.archs": ["sm_120", "sm_121"], "matrix.cuda_versions": ["13.1"]}))
    assert {v.request.arch.name: v.request.platform for v in variants} == {
        "sm_120": "linux/amd64", "sm_121": "linux/arm64"}


def test_default_platform_is_the_first_listed():
    assert all(default_platform(a) == a.platforms[0] for a in ARCHS.values())
