"""Shared pieces of the command line: the config options every build command takes, how they
become a resolved configuration, and the one-line error handling. Command modules import these
from here (not from cli.py, which imports the command modules)."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import click

from buildkit.plan.config import find_config_file, load_config, parse_set_option, unknown_variables
from buildkit.core.errors import BuildkitError


# CLI flag -> config key. Each flag overrides buildkit.toml and LLAMA_BUILDKIT_* variables.
FLAG_KEYS = {
    "source": "source.url", "commit": "source.commit", "patches": "source.patch_dir",
    "arch": "build.arch", "cuda": "build.cuda_version", "target": "build.target",
    "platform": "build.platform", "build_platform": "build.build_platform",
    "emulate_build_platform": "build.emulate_build_platform", "cpu_level": "build.cpu_level", "vmm": "build.no_vmm", "jobs": "build.jobs",
    "cmake_arg": "build.cmake_args", "builder": "build.builder", "progress": "build.progress",
    "cache_from": "build.cache_from", "cache_to": "build.cache_to", "provider": "base.provider",
    "os_image": "base.os_image", "devel_image": "base.devel_image", "runtime_image": "base.runtime_image",
    "cuda_root": "base.cuda_root", "image": "image.name", "image_version": "image.version",
    "cache_dir": "cache.dir", "lock": "lock.path", "provenance": "build.provenance", "no_cache": "build.no_cache",
}


def config_options(func):
    """The options shared by every command that resolves a build: each one names its config key."""
    opts = [
        click.option("--config", "config_path", type=click.Path(dir_okay=False),
                     help="buildkit.toml to read (default: ./buildkit.toml, or $LLAMA_BUILDKIT_CONFIG)."),
        click.option("--source", help="Fork repository: URL, local path or mirror [source.url]."),
        click.option("--commit", help="Pinned commit, full 40-hex SHA; a branch or tag builds its head "
                                      "[source.commit]."),
        click.option("--patches", help="Patch queue folder [source.patch_dir]."),
        click.option("--arch", help="CUDA architecture or cpu, see `buildkit archs` [build.arch]."),
        click.option("--cuda", help="CUDA version, MAJOR.MINOR [build.cuda_version]."),
        click.option("--target", type=click.Choice(["server", "full", "light"]), help="Image target [build.target]."),
        click.option("--platform", help="Platform(s) of the image, e.g. linux/arm64, or linux/amd64,linux/arm64 for "
                                        "one index of both; default: the arch's [build.platform]."),
        click.option("--build-platform", help="Where the compile runs (default: this machine); another CPU than "
                                              "--platform's cross-compiles, the same as --platform on another "
                                              "machine emulates [build.build_platform]."),
        click.option("--emulate-build-platform", is_flag=True, default=None,
                     help="For tests and CI: run a cross build whose --build-platform is not this engine's CPU "
                          "under the engine's emulation (QEMU via binfmt_misc, registered beforehand), e.g. an "
                          "arm64 Mac's build of an amd64 image, proven on an amd64 machine; many times slower "
                          "[build.emulate_build_platform]."),
        click.option("--cpu-level", help="CPU instruction sets: all (default), x86-64-v2/v3/v4, armv8.2, armv8.6, "
                                         "native, none [build.cpu_level]."),
        click.option("--no-vmm/--vmm", "vmm", default=None,
                     help="GGML_CUDA_NO_VMM on (default) or off; off links the libcuda stub [build.no_vmm]."),
        click.option("--jobs", type=int, help="Parallel compile jobs, 0 = all cores [build.jobs]."),
        click.option("--cmake-arg", multiple=True, help="Extra -DNAME=VALUE for CMake, repeatable [build.cmake_args]."),
        click.option("--provider", type=click.Choice(["nvidia", "wheels"]),
                     help="CUDA toolkit from NVIDIA images, or from PyPI wheels on --os-image [base.provider]."),
        click.option("--os-image", help="Debian/Ubuntu base for cpu and provider wheels [base.os_image]."),
        click.option("--devel-image", help="Build stage image, provider nvidia [base.devel_image]."),
        click.option("--runtime-image", help="Runtime stage image, provider nvidia [base.runtime_image]."),
        click.option("--cuda-root", help="Ready CUDA root folder for provider wheels [base.cuda_root]."),
        click.option("--image", help="Image repository name [image.name]."),
        click.option("--image-version", help="Version label [image.version]."),
        click.option("--builder", help="buildx builder [build.builder]."),
        click.option("--progress", type=click.Choice(["auto", "plain", "tty", "quiet", "rawjson"]),
                     help="buildx progress output [build.progress]."),
        click.option("--cache-from", multiple=True, help="buildx --cache-from, repeatable [build.cache_from]."),
        click.option("--cache-to", multiple=True, help="buildx --cache-to, repeatable [build.cache_to]."),
        click.option("--provenance/--no-provenance", "provenance", default=None,
                     help="Attach buildx provenance attestations (off by default: they make digests differ) "
                          "[build.provenance]."),
        click.option("--cache-dir", help="Cache folder for git mirrors and CUDA roots [cache.dir]."),
        click.option("--lock", help="Lock file to write [lock.path]."),
        click.option("--set", "set_items", multiple=True, metavar="KEY=VALUE",
                     help="Override any config key, e.g. --set build.jobs=4 (see `buildkit config`)."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


_NOTICED: list[bool] = []  # the defaults notice is said once per process


def defaults_notice(cfg) -> None:
    """On stderr, once: no buildkit.toml was found (and none was named), so the built-in defaults apply."""
    if cfg.path is not None or _NOTICED:
        return
    _NOTICED.append(True)
    from buildkit.core.urlcreds import redact_url
    from buildkit.oci.imageref import InvalidReference, parse_image_ref

    try:
        where = parse_image_ref(cfg["image.name"]).name
    except InvalidReference:
        where = cfg["image.name"]
    click.echo(f"buildkit: no buildkit.toml here; built-in defaults in use (where no flag or variable sets a key): "
               f"fork {redact_url(cfg['source.url'])}, image {cfg['image.name']} ({where} when pushed); "
               "`buildkit init` writes a buildkit.toml", err=True)


def resolve(kwargs: dict, *, notice: bool = True):
    """Pop the config options out of kwargs and resolve the configuration (saying so on stderr, once,
    when no buildkit.toml was found: notice=False for a command that says it itself)."""
    config_path = kwargs.pop("config_path")
    overrides = parse_set_option(kwargs.pop("set_items"))
    for flag, key in FLAG_KEYS.items():
        value = kwargs.pop(flag, None)  # not every command has every flag (--no-cache: build only)
        if value is None or value == ():
            continue
        origin = "--no-vmm/--vmm" if flag == "vmm" else "--" + flag.replace("_", "-")
        overrides[key] = (list(value) if isinstance(value, tuple) else value, origin)
    path = find_config_file(config_path, os.environ, Path.cwd())
    cfg = load_config(path, os.environ, overrides)
    if notice:
        defaults_notice(cfg)
    return cfg


def handle_errors(func):
    """One line and exit 1 for a BuildkitError; for SIGINT, SIGTERM and SIGHUP (core/interrupts.py) one
    line and 128 + the signal. On every way out, the process groups buildkit started are stopped first."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from buildkit.core import children, interrupts

        try:
            with interrupts.as_exceptions():
                try:
                    for line in unknown_variables(os.environ, FLAG_KEYS):
                        click.echo(f"warning: {line}", err=True)
                    return func(*args, **kwargs)
                finally:
                    with interrupts.deferred():
                        children.stop_all()
        except BuildkitError as exc:
            from buildkit.core.urlcreds import redact_text

            click.echo(f"error: {redact_text(str(exc))}", err=True)  # a URL's credentials, never
            sys.exit(1)
        except KeyboardInterrupt as exc:
            click.echo(f"error: {interrupts.describe(exc)}", err=True)
            sys.exit(interrupts.exit_code(exc))
    return wrapper
