"""The settings of buildkit.toml, declared once as typed, frozen sections (pure): one dataclass per table
([source], [image], [build], ...), one field per key with its default, help and choices.

config.py derives its KEYS (the schema, the variables, `buildkit config`, `buildkit init`) from these
fields, and every resolved config carries its values as an `Options` of them, made and checked once
(make_options), so the stages read `cfg.build.arch` with a type mypy knows instead of a string key.

A field's annotation says what the stages get, and the TOML type follows from it: str, bool and int
are themselves; tuple[str, ...] is a TOML list of strings; Path is a string, a path relative to the
folder of buildkit.toml; Path | None is a string too, empty for none, else a path with ~ expanded,
relative to the working directory (as cache.dir and base.cuda_root always were).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from buildkit.core.platforms import DEFAULT_PLATFORM
from buildkit.plan.cpulevels import LEVELS as CPU_LEVELS, described as cpu_levels_described


@dataclass(frozen=True)
class Setting:
    """What a field declares besides its type: the built-in default (as TOML would give it), help, choices."""
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    choice_help: str = ""  # each choice with its one-line description, for the error of a value not among them


def setting(default: Any, help: str, choices: tuple[str, ...] = (), choice_help: str = "") -> Any:
    # No dataclass default: an Options is only ever made from a complete set of resolved values.
    return dataclasses.field(metadata={"setting": Setting(default, help, choices, choice_help)})


@dataclass(frozen=True)
class SourceOptions:
    url: str = setting("https://github.com/spiritbuun/buun-llama-cpp",
                       "git repository of the fork: URL or local path (a mirror works too)")
    branch: str = setting("master", "branch the fork is tracked on")
    commit: str = setting("905483277823858fdec17ff5c3750451cb1b7cdc",
                          "pinned commit: a full 40-hex SHA (or a branch/tag name to build whatever it points at)")
    patch_dir: Path = setting("patches", "patch queue, relative to buildkit.toml")


@dataclass(frozen=True)
class ImageOptions:
    name: str = setting("buun-llama-cpp", "image repository name, optionally with a registry host")
    version: str = setting("0.1.0", "version written to the org.opencontainers.image.version label")
    title: str = setting("buun-llama-cpp", "org.opencontainers.image.title")
    default_variant: str = setting(
        "cuda13.1-sm120", "the variant that also gets the bare version, MAJOR.MINOR and latest tags when published")
    licenses: str = setting("MIT", "org.opencontainers.image.licenses")
    description: str = setting(
        "llama.cpp {target} image of {source} for {variant}",
        "org.opencontainers.image.description ({source}: the fork's URL, {variant}, {target}; empty: no label)")
    url: str = setting("{source}", "org.opencontainers.image.url ({source}: the fork's URL; empty: no label)")
    base_labels: bool = setting(
        True, "label the image with its runtime base image: org.opencontainers.image.base.name and base.digest")


@dataclass(frozen=True)
class BuildOptions:
    arch: str = setting("sm_120", "CUDA architecture (see `buildkit archs`) or cpu")
    cuda_version: str = setting("13.1", "CUDA toolkit version, MAJOR.MINOR")
    target: str = setting("server", "image target", ("server", "full", "light"))
    platform: str = setting(DEFAULT_PLATFORM, "buildx --platform: the platform the image is for")
    build_platform: str = setting(
        "", "the platform the compile runs on (empty: this machine's); when it differs from build.platform the "
        "build cross-compiles, with no emulation")
    emulate_build_platform: bool = setting(
        False, "run a cross build whose build_platform is not the engine's CPU under the engine's emulation (QEMU "
        "through binfmt_misc): many times slower, for tests and CI that prove a build made on another machine")
    no_vmm: bool = setting(
        True, "build with GGML_CUDA_NO_VMM=ON (no libcuda.so.1 dependency); off links against the libcuda stub")
    cpu_level: str = setting(
        "all", "CPU instruction sets: all (every variant, the best loaded at start-up), x86-64-v2/v3/v4, "
        "sapphirerapids, znver4 (amd64 CPUs by name: -march), armv8.2, armv8.6, neoverse-v2 (arm64), native (this "
        "machine; not reproducible elsewhere) or none (baseline, for benchmarks)",
        tuple(CPU_LEVELS), cpu_levels_described())
    jobs: int = setting(0, "parallel compile jobs inside the build (0 = all cores of the builder)")
    ccache: bool = setting(
        True, "compile through ccache kept in a BuildKit cache mount (per arch and CUDA version)")
    reproducible: str = setting(
        "auto", "auto: on the containerd image store export through an OCI archive with rewrite-timestamp (same "
        "inputs, same digest); off: plain --load", ("auto", "off"))
    provenance: bool = setting(False, "attach buildx provenance attestations (they carry invocation ids)")
    no_cache: bool = setting(
        False, "run every build step again (buildx --no-cache); the compile reads nothing from the ccache and "
        "writes into a mount of its own (--no-cache empties the mount it is given), so the warm ccache is kept")
    cmake_args: tuple[str, ...] = setting((), "extra -DNAME=VALUE flags for CMake")
    user: str = setting(
        "", "run the image as this user instead of root: NAME or NAME:UID (uid and gid 10001 unless given; "
        "home /home/NAME); empty = root")
    builder: str = setting("", "buildx builder name (empty = the current one)")
    progress: str = setting(
        "auto", "auto: buildkit's live display on a terminal, plain lines elsewhere; "
        "plain, tty, quiet, rawjson: buildx's own --progress", ("auto", "plain", "tty", "quiet", "rawjson"))
    cache_from: tuple[str, ...] = setting(
        (), "buildx --cache-from entries ({variant}: each build's variant and platform, cpu-amd64)")
    cache_to: tuple[str, ...] = setting(
        (), "buildx --cache-to entries ({variant}: each build's variant and platform, cpu-amd64)")
    min_free_gb: int = setting(
        -1, "free disk space (GB) the build's preflight and `buildkit doctor` ask for; -1 = the estimate by variant "
        "kind, made for llama.cpp's whole tree (a cpu build 4 GB, CUDA from wheels 16 GB, CUDA from NVIDIA's images "
        "25 GB); set it lower for a small fork. --min-free-gb overrides it for one command")


@dataclass(frozen=True)
class BaseOptions:
    provider: str = setting(
        "nvidia", "where the CUDA toolkit comes from: nvidia (NVIDIA's cuda images) or wheels (os_image plus "
        "NVIDIA's PyPI wheels, no NVIDIA image needed)", ("nvidia", "wheels"))
    devel_image: str = setting("docker.io/nvidia/cuda:{cuda_version}.0-devel-ubuntu24.04",
                               "build stage image for provider nvidia ({cuda_version} is replaced)")
    runtime_image: str = setting("docker.io/nvidia/cuda:{cuda_version}.0-runtime-ubuntu24.04",
                                 "runtime stage image for provider nvidia ({cuda_version} is replaced)")
    os_image: str = setting("docker.io/library/ubuntu:24.04",
                            "Debian or Ubuntu image for the cpu variant and for provider wheels")
    cuda_root: Path | None = setting(
        "", "provider wheels: a ready CUDA root folder to use instead of downloading the wheels")
    cublas: bool = setting(
        True, "provider wheels: include cuBLAS (llama.cpp links it; a fork that does not may turn it off)")
    apt_snapshot: str = setting(
        "", "Debian bases: install packages from snapshot.debian.org's archive of this date (YYYY-MM-DD or "
        "YYYYMMDDTHHMMSSZ, UTC) instead of the images' own mirrors (empty = the images' mirrors)")


@dataclass(frozen=True)
class MatrixOptions:
    archs: tuple[str, ...] = setting(("sm_120",), "nightly/bake: the architectures of the build matrix")
    cuda_versions: tuple[str, ...] = setting(("13.1",), "nightly/bake: the CUDA versions of the build matrix")
    targets: tuple[str, ...] = setting(("server",), "nightly/bake: the image targets of the build matrix")


@dataclass(frozen=True)
class CacheOptions:
    dir: Path | None = setting("", "cache folder for git mirrors and CUDA roots (empty = XDG cache)")


@dataclass(frozen=True)
class LockOptions:
    path: Path = setting("buildkit.lock", "lock file written after a successful build")


@dataclass(frozen=True)
class SignOptions:
    key_file: Path | None = setting(
        "", "private key (cosign's PEM, `buildkit keys generate`) that signs every digest build --push, push, "
        "nightly and its jobs publish, with its provenance and SBOM attached (empty: LLAMA_BUILDKIT_SIGN_KEY's "
        "PEM if set, else no signing); never put the key itself here")


@dataclass(frozen=True)
class GpuCheckOptions:
    backend: str = setting("CUDA0", "gpu-check: the test-backend-ops backend tested against the CPU (-b)")
    ops: tuple[str, ...] = setting((), "gpu-check: only these ops (-o; empty = every case, minutes on a GPU)")
    known_failures: tuple[str, ...] = setting(
        (), "gpu-check: failing cases that do not fail the check, each \"CASE: reason\" (CASE: the full case "
        "name as test-backend-ops prints it, or an op name for all its cases); the report still names them")
    gpus: str = setting("all", "gpu-check: docker --gpus of its container (all, a count, device=ID; none: no GPU)")
    timeout: int = setting(1800, "gpu-check: seconds test-backend-ops may run")


@dataclass(frozen=True)
class Options:
    """Every setting, resolved and typed: `options.build.arch`."""
    source: SourceOptions
    image: ImageOptions
    build: BuildOptions
    base: BaseOptions
    matrix: MatrixOptions
    cache: CacheOptions
    lock: LockOptions
    sign: SignOptions
    gpu_check: GpuCheckOptions


SECTIONS: dict[str, type] = {f.name: typing.get_type_hints(Options)[f.name] for f in dataclasses.fields(Options)}
_TOML_TYPE = {str: str, bool: bool, int: int, tuple[str, ...]: list, Path: str, Path | None: str}


@dataclass(frozen=True)
class Declared:
    """One key as its section declares it: dotted name, the type the stages get, the TOML type, the rest."""
    name: str
    python_type: Any
    toml_type: type
    setting: Setting


def declared() -> Iterator[Declared]:
    """Every key, in declaration order (the order of `buildkit config` and `buildkit init`)."""
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            yield Declared(f"{section}.{f.name}", hints[f.name], _TOML_TYPE[hints[f.name]], f.metadata["setting"])


_DECLARED = tuple(declared())


def _typed(python_type: Any, value: Any, base_dir: Path) -> Any:
    """A resolved (already schema-checked) value as the type its field declares."""
    if python_type == tuple[str, ...]:
        return tuple(value)
    if python_type is Path:
        return (base_dir / value).resolve()
    if python_type == Path | None:
        return Path(value).expanduser() if value else None
    return value


def make_options(values: Mapping[str, Any], base_dir: Path) -> Options:
    """The typed Options of a complete set of resolved values ({dotted key: value})."""
    sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for key in _DECLARED:
        section, name = key.name.split(".", 1)
        sections[section][name] = _typed(key.python_type, values[key.name], base_dir)
    return Options(**{name: SECTIONS[name](**fields) for name, fields in sections.items()})
