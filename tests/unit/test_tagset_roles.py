"""plan/tagset.py: every tag of an artifact from one rule per role; the names are exactly release_tags'."""
import pytest

from buildkit.plan.tags import release_tags
from buildkit.plan.tagset import ROLES, RoleTagSet

C = "905483277823858fdec17ff5c3750451cb1b7cdc"


@pytest.mark.parametrize("version", ["0.1.0", "1.2.3", "v3.4.5", "2.0.0-rc.1", "1.0.1-nightly.20261205.2"])
@pytest.mark.parametrize("variant", ["cpu", "cuda13.1-sm120-full", "cpu-arm64"])
@pytest.mark.parametrize("default", [True, False])
@pytest.mark.parametrize("key", [None, "a" * 64])
def test_the_same_names_in_the_same_order_as_release_tags(version, variant, default, key):
    tags = RoleTagSet.for_build(version, C, variant, default_variant=default, build_key=key)
    old = release_tags(version, C, variant, default_variant=default, build_key=key)
    assert (tags.immutable(), tags.moving()) == (old.immutable, old.moving)
    assert tags.plain() == old


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
