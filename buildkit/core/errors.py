"""buildkit's own exception types.

Every failure a user can cause or meet is one of these; the CLI turns it into one line
(`error: <message>`) and a non-zero exit code. Messages say what failed and what to do.
"""


class BuildkitError(Exception):
    """Base of all errors buildkit reports to the user."""

    # the command printed its own JSON answer before failing (bench's report carries the error and the runs
    # kept): the CLI then adds no second document to stdout under --json (cli/options.py)
    answered: bool = False


class ConfigError(BuildkitError):
    """buildkit.toml, an environment variable or a CLI override is wrong."""


class ArchError(BuildkitError):
    """Unknown architecture, or one the chosen CUDA version cannot build."""


class SourceError(BuildkitError):
    """The source repository or the pinned commit cannot be had."""


class PatchError(BuildkitError):
    """A patch of the queue does not apply."""


class RenderError(BuildkitError):
    """A template cannot be rendered from the plan."""


class CudaRootError(BuildkitError):
    """The CUDA toolkit cannot be laid out from NVIDIA's PyPI wheels."""


class BuildError(BuildkitError):
    """docker buildx is missing, too old, or the build failed."""


class VerifyError(BuildkitError):
    """The built image failed a smoke check."""


class LockError(BuildkitError):
    """buildkit.lock cannot be read or written."""


class RegistryError(BuildkitError):
    """A container registry cannot be reached, refuses a request or answers nonsense."""


class TamperedError(RegistryError):
    """A registry's tag names an image this project cannot prove it published: not the digest its lock recorded
    for the build key, and not signed by its key with a provenance of these inputs (release/ownership.py)."""


class AuthError(RegistryError):
    """A registry (or its token service) wants credentials we do not have, or rejects ours."""


class ImageSourceError(BuildkitError):
    """An image to compare or reproduce cannot be read (archive, local engine or registry)."""


class ReproduceError(BuildkitError):
    """A recorded build cannot be reproduced: an input is missing or does not match its record."""


class InputsError(ReproduceError):
    """A recorded build's inputs (an image's labels, a lock entry) are missing or malformed."""


class BenchError(BuildkitError):
    """A benchmark cannot start, or a run failed (server down, time-out, malformed answer, HTTP error)."""


class BaseImageError(BuildkitError):
    """A base image is neither in the engine nor to be had from its registry."""


class ModelError(BuildkitError):
    """A model file (GGUF) that cannot be read or sized."""
