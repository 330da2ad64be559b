"""`buildkit init`: a starting project in a folder: buildkit.toml (commented, generated from the schema:
plan/starter.py) with the fork's current head pinned, and an empty patches/ folder.

Everything that can be checked without the network is checked first (the file is generated, parsed and
planned as `buildkit build` would); then one `git ls-remote` asks the fork for its HEAD; only then is
anything written. An unreachable fork, a bad arch or image name, or an existing buildkit.toml (without
force) is one error line and leaves the folder as it was.
"""

from __future__ import annotations

from typing import Any
from dataclasses import dataclass
from pathlib import Path

from buildkit.core.errors import ConfigError
from buildkit.core.urlcreds import split_credentials
from buildkit.core.wholefile import write_whole
from buildkit.flows.nightly.run import ls_remote_default, normalise_url
from buildkit.plan.archs import get_arch
from buildkit.plan.config import CONFIG_FILE, KEY_BY_NAME
from buildkit.plan.starter import checked_starter_toml, toml_value
from buildkit.plan.tags import check_repository, target_variant, variant
from buildkit.source.buildnotes import fork_proposal


@dataclass(frozen=True)
class Initialised:
    config: Path
    patches: Path
    url: str
    branch: str
    commit: str
    image: str
    arch: str
    credentials_dropped: bool
    cmake_args: tuple[str, ...] = ()   # proposed from the fork's build notes (set, unless declined)
    cmake_args_source: str = ""
    cmake_args_notes: tuple[str, ...] = ()  # the measured cost of each proposed flag that has one
    cmake_args_declined: bool = False       # --no-fork-flags: written commented out
    dflash: str = ""                         # where the fork shows DFlash: the dflash profile was written
    local_image: str = ""                    # what `buildkit build` tags locally (image:variant)


def _chosen(url: str, branch: str, commit: str, image: str, arch_name: str) -> dict[str, Any]:
    arch = get_arch(arch_name)  # an unknown arch: one line naming the choices
    cuda = KEY_BY_NAME["build.cuda_version"].default
    default_variant = target_variant(variant(arch, cuda), KEY_BY_NAME["build.target"].default)
    return {"source.url": url, "source.branch": branch, "source.commit": commit, "source.patch_dir": "patches",
            "image.name": image, "image.title": image.rsplit("/", 1)[-1], "image.default_variant": default_variant,
            "build.arch": arch.name, "matrix.archs": [arch.name]}


def init_project(folder: Path, *, fork: str | None = None, image: str | None = None, arch: str | None = None,
                 force: bool = False, fork_flags: bool = True, timeout: float = 120) -> Initialised:
    folder = Path(folder).resolve()
    config = folder / CONFIG_FILE
    patches = folder / "patches"
    if (config.exists() or config.is_symlink()) and not force:
        raise ConfigError(f"{config} exists already; edit it, or pass --force to write a new one over it")
    if patches.exists() and not patches.is_dir():
        raise ConfigError(f"{patches} exists and is not a folder; move it away first")
    given = fork or KEY_BY_NAME["source.url"].default
    if not given.strip() or given.startswith("-"):
        raise ConfigError(f"--fork {given!r} is not a repository URL or path")
    url, auth = normalise_url(given), split_credentials(given)[1]
    image = image or KEY_BY_NAME["image.name"].default
    check_repository(image)
    arch = arch or KEY_BY_NAME["build.arch"].default
    placeholder = KEY_BY_NAME["source.commit"].default
    checked_starter_toml(config, _chosen(url, KEY_BY_NAME["source.branch"].default, placeholder, image, arch), {})
    branch, commit = ls_remote_default(url, timeout=timeout, auth=auth)
    branch = branch or KEY_BY_NAME["source.branch"].default
    notes = {"source.commit": f"Pinned by `buildkit init`: the head of {branch} then. Move it to build a newer "
                              "commit (a full 40-hex SHA)."}
    chosen = _chosen(url, branch, commit, image, arch)
    proposal = fork_proposal(url, commit, auth=auth, timeout=timeout)
    flags = proposal.flags if proposal else ()
    if proposal is not None and flags:
        said = " ".join([f"Proposed by `buildkit init` from the fork's {proposal.source}: the CUDA flags its build "
                         "notes recommend (they reach the CMake line and the lock's build key).", *proposal.notes()])
        if fork_flags:
            chosen["build.cmake_args"] = list(flags)
            notes["build.cmake_args"] = said + " To leave them out, set cmake_args = []."
        else:
            notes["build.cmake_args"] = (said + f" Left out (--no-fork-flags); to take them: cmake_args = "
                                         f"{toml_value(list(flags))}.")
    dflash = proposal.dflash if proposal else ""
    text = checked_starter_toml(config, chosen, notes, dflash)
    try:
        patches.mkdir(exist_ok=True)
        write_whole(config, text)
    except OSError as exc:
        raise ConfigError(f"cannot write {config}: {exc.strerror or exc}") from None
    return Initialised(config=config, patches=patches, url=url, branch=branch, commit=commit, image=image,
                       arch=chosen["build.arch"], credentials_dropped=auth is not None,
                       cmake_args=flags, cmake_args_source=proposal.source if proposal else "",
                       cmake_args_notes=proposal.notes() if proposal else (), cmake_args_declined=not fork_flags,
                       dflash=dflash, local_image=f"{image}:{chosen['image.default_variant']}")
