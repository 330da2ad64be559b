"""engine/containercreate.py: a create that containerd fails with a lost parent snapshot is tried once more;
any other failure, and a second one, reach the caller. (The race itself, containerd's garbage collector
deleting a snapshot under a concurrent unpack, cannot be made to happen on demand: the client here stands
in for docker-py's and answers with the engine's own error text.)"""

from __future__ import annotations

import docker.errors
import pytest

from buildkit.engine import containercreate
from buildkit.engine.containercreate import create_container, lost_snapshot

LOST = ('parent snapshot sha256:5d602b0e5ad7f96a92f07c9880f628bde570a306abc272b290cdf5c511ebc190 '
        'does not exist: not found')


class Containers:
    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls: list[tuple[tuple, dict]] = []

    def create(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        if self.failures:
            raise self.failures.pop(0)
        return "container"


class Client:
    def __init__(self, *failures: Exception) -> None:
        self.containers = Containers(*failures)


@pytest.fixture(autouse=True)
def no_wait(monkeypatch):
    monkeypatch.setattr(containercreate, "RETRY_AFTER", 0.0)


def not_found(text: str) -> docker.errors.NotFound:
    return docker.errors.NotFound("404 Client Error: Not Found", explanation=text)


def test_a_lost_snapshot_is_tried_once_more_with_the_same_arguments():
    client = Client(not_found(LOST))
    assert create_container(client, "img", entrypoint=["/bin/true"]) == "container"
    assert client.containers.calls == [(("img",), {"entrypoint": ["/bin/true"]})] * 2


def test_a_second_loss_and_other_errors_reach_the_caller():
    with pytest.raises(docker.errors.NotFound):
        create_container(Client(not_found(LOST), not_found(LOST)), "img")
    client = Client(not_found("No such image: img"))
    with pytest.raises(docker.errors.NotFound):
        create_container(client, "img")
    assert len(client.containers.calls) == 1
    assert lost_snapshot(not_found(LOST)) and not lost_snapshot(not_found("No such image: img"))


class Container:
    """A container whose attached stream gives `streamed` and whose logs hold `logged`."""

    def __init__(self, streamed: list[bytes], logged: bytes) -> None:
        self.streamed, self.logged, self.removed = streamed, logged, False

    def attach(self, **kwargs):
        return iter(self.streamed)

    def start(self):
        pass

    def wait(self, timeout):
        return {"StatusCode": 0}

    def logs(self, **kwargs):
        return self.logged

    def remove(self, force):
        self.removed = True


class RunClient:
    def __init__(self, container: Container) -> None:
        self.containers = self
        self.container = container

    def create(self, *args, **kwargs):
        return self.container


@pytest.mark.parametrize("streamed,expected", [([b"version: 1 ", b"(abc)\n"], "version: 1 (abc)\n"),
                                               ([], "version: 2 (logged)\n")])
def test_run_to_end_takes_the_stream_and_the_logs_when_the_stream_gave_nothing(streamed, expected):
    from buildkit.engine.containercreate import run_to_end

    container = Container(streamed, b"version: 2 (logged)\n")
    code, output = run_to_end(RunClient(container), "img", ["/app/llama-server"], ["--version"], timeout=5,
                              env={}, device_requests=None)
    assert (code, output) == (0, expected) and container.removed
