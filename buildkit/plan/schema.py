"""One schema checker for buildkit.toml (pure): the settings tables ([source], [build], ...: config.py)
and the [profiles.NAME] tables (profiles.py) declare their keys as fields, key -> type, choices and any
further rule, and are checked here. Each problem is one ConfigError line that says where: an unknown
key (with the key meant), a wrong type, a value not among the choices, a broken rule.

Its type check (JSON_TYPES, by a field's annotation) is also the one of the inputs label (inputs.py KINDS)
and of buildkit.lock's entries (release/lock.py), so all three say a wrong type in the same words."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from buildkit.core.errors import ConfigError



@dataclass(frozen=True)
class JsonType:
    """A value's type as TOML or JSON carries it: its check, and its words in an error."""
    expect: str
    ok: Callable[[Any], bool]


def is_strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# The one type check of what buildkit reads (buildkit.toml, the inputs label, buildkit.lock), by the Python
# annotation of the field it becomes: tuple[str, ...] is a list of strings, and a bool is never an integer.
JSON_TYPES: dict[str, JsonType] = {
    "str": JsonType("a string", lambda v: isinstance(v, str)),
    "int": JsonType("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "bool": JsonType("true or false", lambda v: isinstance(v, bool)),
    "tuple[str, ...]": JsonType("a list of strings", is_strings),
    "dict": JsonType("an object", lambda v: isinstance(v, dict)),
}


def json_type(annotation: str) -> JsonType | None:
    """The check of an annotation ("X | None" also takes null); None for one without a plain JSON form."""
    base = annotation.removesuffix(" | None")
    plain = JSON_TYPES.get(base)
    if plain is None or base == annotation:
        return plain
    return JsonType(plain.expect + " or null", lambda v: v is None or plain.ok(v))


_OF_SETTING = {str: "str", bool: "bool", int: "int", list: "tuple[str, ...]"}  # a Field's type (TOML's)
WANT = {t: JSON_TYPES[name].expect for t, name in _OF_SETTING.items()}


@dataclass(frozen=True)
class Field:
    """One key of a table: its type (str, bool, int or list of str), the values allowed (any when
    empty), and a further rule giving the problem with a well-typed value (None when there is none)."""

    name: str
    type: type
    help: str
    choices: tuple[str, ...] = ()
    rule: Callable[[Any], str | None] | None = None
    choice_help: str = ""


class Spec(Protocol):
    """What the checks read of a key: a Field, or config.Key (which adds a default and a variable)."""

    # Read-only, so a frozen dataclass (Field, Key) is one.
    @property
    def name(self) -> str: ...
    @property
    def type(self) -> type: ...
    @property
    def choices(self) -> tuple[str, ...]: ...
    @property
    def choice_help(self) -> str: ...
    @property
    def rule(self) -> Callable[[Any], str | None] | None: ...


def type_name(value: Any) -> str:
    """A TOML value's type in the user's words."""
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "list",
            dict: "table"}.get(type(value), type(value).__name__)


def suggestion(name: str, known: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest known name, else ``."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_key(name: str, known: Iterable[str], where: str, *, list_known: bool = False) -> ConfigError:
    """The error for a key the schema does not have: the key meant, or (list_known) all of them."""
    known = list(known)
    hint = suggestion(name, known)
    if not hint and list_known:
        hint = f" (keys: {', '.join(known)})"
    return ConfigError(f"{where}: unknown key {name!r}{hint}")


def has_type(field: Spec, value: Any) -> bool:
    return JSON_TYPES[_OF_SETTING[field.type]].ok(value)


def check_choice(field: Spec, value: Any, where: str) -> Any:
    if field.choices and value not in field.choices:
        described = f": {field.choice_help}" if field.choice_help else ""
        raise ConfigError(f"{where}: {field.name} must be one of {', '.join(field.choices)}, got {value!r}{described}")
    return value


def check_value(field: Spec, value: Any, where: str) -> Any:
    """value when the field takes it: its type, then its choices, then its rule."""
    if not has_type(field, value):
        raise ConfigError(f"{where}: {field.name} must be {WANT[field.type]}, got {type_name(value)} {value!r}")
    check_choice(field, value, where)
    problem = field.rule(value) if field.rule else None
    if problem:
        raise ConfigError(f"{where}: {field.name} {problem}")
    return value


def check_table(table: Mapping[str, Any], fields: Mapping[str, Spec], where: str, *, prefix: str = "",
                list_known: bool = False) -> dict[str, Any]:
    """Every key of table checked against fields (named prefix + key there); {name: value}."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = prefix + key
        field = fields.get(name)
        if field is None:
            raise unknown_key(name, fields, where, list_known=list_known)
        out[name] = check_value(field, value, where)
    return out
