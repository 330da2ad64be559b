"""build.user: the image runs as a user that is not root (rendered, planned, recorded; the engine test
in tests/engine/test_build_docker.py runs the image)."""

from __future__ import annotations

import re

import pytest

from buildkit.core.errors import ConfigError
from buildkit.cli.reproducespecs import overrides_for
from buildkit.flows.reproduce.record import Recorded
from buildkit.plan.buildkey import key_of
from buildkit.plan.config import load_config
from buildkit.plan.inputs import BaseImage, from_labels
from buildkit.plan.plantypes import plan_inputs
from buildkit.plan.render import render_dockerfile

from test_plan_render import FACTS, plan_for
from test_cross_render import ARM64_ON_AMD64, stages

DEBIAN = (BaseImage("buildkit-test/debian:bookworm", "sha256:" + "cd" * 32),)


def base_stage(text: str) -> list[str]:
    return stages(text)["base"][1]


@pytest.mark.parametrize("overrides", [{"build.arch": "cpu"}, {"build.arch": "sm_120", "base.provider": "wheels"},
                                       {"build.arch": "sm_120"}, {"build.arch": "cpu", **ARM64_ON_AMD64}],
                         ids=["cpu", "wheels", "nvidia", "cpu-cross"])
def test_the_image_runs_as_the_user_by_number_with_a_home(overrides):
    text = render_dockerfile(plan_for(**overrides, **{"build.user": "llama"}))
    assert re.findall(r"^USER (\S+)$", text, re.M) == ["10001:10001"]  # numeric: runAsNonRoot can check it
    assert "ENV HOME=/home/llama" in text
    assert "llama:x:10001:10001::/home/llama:/usr/sbin/nologin >>" in text
    assert "USER" in base_stage(text)  # every target (server, light, full) inherits it
    assert "useradd" not in text  # dated /etc/shadow entries and logs: digests would differ


def test_root_unless_asked_and_the_uid_can_be_chosen():
    assert "USER" not in render_dockerfile(plan_for(**{"build.arch": "cpu"}))
    cfg = load_config(None, env={"LLAMA_BUILDKIT_BUILD_USER": "svc:1234", "LLAMA_BUILDKIT_BUILD_BUILD_PLATFORM":
                                 "linux/amd64"})
    from buildkit.plan.buildplan import make_plan, make_request
    from buildkit.plan.plantypes import Resolved
    plan = make_plan(make_request(cfg), Resolved(FACTS, "7" * 64, "9.9.9"))
    assert re.findall(r"^USER (\S+)$", render_dockerfile(plan), re.M) == ["1234:1234"]


@pytest.mark.parametrize("value,message", [
    ("Llama", "is not NAME or NAME:UID"), ("llama:x", "is not NAME or NAME:UID"), ("a b", "is not NAME"),
    ("llama;rm -rf /", "is not NAME"), ("root", "must not be root"), ("llama:0", "must not be root"),
])
def test_a_bad_user_is_one_line_before_any_work(value, message):
    with pytest.raises(ConfigError, match=message) as err:
        plan_for(**{"build.user": value})
    assert "\n" not in str(err.value)


def test_the_user_is_an_input_recorded_keyed_and_reproduced():
    plain = plan_inputs(plan_for(**{"build.arch": "cpu"}), DEBIAN)
    user = plan_inputs(plan_for(**{"build.arch": "cpu", "build.user": "llama"}), DEBIAN)
    assert user.user == "llama:10001" and plain.user == ""
    assert key_of(user) != key_of(plain)
    assert "user" not in plain.record()  # the labels of images built without it stay as they were
    assert from_labels(user.to_labels(key_of(user)), "image x") == user
    rec = Recorded(origin="lock", inputs=user, image_name="x/y", image_digest="")
    assert overrides_for(rec)["build.user"] == ("llama:10001", "recorded")
