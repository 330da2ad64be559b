"""What llama-server's arguments decide about GPU memory (pure): context sizes, layers offloaded, KV cache
types, batch sizes, parallel slots, flash attention, the speculative type; with the DFlash fork's defaults.

Read from the fork's common/arg.cpp and common/common.h at 1c4788192: the options' spellings (every alias),
their defaults (context 0 = the model's training context, 2048/512 batch/ubatch, f16 KV, `-ngl` auto,
`-np` auto = 4 slots for llama-server) and the DFlash defaults its argument parser applies when
`--spec-type dflash` is given and the option is not (draft context 256, batch 256, ubatch 64).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from buildkit.core.errors import ConfigError

KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1",
            "turbo2", "turbo3", "turbo4", "turbo3_tcq", "turbo2_tcq")  # kv_cache_types of arg.cpp
AUTO_SLOTS = 4  # llama-server's -np -1 (auto)
FlashAttn = Literal["on", "off", "auto"]

_OPTIONS: dict[str, tuple[str, ...]] = {
    "ctx": ("-c", "--ctx-size"),
    "ctx_draft": ("--spec-draft-ctx-size", "-cd", "--ctx-size-draft"),
    "gpu_layers": ("-ngl", "--gpu-layers", "--n-gpu-layers"),
    "gpu_layers_draft": ("--spec-draft-ngl", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"),
    "cache_k": ("-ctk", "--cache-type-k"),
    "cache_v": ("-ctv", "--cache-type-v"),
    "cache_k_draft": ("--spec-draft-type-k", "-ctkd", "--cache-type-k-draft"),
    "cache_v_draft": ("--spec-draft-type-v", "-ctvd", "--cache-type-v-draft"),
    "batch": ("-b", "--batch-size"),
    "ubatch": ("-ub", "--ubatch-size"),
    "parallel": ("-np", "--parallel"),
    "flash_attn": ("-fa", "--flash-attn"),
    "spec_type": ("--spec-type",),
}
_FLAGS = {"no_kv_offload": ("-nkvo", "--no-kv-offload")}
_BY_SPELLING = {alias: key for key, aliases in _OPTIONS.items() for alias in aliases}


@dataclass(frozen=True)
class ServerSettings:
    ctx: int | None = None              # None: the model's training context
    ctx_draft: int | None = None        # None: the target's context
    gpu_layers: int | None = None       # None: every layer (all, auto, or not given)
    gpu_layers_draft: int | None = None
    cache_k: str = "f16"
    cache_v: str = "f16"
    cache_k_draft: str = "f16"
    cache_v_draft: str = "f16"
    batch: int = 2048
    ubatch: int = 512
    parallel: int = AUTO_SLOTS
    flash_attn: FlashAttn = "auto"
    spec_type: str = "none"
    kv_offload: bool = True
    notes: tuple[str, ...] = ()         # what was assumed ("-ngl auto: counted as every layer")

    @property
    def physical_batch(self) -> int:
        return min(self.batch, self.ubatch)


def _int(option: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"llama-server argument {option} {value!r}: expected a number") from None


def _layers(option: str, value: str, notes: list[str]) -> int | None:
    if value == "all":
        return None
    if value == "auto":
        notes.append(f"{option} auto: counted as every layer (llama-server's --fit may offload fewer)")
        return None
    n = _int(option, value)
    if n < 0:
        notes.append(f"{option} {n}: counted as every layer")
        return None
    return n


def parse_server_args(args: Sequence[str]) -> ServerSettings:
    """The settings of llama-server's arguments (the last of an option wins, as in llama.cpp)."""
    given: dict[str, str] = {}
    flags: set[str] = set()
    items = list(args)
    i = 0
    while i < len(items):
        arg = items[i]
        name, eq, inline = arg.partition("=")
        if name in _BY_SPELLING:
            if eq:
                given[_BY_SPELLING[name]] = inline
            elif i + 1 < len(items):
                given[_BY_SPELLING[name]] = items[i + 1]
                i += 1
            else:
                raise ConfigError(f"llama-server argument {name} needs a value")
        elif any(arg in spellings for spellings in _FLAGS.values()):
            flags.add(next(k for k, v in _FLAGS.items() if arg in v))
        i += 1
    notes: list[str] = []
    values: dict[str, object] = {}
    for key in ("cache_k", "cache_v", "cache_k_draft", "cache_v_draft"):
        if key in given:
            if given[key] not in KV_TYPES:
                raise ConfigError(f"llama-server argument {_OPTIONS[key][0]} {given[key]!r}: the fork's KV cache "
                                  f"types are {', '.join(KV_TYPES)}")
            values[key] = given[key]
    for key in ("ctx", "ctx_draft"):
        if key in given:
            n = _int(_OPTIONS[key][0], given[key])
            values[key] = n if n > 0 else None
    for key in ("gpu_layers", "gpu_layers_draft"):
        if key in given:
            values[key] = _layers(_OPTIONS[key][0], given[key], notes)
        elif key == "gpu_layers":
            notes.append("no -ngl: llama-server's default (auto), counted as every layer")
    for key in ("batch", "ubatch"):
        if key in given:
            values[key] = max(1, _int(_OPTIONS[key][0], given[key]))
    if "parallel" in given:
        n = _int("-np", given["parallel"])
        values["parallel"] = n if n > 0 else AUTO_SLOTS
    else:
        notes.append(f"no -np: llama-server's auto, {AUTO_SLOTS} slots")
    if "flash_attn" in given:
        value = given["flash_attn"]
        fa = {"on": "on", "enabled": "on", "true": "on", "1": "on", "off": "off", "disabled": "off",
              "false": "off", "0": "off", "auto": "auto", "-1": "auto"}.get(value)
        if fa is None:
            raise ConfigError(f"llama-server argument -fa {value!r}: expected on, off or auto")
        values["flash_attn"] = fa
    spec_type = given.get("spec_type", "none")
    values["spec_type"] = spec_type
    if spec_type == "dflash":  # arg.cpp's DFlash-safe defaults, for what is not given
        values.setdefault("ctx_draft", 256)
        values.setdefault("batch", 256)
        values.setdefault("ubatch", 64)
    values["kv_offload"] = "no_kv_offload" not in flags
    return ServerSettings(notes=tuple(notes), **values)  # type: ignore[arg-type]
