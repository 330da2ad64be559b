"""One grammar of image references (buildkit/oci/imageref.py), used by the plan, the tag scheme,
publish, promote and reproduce alike: what one accepts the others accept, and a reference is split
at the same ':' everywhere."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from buildkit.core.errors import BuildkitError, ConfigError, RegistryError
from buildkit.flows.unit.pipeline import Prepared
from buildkit.oci.imageref import (InvalidReference, name_of, names_registry, parse_image_ref, parse_repository,
                                   split_reference, tag_of)
from buildkit.plan.buildplan import make_plan, make_request
from buildkit.plan.plantypes import PlanOptions, Resolved
from buildkit.plan.config import load_config
from buildkit.plan.render import templates_sha256
from buildkit.plan.tags import check_repository, check_tag
from test_parsers_property import SETTINGS, one_line_or_value
from test_plan_render import FACTS

DIGEST = "sha256:" + "ab" * 32


def plan_for(extra=(), **overrides):
    cfg = load_config(None, env={}, overrides={k: (v, "test") for k, v in overrides.items()})
    return make_plan(make_request(cfg), Resolved(FACTS, templates_sha256(), "9.9.9"), PlanOptions(extra_tags=extra))


def test_a_bad_registry_host_is_refused_at_plan_time_as_at_publish_time():
    with pytest.raises(RegistryError, match="not a valid registry"):
        parse_image_ref("-bad.host/app")
    with pytest.raises(ConfigError, match="not a valid repository name.*'-bad.host' is not a valid registry"):
        check_repository("-bad.host/app")
    with pytest.raises(ConfigError, match="image name '-bad.host/app' is not a valid repository name"):
        plan_for(**{"image.name": "-bad.host/app"})
    with pytest.raises(ConfigError, match="base image '-bad.host/debian:12' is not a valid image reference"):
        plan_for(**{"base.provider": "wheels", "base.os_image": "-bad.host/debian:12"})


def test_a_registry_port_is_not_a_tag():
    assert split_reference("127.0.0.1:5000/n/t:x") == ("127.0.0.1:5000/n/t", "x", None)
    assert split_reference("127.0.0.1:5000/n/t") == ("127.0.0.1:5000/n/t", None, None)
    assert split_reference(f"127.0.0.1:5000/n/t:x@{DIGEST}") == ("127.0.0.1:5000/n/t", "x", DIGEST)
    assert tag_of("127.0.0.1:5000/n/t:x") == "x" and name_of("127.0.0.1:5000/n/t:x") == "127.0.0.1:5000/n/t"
    assert name_of(f"127.0.0.1:5000/team/tiny@{DIGEST}") == "127.0.0.1:5000/team/tiny"
    assert name_of("buildkit-test/debian:bookworm") == "buildkit-test/debian"
    ref = parse_image_ref("127.0.0.1:5000/n/t:x")
    assert (ref.registry, ref.repository, ref.tag) == ("127.0.0.1:5000", "n/t", "x")


def test_publishing_keeps_the_extra_tags_of_a_repository_on_a_registry_port():
    """publish re-plans with the release version and keeps --tag's tags: it once split them at the port."""
    plan = plan_for(("x",), **{"image.name": "127.0.0.1:5000/n/t"})
    assert plan.tags[2:3] == ("127.0.0.1:5000/n/t:x",) and plan.tags[3].startswith("127.0.0.1:5000/n/t:bk-")
    prepared = Prepared(plan=plan, rendered=None, source=None, patches=None,  # type: ignore[arg-type]  # unused here
                        cuda_root=None, resolved=Resolved(FACTS, templates_sha256(), "9.9.9"),
                        options=PlanOptions(extra_tags=("x",)))
    again = prepared.replanned(version="1.2.3").plan
    assert again.tags == plan.tags and again.request.version == "1.2.3" and again.build_key == plan.build_key


def test_names_registry():
    assert names_registry("localhost:5000/app") and names_registry("ghcr.io/o/r:t") and names_registry("Host/app")
    assert not names_registry("user/app") and not names_registry("busybox") and not names_registry("app:5000")


def test_a_repository_name_has_no_tag_or_digest():
    assert parse_repository("host:5000/app").name == "host:5000/app"
    for text in ("app:1", f"app@{DIGEST}", "host:5000/app:5000"):
        with pytest.raises(InvalidReference, match="has no tag or digest"):
            parse_repository(text)
        with pytest.raises(ConfigError, match="not a valid repository name"):
            check_repository(text)


def test_tags_are_ascii():
    with pytest.raises(ConfigError, match="not a valid Docker tag"):
        check_tag("é")
    with pytest.raises(RegistryError, match="must be 1-128 letters"):
        parse_image_ref("app:é")


# ------------------------------------------------------------------ properties: one grammar

names = st.text(alphabet="abcAB019.:/_-@[]", max_size=40) | st.text(max_size=30)
tags = st.text(alphabet="abcAB019._-+", min_size=1, max_size=10)


@SETTINGS
@given(text=names)
def test_the_plan_accepts_a_repository_exactly_when_publish_does(text) -> None:
    planned = one_line_or_value(check_repository, text)
    published = one_line_or_value(parse_repository, text)
    assert (planned is None) == (published is None), text
    if published is not None:
        assert planned == text and parse_image_ref(str(published)) == published


@SETTINGS
@given(name=names, tag=tags)
def test_a_tag_is_split_off_where_the_grammar_puts_it(name, tag) -> None:
    try:
        repository = parse_repository(name)
    except BuildkitError:
        return
    ref = one_line_or_value(parse_image_ref, f"{name}:{tag}")
    assert (ref is not None) == (one_line_or_value(check_tag, tag) is not None)
    assert split_reference(f"{name}:{tag}") == (name, tag, None)
    if ref is not None:
        assert ref.tag == tag and ref.name == repository.name
