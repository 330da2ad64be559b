"""doctor's registry check: the registry of image.name answers and accepts the `docker login` credentials."""

from __future__ import annotations

from collections.abc import Mapping

from buildkit.core.errors import BuildkitError, AuthError, RegistryError
from buildkit.core.check import Check, Status
from buildkit.oci.imageref import names_registry, parse_image_ref
from buildkit.oci.registry import client_for


def check_registry(image_name: str, *, env: Mapping[str, str] | None = None, timeout: float = 10,
                   push: bool = False) -> Check:
    """The registry of image.name answers and lets the stored credentials read the repository.
    Unreachable, it is a warning unless push (`doctor --push`, a check for `build --push`): a build
    without --push never contacts it. Wrong credentials fail either way."""
    try:
        ref = parse_image_ref(image_name)
    except BuildkitError as exc:
        return Check("registry", Status.FAILED, str(exc), "set image.name to [registry/]repository, e.g. "
                     "ghcr.io/you/buun-llama-cpp")
    if not names_registry(image_name):
        return Check("registry", Status.WARNED, f"image.name {image_name!r} names no registry (it would go to "
                     "Docker Hub as docker.io/" + ref.repository + "); not contacted",
                     "to publish, set image.name to REGISTRY/REPOSITORY (ghcr.io/you/name, localhost:5000/name)")
    try:
        with client_for(ref.registry, env, timeout=timeout, retries=0) as client:
            who = client.credentials.describe() if client.credentials else "anonymous"
            client.list_tags(ref.repository)
    except AuthError as exc:
        return Check("registry", Status.FAILED, str(exc), f"`docker login {ref.registry}` with a user that may push to "
                     f"{ref.repository} (buildkit reads the credentials docker stores)")
    except RegistryError as exc:
        reach = f"check that {ref.registry} is up and reachable from here (proxy, TLS CA in " \
                "/etc/docker/certs.d/HOST/ca.crt)"
        if push:
            return Check("registry", Status.FAILED, str(exc), reach + " before `buildkit build --push`")
        return Check("registry", Status.WARNED, str(exc) + "; only a push needs it",
                     reach + " before pushing; `buildkit build` without --push does not need it "
                     "(`doctor --push` makes this a failure)")
    return Check("registry", Status.PASSED, f"{ref.registry} answers; {ref.repository} readable as {who}")
