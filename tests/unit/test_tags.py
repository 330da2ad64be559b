import contextlib

import pytest

from buildkit.core.errors import ConfigError
from buildkit.plan.tags import build_key_tag, next_version
from buildkit.plan.tagset import release_tags

C = "905483277823858fdec17ff5c3750451cb1b7cdc"
V = "cuda13.1-sm120"


def test_release_of_the_default_variant():
    tags = release_tags("0.2.0", C, V, default_variant=True)
    assert tags.immutable == ("0.2.0-cuda13.1-sm120", "sha-9054832-cuda13.1-sm120", "0.2.0")
    assert tags.moving == ("0.2-cuda13.1-sm120", "cuda13.1-sm120", "0.2", "latest")


def test_other_variant_gets_no_bare_version_or_latest():
    tags = release_tags("0.2.0", C, "cuda12.8-sm89", default_variant=False)
    assert "latest" not in tags.all and "0.2.0" not in tags.all and "0.2" not in tags.all
    assert tags.all == ("0.2.0-cuda12.8-sm89", "sha-9054832-cuda12.8-sm89", "0.2-cuda12.8-sm89", "cuda12.8-sm89")


def test_major_tag_only_from_1_0():
    assert "0-cpu" not in release_tags("0.3.1", C, "cpu", default_variant=True).all
    tags = release_tags("1.4.2", C, "cpu", default_variant=True)
    assert "1-cpu" in tags.moving and "1" in tags.moving and "1.4" in tags.moving


def test_nightly_prerelease_gets_only_its_own_tag_and_nightly():
    tags = release_tags("0.2.1-nightly.20261130", C, V, default_variant=True)
    assert tags.immutable == ("0.2.1-nightly.20261130-cuda13.1-sm120",)
    assert tags.moving == ("nightly-cuda13.1-sm120",)
    assert "latest" not in tags.all


def test_build_key_tag_is_immutable():
    tags = release_tags("0.2.0", C, V, default_variant=False, build_key="f" * 64)
    assert build_key_tag("f" * 64, V) in tags.immutable


@pytest.mark.parametrize("version", ["0.2", "v0.2", "0.2.0+build.5", "x"])  # v0.2.0 is 0.2.0 (test_first_contact)
def test_bad_versions_are_refused_before_building(version):
    with pytest.raises(ConfigError):
        release_tags(version, C, V, default_variant=True)


def test_tag_longer_than_128_is_refused():
    with pytest.raises(ConfigError, match="at most 128"):
        release_tags("1.0.0-" + "a" * 120, C, V, default_variant=False)


@pytest.mark.parametrize("bump,expected", [("patch", "0.2.4"), ("minor", "0.3.0"), ("major", "1.0.0")])
def test_next_version_bumps_the_highest_release_of_the_variant(bump, expected):
    existing = ["0.2.3-cuda13.1-sm120", "0.2.10-cuda12.8-sm89", "0.2.1-cuda13.1-sm120",
                "0.2.4-nightly.1-cuda13.1-sm120", "latest", "cuda13.1-sm120", "0.2-cuda13.1-sm120"]
    assert next_version(existing, V, bump) == expected


def test_first_version_is_0_1_0():
    assert next_version(["latest"], V) == "0.1.0"
    with pytest.raises(ConfigError, match="--bump"):
        next_version([], V, "huge")  # type: ignore[arg-type]  # (what an untyped caller may pass)


# ------------------------------------------------------------------ one variant name (issue 14)

def _cfg(**values):
    from buildkit.plan.config import load_config

    return load_config(None, env={}, overrides={k: (v, "test") for k, v in values.items()})


def test_tags_of_the_full_target_are_its_own_and_never_the_servers():
    from buildkit.cli.tags import tag_target
    from buildkit.plan.tagset import publication_tags

    server = publication_tags(tag_target(_cfg(**{"build.arch": "sm_120"}), C), "1.2.3")
    full = publication_tags(tag_target(_cfg(**{"build.arch": "sm_120", "build.target": "full"}), C), "1.2.3")
    assert "latest" in server.all and "1.2.3" in server.all
    assert full.immutable == ("1.2.3-cuda13.1-sm120-full", "sha-9054832-cuda13.1-sm120-full")
    assert full.moving == ("1.2-cuda13.1-sm120-full", "1-cuda13.1-sm120-full", "cuda13.1-sm120-full")
    assert not set(full.all) & set(server.all)


def test_build_bake_and_tags_give_a_variant_one_name():
    from buildkit.plan.matrix import matrix_variants
    from buildkit.plan.buildplan import make_plan, make_request
    from buildkit.plan.plantypes import Resolved
    from buildkit.plan.request import SourceFacts

    cfg = _cfg(**{"matrix.archs": ["sm_120", "cpu"], "matrix.cuda_versions": ["13.1"],
                  "matrix.targets": ["server", "full"]})
    variants, _ = matrix_variants(cfg)
    assert [v.key for v in variants] == ["cuda13.1-sm120", "cuda13.1-sm120-full", "cpu", "cpu-full"]
    facts = SourceFacts(url="u", commit=C, commit_time=1, build_number=1, patch_set_sha256="p", patch_names=())
    for v in variants:
        assert v.request.tag_variant == v.key
        plan = make_plan(v.request, Resolved(facts, "t", "1"))
        assert plan.tags[:2] == (f"{v.request.image_name}:{v.key}", f"{v.request.image_name}:sha-9054832-{v.key}")
    assert make_request(_cfg(**{"build.target": "light"})).tag_variant == "cuda13.1-sm120-light"


def test_cli_tags_for_the_full_target(tmp_path):
    from click.testing import CliRunner

    from buildkit.cli.main import main

    env = {k: None for k in __import__("os").environ if k.startswith("LLAMA_BUILDKIT_")}
    with contextlib.chdir(tmp_path):
        out = CliRunner().invoke(main, ["tags", "--release", "1.2.3", "--commit", C, "--target", "full"],
                                 env=env, catch_exceptions=False).stdout  # stderr: the defaults notice
    lines = [line.split()[0].split(":", 1)[1] for line in out.splitlines() if not line.startswith("#")]
    assert lines and all(t.endswith("cuda13.1-sm120-full") for t in lines), out
    assert "latest" not in lines and "1.2.3" not in lines


def test_two_builds_of_one_commit_with_other_flags_keep_a_tag_each():
    from buildkit.plan.buildkey import build_key
    from buildkit.plan.buildplan import make_plan, make_request, with_key_tag
    from buildkit.plan.plantypes import Resolved
    from buildkit.plan.request import SourceFacts
    from buildkit.plan.inputs import BaseImage

    facts = SourceFacts(url="u", commit=C, commit_time=1, build_number=1, patch_set_sha256="p", patch_names=())
    bases = (BaseImage("debian:12", "sha256:" + "1" * 64),)
    tags = []
    for flags in ([], ["-DGGML_LTO=ON"]):
        request = make_request(_cfg(**{"build.arch": "cpu", "build.cmake_args": flags}))
        plan = make_plan(request, Resolved(facts, "t", "1", base_images=bases))
        key = build_key(plan, bases, None)
        assert plan.build_key == key  # the plan is made with its key and its build-key tag
        tags.append(plan.tags)
        assert tags[-1][-1] == f"buun-llama-cpp:bk-{key[:24]}-cpu"
        assert with_key_tag(tags[-1], request, key) == tags[-1]
    a, b = tags
    assert a[:2] == b[:2] == ("buun-llama-cpp:cpu", "buun-llama-cpp:sha-9054832-cpu")  # these move to the later build
    assert a[2] != b[2]  # the build-key tags do not
