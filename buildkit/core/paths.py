"""Where buildkit keeps its caches and finds its bundled templates and patches."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The cache root: $LLAMA_BUILDKIT_CACHE_DIR, else $XDG_CACHE_HOME/llama-buildkit, else ~/.cache/llama-buildkit."""
    env = os.environ if env is None else env
    if env.get("LLAMA_BUILDKIT_CACHE_DIR"):
        return Path(env["LLAMA_BUILDKIT_CACHE_DIR"]).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "llama-buildkit"


def _bundled(name: str, inside_name: str) -> Path:
    # In a wheel the top-level folder is shipped inside the package; in a checkout it sits beside it.
    inside = _PACKAGE_DIR / inside_name
    return inside if inside.is_dir() else _PACKAGE_DIR.parent / name


def templates_dir() -> Path:
    return _bundled("templates", "templates")


def bundled_patches_dir() -> Path:
    # not buildkit/patches: that name is the patches.py module
    return _bundled("patches", "bundled_patches")


def templates_sha256(directory: Path | None = None) -> str:
    """Hash of every template file (name and content), so any template change changes it (no Jinja
    needed: a quiet `buildkit nightly` compares it)."""
    directory = directory or templates_dir()
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.j2")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
