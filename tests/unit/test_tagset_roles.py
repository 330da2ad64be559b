"""plan/tagset.py: every tag of an artifact from one rule per role; the names are exactly those of the scheme
before roles (release_tags as it was written by hand, kept below as the reference), and publishing goes by role."""
import pytest

from buildkit.core.errors import ConfigError

from buildkit.plan.tags import TagSet, build_key_tag, check_tag, parse_version
from buildkit.plan.tagset import ROLES, RoleTagSet, release_tags


def scheme_before_roles(version: str, commit: str, variant_name: str, *, default_variant: bool,
                        build_key: str | None = None) -> TagSet:
    """release_tags of buildkit 0.3 (plan/tags.py before issue 40), the names users' registries hold."""
    v = parse_version(version)
    immutable = [f"{v}-{variant_name}"]
    moving: list[str] = []
    if v.prerelease:
        if str(v.prerelease).split(".")[0] == "nightly":
            moving.append(f"nightly-{variant_name}")
    else:
        immutable.append(f"sha-{commit[:7]}-{variant_name}")
        moving.append(f"{v.major}.{v.minor}-{variant_name}")
        if v.major > 0:
            moving.append(f"{v.major}-{variant_name}")
        moving.append(variant_name)
        if default_variant:
            immutable.append(str(v))
            moving.append(f"{v.major}.{v.minor}")
            if v.major > 0:
                moving.append(str(v.major))
            moving.append("latest")
    if build_key:
        immutable.append(build_key_tag(build_key, variant_name))
    return TagSet(immutable=tuple(check_tag(t) for t in immutable), moving=tuple(check_tag(t) for t in moving))

C = "905483277823858fdec17ff5c3750451cb1b7cdc"


@pytest.mark.parametrize("version", ["0.1.0", "1.2.3", "v3.4.5", "2.0.0-rc.1", "1.0.1-nightly.20261205.2"])
@pytest.mark.parametrize("variant", ["cpu", "cuda13.1-sm120-full", "cpu-arm64"])
@pytest.mark.parametrize("default", [True, False])
@pytest.mark.parametrize("key", [None, "a" * 64])
def test_the_same_names_in_the_same_order_as_release_tags(version, variant, default, key):
    tags = RoleTagSet.for_build(version, C, variant, default_variant=default, build_key=key)
    old = scheme_before_roles(version, C, variant, default_variant=default, build_key=key)
    assert (tags.immutable(), tags.moving()) == (old.immutable, old.moving)
    new = release_tags(version, C, variant, default_variant=default, build_key=key)
    assert (new.immutable, new.moving) == (old.immutable, old.moving)
    assert all(new.role(t) in ROLES for t in new.all)  # every tag publishing gets has its role


def test_a_tag_set_keeps_its_roles_when_cut_or_extended():
    tags = release_tags("1.2.3", C, "cpu", default_variant=True, build_key="b" * 64)
    key = "bk-" + "b" * 24 + "-cpu"
    assert tags.role(key) == "build_key" and tags.role("sha-9054832-cpu") == "sha" and tags.role("x") == ""
    cut = tags.only((key, "cpu"))
    assert cut.immutable == (key,) and cut.moving == ("cpu",) and cut.role(key) == "build_key"
    more = tags.plus("edge", "extra", immutable=False)
    assert more.moving[-1] == "edge" and more.role("edge") == "extra" and more.plus("edge", "extra",
                                                                                    immutable=False) == more


def test_roles_tell_tags_apart_without_their_names():
    tags = RoleTagSet.for_build("1.2.3", C, "cpu", default_variant=True, build_key="b" * 64, extra=("edge", "cpu"))
    assert [t.name for t in tags.by_role("build_key")] == ["bk-" + "b" * 24 + "-cpu"]
    assert [t.name for t in tags.by_role("sha")] == ["sha-9054832-cpu"]
    assert [t.name for t in tags.by_role("latest")] == ["latest"]
    assert [t.name for t in tags.by_role("variant")] == ["cpu"]
    assert [t.name for t in tags.by_role("extra")] == ["edge"]  # cpu is the variant tag already
    assert {t.role for t in tags.tags} <= set(ROLES) and all(t.immutable for t in tags.by_role("build_key"))
    nightly = RoleTagSet.for_build("1.0.1-nightly.20261205", C, "cpu", default_variant=True)
    assert [t.name for t in nightly.by_role("nightly")] == ["nightly-cpu"] and not nightly.by_role("latest")
    with pytest.raises(ValueError):
        tags.by_role("bk")


def test_tags_asked_for_with_tag_are_moving_and_last_as_the_set_extended_by_hand_had_them():
    """release_tags(extra=...) is the one call that gives a publication's tags (issue 49 item 5): the same
    names, kinds and roles as the scheme's set extended tag by tag, which three call sites wrote out before."""
    by_hand = release_tags("1.2.3", C, "cpu", default_variant=True, build_key="b" * 64)
    for tag in ("edge", "cpu", "edge", "pr-7"):
        by_hand = by_hand.plus(tag, "extra", immutable=False)
    once = release_tags("1.2.3", C, "cpu", default_variant=True, build_key="b" * 64,
                        extra=("edge", "cpu", "edge", "pr-7"))
    assert once == by_hand and once.moving[-2:] == ("edge", "pr-7") and once.role("cpu") == "variant"
    with pytest.raises(ConfigError, match="no\\+plus"):  # a tag asked for is checked as the scheme's are
        release_tags("1.2.3", C, "cpu", default_variant=True, extra=("no+plus",))
