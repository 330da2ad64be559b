"""Creating a container when containerd lost a snapshot under the image for a moment, and running one to
its end with all of its output.

With the containerd image store, creating a container unpacks the image's layers into snapshots when
they are not unpacked yet. containerd's garbage collector can delete a snapshot the unpack is about to
build on when another image that shares it is removed at that moment (containerd/containerd#3787), and
the create fails with `parent snapshot sha256:... does not exist: not found`, although every layer of
the image is still in the content store. A second create unpacks the chain again. So a create that fails
so is tried once more, a second later; any other failure, and a second one, go to the caller as they are.

`run_to_end` attaches before the start and reads the stream to its end, as `docker run` does. Under load
the engine has still closed that stream without a byte of a program that printed (verify's `--version`:
exit 0, no output, in a cold CI run beside two other workers); a container that exited and gave the
stream nothing is asked for its logs, which the engine keeps until the container is removed.
"""

from __future__ import annotations

import threading
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


def run_to_end(client: Any, image: str, entrypoint: list[str], args: list[str], *, timeout: float,
               env: dict[str, str], device_requests: Any) -> tuple[int, str]:
    """(exit status, stdout and stderr) of a container of image, removed afterwards; no network."""
    container = create_container(client, image, entrypoint=entrypoint, command=args, network_disabled=True,
                                 environment=env, device_requests=device_requests)
    try:
        stream, chunks = container.attach(stdout=True, stderr=True, stream=True, logs=True), []
        reader = threading.Thread(target=lambda: chunks.extend(stream), daemon=True)
        reader.start()
        container.start()
        result = container.wait(timeout=timeout)
        reader.join(timeout=60)
        output = b"".join(chunks)
        if not output:  # the attached stream gave nothing: what the engine logged
            output = container.logs(stdout=True, stderr=True)
        return int(result.get("StatusCode", 1)), output.decode(errors="replace")
    finally:
        container.remove(force=True)
