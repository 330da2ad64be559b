"""How an input is written as an image label's text and read back (plan/inputs.py declares which form each
input's label has)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from buildkit.core.errors import InputsError


def oci_created(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(created: str, where: str, name: str) -> int:
    try:
        return int(datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
    except (TypeError, ValueError):
        raise InputsError(f"the created label {created!r} is not a UTC time of the form 2024-01-02T00:00:00Z") \
            from None


def _int(value: Any, where: str, name: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InputsError(f"{where}: the label {name} must be an integer, got {str(value)[:40]!r}") from None


def split_flags(text: str) -> tuple[str, ...]:
    """The flags label back into CMake's arguments: each starts with -D, and a value may hold spaces
    (-DCMAKE_CUDA_FLAGS=-Xcudafe=... -Xcicc=..., a cross CUDA build's), so it is split before each -D."""
    return tuple(a.strip() for a in re.split(r"\s+(?=-D)", text.strip()) if a.strip())


@dataclass(frozen=True)
class LabelForm:
    """How an input is written as a label's text and read back (where, label name for errors)."""
    write: Callable[[Any], str] = str
    read: Callable[[str, str, str], Any] = lambda text, where, name: text


TEXT = LabelForm()
NUMBER = LabelForm(read=_int)
CREATED = LabelForm(oci_created, _epoch)  # SOURCE_DATE_EPOCH as the OCI created time
NONE_WORD = LabelForm(lambda v: v or "none", lambda text, where, name: None if text == "none" else text)
FLAGS = LabelForm(" ".join, lambda text, where, name: split_flags(text))
