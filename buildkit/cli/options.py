"""Shared pieces of the command line: the config options every build command takes, how they
become a resolved configuration, and the one-line error handling. Command modules import these
from here (not from cli.py, which imports the command modules)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn, ParamSpec, TypeVar, overload

import click

from buildkit.plan.config import (ResolvedConfig, find_config_file, load_config, parse_set_option,
                                  unknown_variables)
from buildkit.core.errors import BuildkitError
from buildkit.plan.cpulevels import LEVELS as CPU_LEVELS

P = ParamSpec("P")
R = TypeVar("R")
FC = TypeVar("FC", bound=Callable[..., Any])
# what click.option gives: a decorator that adds a parameter and returns the same function
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

# --cpu-level: every level on a line of its own (\b: click keeps the lines as they are)
CPU_LEVEL_HELP = "CPU instruction sets [build.cpu_level], all by default:\n\n\b\n" + "\n".join(
    f"{lv.name}: {lv.description}" for lv in CPU_LEVELS.values())


# CLI flag -> config key. Each flag overrides buildkit.toml and LLAMA_BUILDKIT_* variables.
FLAG_KEYS = {
    "source": "source.url", "commit": "source.commit", "patches": "source.patch_dir",
    "arch": "build.arch", "cuda": "build.cuda_version", "target": "build.target",
    "platform": "build.platform", "build_platform": "build.build_platform",
    "emulate_build_platform": "build.emulate_build_platform", "cpu_level": "build.cpu_level", "vmm": "build.no_vmm",
    "jobs": "build.jobs",
    "cmake_arg": "build.cmake_args", "builder": "build.builder", "progress": "build.progress",
    "cache_from": "build.cache_from", "cache_to": "build.cache_to", "provider": "base.provider",
    "os_image": "base.os_image", "devel_image": "base.devel_image", "runtime_image": "base.runtime_image",
    "cuda_root": "base.cuda_root", "image": "image.name", "image_version": "image.version",
    "cache_dir": "cache.dir", "lock": "lock.path", "provenance": "build.provenance", "no_cache": "build.no_cache",
}


# The shared options in the groups `--help` shows them in, after each command's own options.
OPTION_GROUPS = (
    ("source", "Source"), ("variant", "What the image is"), ("bases", "Base images"),
    ("machine", "Where and how it builds"), ("image", "Image name"), ("files", "Config and files"),
)
_GROUP_OF = {
    "config_path": "files", "source": "source", "commit": "source", "patches": "source",
    "arch": "variant", "cuda": "variant", "target": "variant", "platform": "variant", "cpu_level": "variant",
    "vmm": "variant", "cmake_arg": "variant", "build_platform": "machine", "emulate_build_platform": "machine",
    "jobs": "machine", "builder": "machine", "progress": "machine", "cache_from": "machine", "cache_to": "machine",
    "provenance": "machine", "provider": "bases", "os_image": "bases", "devel_image": "bases",
    "runtime_image": "bases", "cuda_root": "bases", "image": "image",
    "cache_dir": "files", "lock": "files", "set_items": "files",
}


class SharedOption(click.Option):
    """An option of config_options: `--help` lists it under its group's heading."""

    def __init__(self, *args: Any, group: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group = group


class BuildkitCommand(click.Command):
    """A command whose `--help` shows its own options first, then the shared ones by group."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # options only: click 8.5 gives an argument a help record too (its name), which click's own layout
        # leaves out of "Options:" and 8.4 never made; the usage line names the arguments
        own = [r for p in self.get_params(ctx) if isinstance(p, click.Option) and not isinstance(p, SharedOption)
               and (r := p.get_help_record(ctx))]
        if own:
            with formatter.section("Options"):
                formatter.write_dl(own)
        for group, heading in OPTION_GROUPS:
            records = [r for p in self.get_params(ctx) if isinstance(p, SharedOption) and p.group == group
                       and (r := p.get_help_record(ctx))]
            if records:
                with formatter.section(heading):
                    formatter.write_dl(records)


def _shared(*decls: str, **attrs: Any) -> tuple[Decorator, str]:
    dest = next((d for d in decls if not d.startswith("-")), decls[0].split("/")[0].lstrip("-").replace("-", "_"))
    return click.option(*decls, cls=SharedOption, group=_GROUP_OF[dest], **attrs), dest


@overload
def config_options(func: FC, *, only: tuple[str, ...] = (), also: tuple[str, ...] = ()) -> FC: ...


@overload
def config_options(func: None = None, *, only: tuple[str, ...] = (),
                   also: tuple[str, ...] = ()) -> Callable[[FC], FC]: ...


def config_options(func: Callable[..., Any] | None = None, *, only: tuple[str, ...] = (),
                   also: tuple[str, ...] = ()) -> Callable[..., Any]:
    """The options shared by every command that resolves a build: each one names its config key. Bare, every
    one; with only=(groups...) those groups' options and the named ones of also=(dest...), so a command
    offers no option that does nothing there (`tags` has no --source)."""
    if func is None:
        return lambda f: config_options(f, only=only, also=also)
    opts = [_shared(*o[0], **o[1]) for o in _SHARED_OPTIONS]
    for opt, dest in reversed(opts):
        if not only or _GROUP_OF[dest] in only or dest in also or dest in ("config_path", "set_items"):
            func = opt(func)
    return func


def _o(*decls: str, **attrs: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return decls, attrs


_SHARED_OPTIONS = [
        _o("--config", "config_path", type=click.Path(dir_okay=False),
                     help="buildkit.toml to read (default: ./buildkit.toml, or $LLAMA_BUILDKIT_CONFIG)."),
        _o("--source", help="Fork repository: URL, local path or mirror [source.url]."),
        _o("--commit", help="Pinned commit, full 40-hex SHA; a branch or tag builds its head "
                                      "[source.commit]."),
        _o("--patches", help="Patch queue folder [source.patch_dir]."),
        _o("--arch", help="CUDA architecture or cpu, see `buildkit archs` [build.arch]."),
        _o("--cuda", help="CUDA version, MAJOR.MINOR [build.cuda_version]."),
        _o("--target", type=click.Choice(["server", "full", "light"]), help="Image target [build.target]."),
        _o("--platform", help="Platform(s) of the image, e.g. linux/arm64, or linux/amd64,linux/arm64 for "
                                        "one index of both; default: the arch's [build.platform]."),
        _o("--build-platform", help="Where the compile runs (default: this machine); another CPU than "
                                              "--platform's cross-compiles, the same as --platform on another "
                                              "machine emulates [build.build_platform]."),
        _o("--emulate-build-platform", is_flag=True, default=None,
                     help="For tests and CI: run a cross build whose --build-platform is not this engine's CPU "
                          "under the engine's emulation (QEMU via binfmt_misc, registered beforehand), e.g. an "
                          "arm64 Mac's build of an amd64 image, proven on an amd64 machine; many times slower "
                          "[build.emulate_build_platform]."),
        _o("--cpu-level", help=CPU_LEVEL_HELP),
        _o("--no-vmm/--vmm", "vmm", default=None,
                     help="GGML_CUDA_NO_VMM on (default) or off; off links the libcuda stub [build.no_vmm]."),
        _o("--jobs", type=int, help="Parallel compile jobs, 0 = all cores [build.jobs]."),
        _o("--cmake-arg", multiple=True, help="Extra -DNAME=VALUE for CMake, repeatable [build.cmake_args]."),
        _o("--provider", type=click.Choice(["nvidia", "wheels"]),
                     help="CUDA toolkit from NVIDIA images, or from PyPI wheels on --os-image [base.provider]."),
        _o("--os-image", help="Debian/Ubuntu base for cpu and provider wheels [base.os_image]."),
        _o("--devel-image", help="Build stage image, provider nvidia [base.devel_image]."),
        _o("--runtime-image", help="Runtime stage image, provider nvidia [base.runtime_image]."),
        _o("--cuda-root", help="Ready CUDA root folder for provider wheels [base.cuda_root]."),
        _o("--image", help="Image repository name [image.name]."),
        _o("--builder", help="buildx builder [build.builder]."),
        _o("--progress", type=click.Choice(["auto", "plain", "tty", "quiet", "rawjson"]),
                     help="What a build shows: auto, on a terminal buildkit's live display (stage, compile bar and "
                          "time left, ccache hits, buildx's step), elsewhere plain lines; plain, buildx's raw lines; "
                          "tty, buildx's own display [build.progress]."),
        _o("--cache-from", multiple=True, help="buildx --cache-from, repeatable; {variant} in it "
           "becomes each build's variant and platform (cpu-amd64) [build.cache_from]."),
        _o("--cache-to", multiple=True, help="buildx --cache-to, repeatable; {variant} in it "
           "becomes each build's variant and platform (cpu-amd64) [build.cache_to]."),
        _o("--provenance/--no-provenance", "provenance", default=None,
                     help="Attach buildx provenance attestations (off by default: they make digests differ) "
                          "[build.provenance]."),
        _o("--cache-dir", help="Cache folder for git mirrors and CUDA roots [cache.dir]."),
        _o("--lock", help="Lock file to write [lock.path]."),
        _o("--set", "set_items", multiple=True, metavar="KEY=VALUE",
                     help="Override any config key, e.g. --set build.jobs=4 (see `buildkit config`)."),
]


def release_option(help_text: str, *, required: bool = False) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """--release X.Y.Z, the version a build is published (or promoted) as, passed on as `version`. A command's
    --version, its name before (`buildkit --version` prints buildkit's own), still works with a warning."""
    def decorate(func: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> R:
            legacy = kwargs.pop("legacy_version", None)
            if legacy is not None:
                if kwargs.get("version") not in (None, legacy):
                    raise click.UsageError("--release and --version name different versions; give --release only")
                click.echo("warning: a command's --version is now --release (`buildkit --version` prints "
                           "buildkit's own version)", err=True)
                kwargs["version"] = legacy
            if required and not kwargs.get("version"):
                raise click.UsageError("Missing option '--release'.")
            return func(*args, **kwargs)

        wrapper = click.option("--version", "legacy_version", hidden=True)(wrapper)
        return click.option("--release", "version", metavar="X.Y.Z",
                            help=help_text + ("  [required]" if required else ""))(wrapper)
    return decorate


_NOTICED: list[bool] = []  # the defaults notice is said once per process


def defaults_notice(cfg: ResolvedConfig) -> None:
    """On stderr, once: no buildkit.toml was found (and none was named), so the built-in defaults apply."""
    if cfg.path is not None or _NOTICED:
        return
    _NOTICED.append(True)
    from buildkit.core.urlcreds import redact_url
    from buildkit.oci.imageref import InvalidReference, parse_image_ref

    try:
        where = parse_image_ref(cfg.image.name).name
    except InvalidReference:
        where = cfg.image.name
    click.echo(f"buildkit: no buildkit.toml here; built-in defaults in use (where no flag or variable sets a key): "
               f"fork {redact_url(cfg.source.url)}, image {cfg.image.name} ({where} when pushed); "
               "`buildkit init` writes a buildkit.toml", err=True)


def resolve(kwargs: dict[str, Any], *, notice: bool = True) -> ResolvedConfig:
    """Pop the config options out of kwargs and resolve the configuration (saying so on stderr, once,
    when no buildkit.toml was found: notice=False for a command that says it itself)."""
    config_path = kwargs.pop("config_path")
    overrides: dict[str, tuple[Any, str]] = parse_set_option(kwargs.pop("set_items"))
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


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """One line and exit 1 for a BuildkitError; for SIGINT, SIGTERM and SIGHUP (core/interrupts.py) one
    line and 128 + the signal. On every way out, the process groups buildkit started are stopped first."""
    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
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

            _fail(redact_text(str(exc)), 1, kwargs, answered=exc.answered)  # a URL's credentials, never
        except KeyboardInterrupt as exc:
            _fail(interrupts.describe(exc), interrupts.exit_code(exc), kwargs)
        except BrokenPipeError:
            _closed_pipe()
        except OSError as exc:  # the system's own (a full disk, a read-only folder) where no stage said more
            from buildkit.core.urlcreds import redact_text

            where = f"{exc.filename}: " if exc.filename else ""
            _fail(redact_text(" ".join(f"{where}{exc.strerror or exc}".split())), 1, kwargs)
    return wrapper


def _closed_pipe() -> NoReturn:
    """The reader of stdout went away (`buildkit config | head`): end quietly, as a program killed by SIGPIPE
    does (141), with stdout pointed at /dev/null so that Python's own flush at exit finds no pipe either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(128 + 13)


def _fail(message: str, code: int, kwargs: Mapping[str, Any], answered: bool = False) -> NoReturn:
    """The one error line on stderr; under --json also {"error", "exit_code"} on stdout, where a script
    reading the JSON looks (unless the command printed its own answer, which holds the error)."""
    click.echo(f"error: {message}", err=True)
    if kwargs.get("as_json") is True and not answered:
        import json

        click.echo(json.dumps({"error": message, "exit_code": code}))
    sys.exit(code)

