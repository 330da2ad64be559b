"""The text of a starting buildkit.toml (pure): `buildkit init` writes it.

Generated from the key declarations in config.py (KEYS), so it never drifts from the schema: every
key gets its help as a comment; the keys init chose are set, every other one is shown commented out
with its built-in default (which is what applies while it stays commented out).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from buildkit.plan.config import KEY_BY_NAME, KEYS, SCHEMA_VERSION, Key, platform_for

WIDTH = 100


def toml_value(value: Any) -> str:
    """A TOML literal of a config value (str, bool, int, list of str)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    text = str(value)
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _comment(text: str) -> list[str]:
    return textwrap.wrap(text, WIDTH - 2, initial_indent="# ", subsequent_indent="# ",
                         break_long_words=False, break_on_hyphens=False)


def _help(key: Key) -> str:
    text = key.help + "."
    if key.choices:
        text += f" One of: {', '.join(key.choices)}."
    return text + f" (variable {key.env_var})"


def starter_toml(chosen: Mapping[str, Any], notes: Mapping[str, str] | None = None) -> str:
    """buildkit.toml with `chosen` ({dotted key: value}) set and every other key commented out at its
    default; notes ({dotted key: text}) adds a comment line above a key (e.g. when a pin was taken)."""
    notes = notes or {}
    lines = ["# buildkit configuration, written by `buildkit init`. Every key can also be set with its",
             "# LLAMA_BUILDKIT_* variable or a flag (precedence: default < this file < variable < flag);",
             "# `buildkit config` shows the resolved values and where each came from. A key left commented",
             "# out keeps the built-in default shown.",
             f"schema_version = {SCHEMA_VERSION}"]
    section = None
    for key in KEYS:
        table, _, name = key.name.partition(".")
        if table != section:
            lines += ["", f"[{table}]"]
            section = table
        lines += _comment(_help(key))
        if key.name in notes:
            lines += _comment(notes[key.name])
        if key.name in chosen:
            lines.append(f"{name} = {toml_value(chosen[key.name])}")
            continue
        default = key.default
        if key.name == "build.platform":  # follows build.arch while unset
            default = platform_for(str(chosen.get("build.arch", KEY_BY_NAME["build.arch"].default)))
            lines += _comment("Unset, it follows build.arch (the arch's first platform).")
        lines.append(f"# {name} = {toml_value(default)}")
    return "\n".join(lines + _server_profile(str(chosen.get("build.arch", KEY_BY_NAME["build.arch"].default)))) + "\n"


def _server_profile(arch: str) -> list[str]:
    """A first runtime profile, `buildkit run --profile server`: llama-server with every layer on the GPU."""
    from buildkit.plan.archs import get_arch

    cuda = get_arch(arch).is_cuda
    return ["", *_comment("Runtime profiles: the llama-server arguments `buildkit run --profile NAME` and `buildkit "
                          "bench` start an image with (README, Runtime profiles). Add one per set-up, e.g. a "
                          "[profiles.dflash] with needs_draft = true and its --spec-type arguments."),
            "[profiles.server]",
            f'description = "llama-server{" with every layer on the GPU" if cuda else ""}"',
            *(['gpus = "all"'] if cuda else []),
            "# model = \"models/model.gguf\"  # a host path, relative to this file; --model overrides it",
            "args = [" + ", ".join(toml_value(a) for a in (["--n-gpu-layers", "99"] if cuda else [])
                                   + ["--ctx-size", "8192", "--jinja"]) + "]"]
