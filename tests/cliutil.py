"""What tests need to run the real `buildkit` CLI in a subprocess."""

from __future__ import annotations

import os


def buildkit_env() -> dict[str, str]:
    """This process's environment without any LLAMA_BUILDKIT_* setting, so a developer's own
    settings never leak into a test; tests then add the ones they mean."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_BUILDKIT_")}
