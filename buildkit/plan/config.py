"""buildkit.toml, LLAMA_BUILDKIT_* variables and CLI overrides, merged into one resolved config.

Precedence, lowest first: built-in default < buildkit.toml < environment < command line.
Every key is declared once, as a typed field of its section (options.py), and KEYS is derived from
those; the file is checked against that schema (plan/schema.py, which checks the [profiles.NAME]
tables too: unknown keys and wrong types are one clear error each), and `buildkit config` shows each
value with where it came from. The resolved config carries the values typed (cfg.build.arch). The
file is parsed once (read_document); the resolved config keeps the document, so profiles.py reads its
tables from it instead of parsing the file again.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from buildkit.core.errors import ConfigError, ArchError
from buildkit.core.boundedread import MiB, read_regular
from buildkit.plan.archs import default_platform, get_arch
from buildkit.plan.options import (BaseOptions, BuildOptions, CacheOptions, ImageOptions, LockOptions, MatrixOptions,
                                   Options, SignOptions, SourceOptions, declared, make_options)
from buildkit.plan.schema import check_choice, check_table, check_value, suggestion

SCHEMA_VERSION = 1
CONFIG_FILE = "buildkit.toml"
ENV_PREFIX = "LLAMA_BUILDKIT_"


@dataclass(frozen=True)
class Key:
    name: str  # dotted: section.key
    type: type  # str, bool, int or list (of str)
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    rule: Callable[[Any], str | None] | None = None  # a further check (schema.Field); none of ours has one
    choice_help: str = ""  # the choices with a line each, for the error of a value not among them

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name.upper().replace(".", "_")


# Every key is declared once, as a typed field of its section (options.py); the schema is derived from them.
KEYS: tuple[Key, ...] = tuple(Key(d.name, d.toml_type, list(d.setting.default) if d.toml_type is list
                                  else d.setting.default, d.setting.help, d.setting.choices,
                                  choice_help=d.setting.choice_help) for d in declared())
KEY_BY_NAME: dict[str, Key] = {k.name: k for k in KEYS}
# The LLAMA_BUILDKIT_* variables that are not settings (tests/unit/test_config.py finds every one in the code).
OTHER_VARIABLES: dict[str, str] = {
    ENV_PREFIX + "CONFIG": "the buildkit.toml to read (--config)",
    ENV_PREFIX + "GIT_TIMEOUT": "seconds each git command may take (source/gitcmd.py)",
    ENV_PREFIX + "GIT_USERNAME": "set by buildkit for git only (core/urlcreds.py)",
    ENV_PREFIX + "GIT_PASSWORD": "set by buildkit for git only (core/urlcreds.py)",
    ENV_PREFIX + "DOCKER_CERTS_D": "where registries' TLS files are (oci/registryhttp.py)",
    ENV_PREFIX + "ENGINE_LOCK": "the engine turn's lock file (engine/runner.py)",
    ENV_PREFIX + "REGISTRY_TIMEOUT": "seconds each registry request may take (oci/registryhttp.py)",
    ENV_PREFIX + "REGISTRY_DEADLINE": "seconds all of a command's registry requests may take (oci/registryhttp.py)",
    ENV_PREFIX + "REGISTRY_TRANSFER_DEADLINE":
        "seconds all of a command's blob transfers may take (oci/registryhttp.py)",
    ENV_PREFIX + "INDEX_DEADLINE": "seconds each Python package index request may take (source/pyindex.py)",
    ENV_PREFIX + "CI": "the test suite runs in CI (tests/fixtures_docker.py)",
    ENV_PREFIX + "TEST_CACHE": "the tests' cache of real images (tests/realserver.py)",
    ENV_PREFIX + "DOCKER_DATA_ROOT": "scripts/install-engine.sh",
    ENV_PREFIX + "DOCKERD_LOG": "scripts/install-engine.sh",
    ENV_PREFIX + "SIGN_KEY": "the signing key's PEM text, for a CI secret (release/signkeys.py)",
}
# Tables whose keys are names the user chooses; their own modules read and validate them.
FREE_FORM_SECTIONS = ("profiles",)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class ConfigDocument:
    """buildkit.toml parsed once: its path (None when there is no file) and its TOML tables, unchecked."""
    path: Path | None
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedConfig:
    """The resolved settings: `options` typed (cfg.build.arch, ...), `values` as resolved ({dotted key: value},
    what `buildkit config` shows), `origins` where each came from."""
    values: Mapping[str, Any]
    origins: Mapping[str, str]
    path: Path | None  # the buildkit.toml read, if any
    base_dir: Path = field(default_factory=Path.cwd)  # relative paths resolve against this
    document: ConfigDocument = field(default_factory=lambda: ConfigDocument(None))  # for [profiles.NAME]
    options: Options = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Made again by every dataclasses.replace (a matrix variant's values), so each is checked here, once.
        for key in KEYS:
            check_value(key, self.values[key.name], self.origins.get(key.name, "config"))
        object.__setattr__(self, "options", make_options(self.values, self.base_dir))

    @property
    def source(self) -> SourceOptions:
        return self.options.source

    @property
    def image(self) -> ImageOptions:
        return self.options.image

    @property
    def build(self) -> BuildOptions:
        return self.options.build

    @property
    def base(self) -> BaseOptions:
        return self.options.base

    @property
    def matrix(self) -> MatrixOptions:
        return self.options.matrix

    @property
    def cache(self) -> CacheOptions:
        return self.options.cache

    @property
    def lock(self) -> LockOptions:
        return self.options.lock

    @property
    def sign(self) -> SignOptions:
        return self.options.sign

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def path_value(self, name: str) -> Path:
        relative: str = self.values[name]
        return (self.base_dir / relative).resolve()


def _suggest(name: str) -> str:
    return suggestion(name, KEY_BY_NAME)


def unknown_variables(env: Mapping[str, str], flags: Mapping[str, str] | None = None) -> list[str]:
    """A warning for each LLAMA_BUILDKIT_* variable in env that nothing reads, naming the one meant."""
    known = {name.removeprefix(ENV_PREFIX): name for name in [k.env_var for k in KEYS] + list(OTHER_VARIABLES)}
    warnings = []
    for name in sorted(env):
        rest = name.removeprefix(ENV_PREFIX)
        if name.startswith(ENV_PREFIX) and rest not in known:
            meant = _meant(rest, known, flags or {})
            warnings.append(f"{name} is not a buildkit variable and is ignored"
                            + (f" (did you mean {meant}?)" if meant else ""))
    return warnings


def _meant(rest: str, known: Mapping[str, str], flags: Mapping[str, str]) -> str | None:
    """The variable of the key the flag of that name sets (flags: flag -> dotted key; _CUDA: --cuda's
    build.cuda_version), else the shortest one holding all its words (ARCH: BUILD_ARCH), else the closest."""
    if flags.get(rest.lower()) in KEY_BY_NAME:
        return KEY_BY_NAME[flags[rest.lower()]].env_var
    words = set(rest.split("_"))
    holding = sorted((k for k in known if words <= set(k.split("_"))), key=len)
    close = holding[:1] or difflib.get_close_matches(rest, list(known), n=1)
    return known[close[0]] if close else None


def parse_text(key: Key, text: str, where: str) -> Any:
    """Convert a string from the environment or the command line to the key's type."""
    if key.type is bool:
        low = text.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(f"{where}: {key.name} must be true or false, got {text!r}")
    if key.type is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{where}: {key.name} must be an integer, got {text!r}") from None
    if key.type is list:
        return [part.strip() for part in text.split(",") if part.strip()]
    return check_choice(key, text, where)


def load_toml(path: Path) -> dict[str, Any]:
    """buildkit.toml as TOML, or one ConfigError line naming the file (missing, a folder, not UTF-8,
    not TOML, unreadable)."""
    if Path(path).is_dir():
        raise ConfigError(f"{path}: is a folder; --config (or LLAMA_BUILDKIT_CONFIG) names a buildkit.toml file")
    try:
        return tomllib.loads(read_regular(path, 16 * MiB).decode("utf-8"))  # a FIFO: refused, not waited on
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder; --config (or LLAMA_BUILDKIT_CONFIG) names a buildkit.toml file") \
            from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: the file is not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML: its tables or arrays are nested too deeply") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None


def read_document(path: Path | None) -> ConfigDocument:
    """buildkit.toml parsed (an empty document when there is none), not yet checked."""
    return ConfigDocument(path, load_toml(path) if path is not None else {})


def read_config_file(path: Path | ConfigDocument) -> dict[str, Any]:
    """Schema-check the settings of buildkit.toml (read here unless already a document);
    returns {dotted key: value}."""
    document = path if isinstance(path, ConfigDocument) else read_document(path)
    data = dict(document.data)
    where = str(document.path)
    version = data.pop("schema_version", None)
    if version is None:
        raise ConfigError(f"{where}: schema_version is missing (add `schema_version = {SCHEMA_VERSION}`)")
    if version != SCHEMA_VERSION:
        raise ConfigError(f"{where}: schema_version {version!r} is not supported "
                          f"(this buildkit reads schema {SCHEMA_VERSION})")
    flat: dict[str, Any] = {}
    for section, table in data.items():
        if section in FREE_FORM_SECTIONS:
            continue  # read and checked by its own module
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: unknown key {section!r}{_suggest(section)}; "
                              f"settings live in tables such as [source] and [build]")
        flat.update(check_table(table, KEY_BY_NAME, where, prefix=f"{section}."))
    return flat


def find_config_file(explicit: str | None, env: Mapping[str, str], cwd: Path) -> Path | None:
    """--config, else $LLAMA_BUILDKIT_CONFIG, else ./buildkit.toml if present."""
    chosen = explicit or env.get(ENV_PREFIX + "CONFIG")
    if chosen:
        return Path(chosen)
    candidate = cwd / CONFIG_FILE
    return candidate if candidate.is_file() else None


PLATFORM_FOLLOWS = "default (follows build.arch)"


def platform_for(arch_name: str) -> str:
    """build.platform when nothing sets it: the arch's own (an unknown arch is make_request's error)."""
    try:
        return default_platform(get_arch(arch_name))
    except ArchError:
        default: str = KEY_BY_NAME["build.platform"].default
        return default


def load_config(path: Path | ConfigDocument | None, env: Mapping[str, str] | None = None,
                overrides: Mapping[str, tuple[Any, str]] | None = None,
                cwd: Path | None = None) -> ResolvedConfig:
    """Merge defaults, the file (a path, or the document read from it already), LLAMA_BUILDKIT_*
    variables and CLI overrides.

    `overrides` maps a dotted key to (value, origin), origin being the flag that set it; a string
    value is parsed like an environment value.
    """
    document = path if isinstance(path, ConfigDocument) else read_document(path)
    path = document.path
    env = os.environ if env is None else env
    cwd = Path.cwd() if cwd is None else cwd
    values = {k.name: k.default for k in KEYS}
    origins = {k.name: "default" for k in KEYS}
    if path is not None:
        for name, value in read_config_file(document).items():
            values[name], origins[name] = value, f"{path.name}"
    for key in KEYS:
        if key.env_var in env:
            values[key.name] = parse_text(key, env[key.env_var], key.env_var)
            origins[key.name] = f"env {key.env_var}"
    for name, (value, origin) in (overrides or {}).items():
        given = KEY_BY_NAME.get(name)
        if given is None:
            raise ConfigError(f"{origin}: unknown key {name!r}{_suggest(name)}")
        values[name] = parse_text(given, value, origin) if isinstance(value, str) else check_value(given, value, origin)
        origins[name] = origin
    if origins["build.platform"] == "default":
        values["build.platform"], origins["build.platform"] = platform_for(values["build.arch"]), PLATFORM_FOLLOWS
    base_dir = path.resolve().parent if path is not None else cwd
    return ResolvedConfig(values=values, origins=origins, path=path, base_dir=base_dir, document=document)


def parse_set_option(items: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """--set KEY=VALUE pairs into overrides."""
    out: dict[str, tuple[str, str]] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, for example --set build.jobs=4")
        out[name.strip()] = (value, f"--set {name.strip()}")
    return out
