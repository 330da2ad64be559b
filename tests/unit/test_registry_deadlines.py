"""The registry deadlines the LLAMA_BUILDKIT_REGISTRY_* variables set (pure); the deadlines themselves
are tested against real hostile servers in tests/engine/test_deadlines.py."""

from __future__ import annotations

from typing import Any

import pytest

from buildkit.core.errors import ConfigError
from buildkit.oci.registry import RegistryClient
from buildkit.oci.registryhttp import deadlines_from


def test_the_variables_set_the_client_deadlines():
    env = {"LLAMA_BUILDKIT_REGISTRY_TIMEOUT": "1.5", "LLAMA_BUILDKIT_REGISTRY_DEADLINE": " 20 "}
    assert deadlines_from(env) == {"timeout": 1.5, "deadline": 20.0}
    assert deadlines_from({}) == {}
    deadlines: dict[str, Any] = deadlines_from(env)
    client = RegistryClient("127.0.0.1:1", **deadlines)
    assert (client.timeout, client._requests.seconds, client._transfers.seconds) == (1.5, 20.0, 3600.0)


@pytest.mark.parametrize("value", ["abc", "0", "-3", "inf", "nan", "1e308", "1000001"])
def test_a_deadline_that_is_not_a_positive_number_is_one_line(value):
    with pytest.raises(ConfigError, match=r"LLAMA_BUILDKIT_REGISTRY_TRANSFER_DEADLINE must be a number of seconds "
                                          rf"above 0 and at most 1e\+06, got '{value}'"):
        deadlines_from({"LLAMA_BUILDKIT_REGISTRY_TRANSFER_DEADLINE": value})
