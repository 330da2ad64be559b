"""The text of a starting buildkit.toml (pure): `buildkit init` writes it.

Generated from the key declarations in config.py (KEYS), so it never drifts from the schema: every
key gets its help as a comment; the keys init chose are set, every other one is shown commented out
with its built-in default (which is what applies while it stays commented out).
"""

from __future__ import annotations

import textwrap
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from buildkit.plan.archs import get_arch
from buildkit.plan.buildplan import make_request
from buildkit.plan.config import KEY_BY_NAME, KEYS, SCHEMA_VERSION, ConfigDocument, Key, load_config, platform_for

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


def starter_toml(chosen: Mapping[str, Any], notes: Mapping[str, str] | None = None, dflash: str = "") -> str:
    """buildkit.toml with `chosen` ({dotted key: value}) set and every other key commented out at its
    default; notes ({dotted key: text}) adds a comment line above a key (e.g. when a pin was taken);
    dflash (where the fork shows DFlash) adds the `dflash` runtime profile."""
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
    arch = str(chosen.get("build.arch", KEY_BY_NAME["build.arch"].default))
    return "\n".join(lines + _server_profile(arch, dflash)) + "\n"


# The DFlash fork's documented set-up (the seed's own buildkit.toml holds the same table; a unit test keeps them
# equal): every layer of both models on the GPU, 32,000 tokens of context, a 256-token draft context.
DFLASH_PROFILE: dict[str, Any] = {
    "description": "DFlash speculative decoding, the documented set-up",
    "gpus": "all",
    "needs_draft": True,
    "args": ["--spec-type", "dflash",
             "--n-gpu-layers", "99", "--n-gpu-layers-draft", "99",
             "--ctx-size", "32000", "--ctx-size-draft", "256",
             "--batch-size", "256", "--ubatch-size", "64",
             "--parallel", "1",
             "--flash-attn", "on",
             "--jinja",
             "--chat-template-kwargs", '{"enable_thinking": false}'],
}
_GPU_ONLY_ARGS = ("--n-gpu-layers", "--n-gpu-layers-draft")  # with their values; left out for a CPU arch
PROFILES_DOC = "docs/bench.md#runtime-profiles"  # buildkit's page on runtime profiles


def checked_starter_toml(path: Path, chosen: Mapping[str, Any], notes: Mapping[str, str] | None = None,
                         dflash: str = "") -> str:
    """starter_toml's text for the file at path, checked the way every command reads it (schema, then the build
    request): a starter that no command could read is never written."""
    text = starter_toml(chosen, notes, dflash)
    make_request(load_config(ConfigDocument(path, tomllib.loads(text)), env={}, overrides={}, cwd=path.parent))
    return text


def _server_profile(arch: str, dflash: str = "") -> list[str]:
    """A first runtime profile, `buildkit run --profile server`: llama-server with every layer on the GPU;
    and for a DFlash fork (dflash: where its tree shows it) the `dflash` profile."""
    cuda = get_arch(arch).is_cuda
    lines = ["", *_comment("Runtime profiles: the llama-server arguments `buildkit run --profile NAME` and `buildkit "
                           f"bench` start an image with (buildkit's {PROFILES_DOC}). Add one per set-up"
                           + (", e.g. a [profiles.dflash] with needs_draft = true and its --spec-type arguments."
                              if not dflash else ".")),
             "[profiles.server]",
             f'description = "llama-server{" with every layer on the GPU" if cuda else ""}"',
             *(['gpus = "all"'] if cuda else []),
             "# model = \"models/model.gguf\"  # a host path, relative to this file; --model overrides it",
             "args = [" + ", ".join(toml_value(a) for a in (["--n-gpu-layers", "99"] if cuda else [])
                                    + ["--ctx-size", "8192", "--jinja"]) + "]"]
    return lines + (_dflash_profile(cuda, dflash) if dflash else [])


def _dflash_profile(cuda: bool, where: str) -> list[str]:
    args = list(DFLASH_PROFILE["args"])
    if not cuda:
        for flag in _GPU_ONLY_ARGS:
            at = args.index(flag)
            del args[at:at + 2]
    lines = ["", *_comment(f"The fork is a DFlash fork ({where}): its documented set-up. `buildkit run --profile "
                           "dflash --model target.gguf --model-draft dflash-draft.gguf`."),
             "[profiles.dflash]",
             f"description = {toml_value(DFLASH_PROFILE['description'])}",
             *([f"gpus = {toml_value(DFLASH_PROFILE['gpus'])}"] if cuda else []),
             f"needs_draft = {toml_value(DFLASH_PROFILE['needs_draft'])}",
             '# model = "models/target.gguf"',
             '# model_draft = "models/dflash-draft.gguf"',
             "args = ["]
    pairs: list[list[str]] = []
    for arg in args:
        if arg.startswith("-") and not (pairs and pairs[-1][-1] == "--chat-template-kwargs"):
            pairs.append([arg])
        else:
            pairs[-1].append(arg)
    lines += ["    " + ", ".join(toml_value(a) for a in pair) + "," for pair in pairs]
    return lines + ["]"]
