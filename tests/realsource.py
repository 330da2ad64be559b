"""Real llama.cpp source tree for tests, taken from PyPI's llama-cpp-python sdist.

The ``llama-cpp-python`` sdist vendors the full llama.cpp tree (minus built web UI
assets) under ``vendor/llama.cpp``. PyPI is reachable from our test hosts while
GitHub is not, so this is how tests get a real llama.cpp to fork and build.

Facts about the pinned version (0.3.36):

* vendored llama.cpp commit: ``0c1e57098bba43ac29e6e3b677cdceebdd22334f``
  (recorded in the sdist's ``.git/modules/vendor/llama.cpp/HEAD``);
* the vendored tree carries a ``.git`` *file* (a submodule gitlink pointing to
  ``../../.git/modules/vendor/llama.cpp``), which is dangling once extracted
  alone; it is removed here so that git and llama.cpp's build-info.cmake do not
  trip over it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
LLAMA_CPP_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"

_SDIST_NAME = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
_TOP = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"
_VENDOR_PREFIX = PurePosixPath(_TOP, "vendor", "llama.cpp")


def _download_sdist(dl_dir: Path) -> Path:
    sdist = dl_dir / _SDIST_NAME
    if sdist.is_file():
        return sdist
    dl_dir.mkdir(parents=True, exist_ok=True)
    # download into a temporary folder, then rename: a killed download leaves no
    # half-written sdist behind
    with tempfile.TemporaryDirectory(prefix=".pip-", dir=dl_dir) as tmp:
        argv = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary=:all:",
            f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
            "-d",
            tmp,
        ]
        proc = subprocess.run(argv, check=False, capture_output=True, text=True)
        got = Path(tmp) / _SDIST_NAME
        if proc.returncode != 0 or not got.is_file():
            raise RuntimeError(
                f"pip download of llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} failed "
                f"(exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}"
            )
        os.replace(got, sdist)
    return sdist


def _extract_vendor_tree(sdist: Path, dest: Path) -> None:
    """Extract ``vendor/llama.cpp`` from *sdist* into *dest* (which must not exist)."""
    with tarfile.open(sdist, "r:gz") as tar:
        members = []
        for member in tar.getmembers():
            path = PurePosixPath(member.name)
            try:
                rel = path.relative_to(_VENDOR_PREFIX)
            except ValueError:
                continue
            if rel.parts in ((), (".git",)):
                continue  # the directory itself, and the dangling submodule gitlink
            if ".." in rel.parts or not (
                member.isfile() or member.isdir() or member.issym()
            ):
                continue
            member.name = str(rel)
            members.append(member)
        if not members:
            raise RuntimeError(f"{sdist} holds no {_VENDOR_PREFIX}")
        dest.mkdir(parents=True)
        tar.extractall(dest, members=members, filter="tar")


def ensure_llama_cpp_tree(cache_dir: Path) -> Path:
    """Return a folder holding llama.cpp's source tree (no ``.git``), downloading once.

    The sdist is kept in ``cache_dir/sdist/``; the tree is extracted to a temporary
    folder and renamed into place as ``cache_dir/llama.cpp-<version>/``, so if that
    folder exists it is complete and is reused.
    """
    cache_dir = Path(cache_dir)
    tree = cache_dir / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"
    if tree.is_dir():
        return tree
    sdist = _download_sdist(cache_dir / "sdist")
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".llama.cpp-", dir=cache_dir))
    try:
        staged = tmp / "tree"
        _extract_vendor_tree(sdist, staged)
        try:
            os.replace(staged, tree)
        except OSError:
            if not tree.is_dir():  # lost a race with a concurrent caller: fine
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tree
