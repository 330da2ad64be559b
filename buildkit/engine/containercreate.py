"""Creating a container when containerd lost a snapshot under the image for a moment.

With the containerd image store, creating a container unpacks the image's layers into snapshots when
they are not unpacked yet. containerd's garbage collector can delete a snapshot the unpack is about to
build on when another image that shares it is removed at that moment (containerd/containerd#3787), and
the create fails with `parent snapshot sha256:... does not exist: not found`, although every layer of
the image is still in the content store. A second create unpacks the chain again. So a create that fails
so is tried once more, a second later; any other failure, and a second one, go to the caller as they are.
"""

from __future__ import annotations

import time
from typing import Any

RETRY_AFTER = 1.0  # seconds


def lost_snapshot(exc: BaseException) -> bool:
    """Whether a docker-py error is containerd's missing parent snapshot."""
    text = str(getattr(exc, "explanation", None) or exc)
    return "parent snapshot" in text and "does not exist" in text


def create_container(client: Any, *args: Any, **kwargs: Any) -> Any:
    """client.containers.create(*args, **kwargs), once more when containerd lost a snapshot under the image."""
    import docker.errors

    try:
        return client.containers.create(*args, **kwargs)
    except docker.errors.NotFound as exc:
        if not lost_snapshot(exc):
            raise
    time.sleep(RETRY_AFTER)
    return client.containers.create(*args, **kwargs)
