"""The header of a GGUF model file, read within bounds: its metadata and its tensors' names, shapes and types,
never a tensor's data (a 17 GB model is read for a few MB).

Not the `gguf` package (a test extra, against which the tests check this reader): it needs numpy at run
time, maps the whole file and reads every array into numpy, and knows only upstream's tensor types; the
header is a small documented format (ggml's docs/gguf.md: magic, version, counts, typed key-value pairs,
tensor infos), read here in one pass with a limit on everything a hostile file could make large: the
bytes of the header, a string, an array, the counts. Arrays of more than ARRAY_KEPT elements (a
tokenizer's tokens) keep their length only. What is not a GGUF header within those limits is a
ModelError of one line naming the file.

GGML_TYPES holds each tensor type's block size and bytes per block, as the DFlash fork's ggml.c and
ggml-common.h declare them (its TurboQuant KV cache types included), read at 1c4788192.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from buildkit.core.boundedread import NotAFile, open_regular
from buildkit.core.errors import ModelError

MAGIC = b"GGUF"
HEADER_LIMIT = 256 << 20   # bytes of header read at most (a 262k-token vocabulary with merges is about 10 MB)
STRING_LIMIT = 16 << 20    # one string (a chat template is tens of KB)
COUNT_LIMIT = 1 << 24      # tensors, key-value pairs, elements of one array
ARRAY_KEPT = 4096          # arrays up to this many elements are kept (per-layer values); longer ones: length only
MAX_DIMS = 4               # GGML_MAX_DIMS
DEFAULT_ALIGNMENT = 32


@dataclass(frozen=True)
class GgmlType:
    name: str
    block: int       # elements per block
    block_bytes: int  # bytes per block


# ggml_type id -> type (ggml.h's enum; block sizes from ggml-common.h's block structs).
GGML_TYPES: dict[int, GgmlType] = {t_id: GgmlType(name, block, size) for t_id, name, block, size in (
    (0, "f32", 1, 4), (1, "f16", 1, 2), (2, "q4_0", 32, 18), (3, "q4_1", 32, 20), (6, "q5_0", 32, 22),
    (7, "q5_1", 32, 24), (8, "q8_0", 32, 34), (9, "q8_1", 32, 36), (10, "q2_K", 256, 84), (11, "q3_K", 256, 110),
    (12, "q4_K", 256, 144), (13, "q5_K", 256, 176), (14, "q6_K", 256, 210), (15, "q8_K", 256, 292),
    (16, "iq2_xxs", 256, 66), (17, "iq2_xs", 256, 74), (18, "iq3_xxs", 256, 98), (19, "iq1_s", 256, 50),
    (20, "iq4_nl", 32, 18), (21, "iq3_s", 256, 110), (22, "iq2_s", 256, 82), (23, "iq4_xs", 256, 136),
    (24, "i8", 1, 1), (25, "i16", 1, 2), (26, "i32", 1, 4), (27, "i64", 1, 8), (28, "f64", 1, 8),
    (29, "iq1_m", 256, 56), (30, "bf16", 1, 2), (34, "tq1_0", 256, 54), (35, "tq2_0", 256, 66),
    (39, "mxfp4", 32, 17), (40, "nvfp4", 64, 36), (41, "q1_0", 128, 18),
    # the DFlash fork's TurboQuant KV cache types (block_turbo*: a half norm and packed indices)
    (42, "turbo3", 32, 14), (43, "turbo4", 128, 66), (44, "turbo2", 32, 10),
    (45, "turbo3_tcq", 128, 52), (46, "turbo2_tcq", 128, 36),
)}
TYPE_BY_NAME = {t.name: t for t in GGML_TYPES.values()}


def row_bytes(type_name: str, elements: int) -> int:
    """ggml_row_size: the bytes of `elements` values of a type (a whole number of its blocks)."""
    kind = TYPE_BY_NAME[type_name]
    return -(-elements // kind.block) * kind.block_bytes


@dataclass(frozen=True)
class ArrayLength:
    """An array too long to keep (a tokenizer's tokens): its element type and length."""

    element_type: int
    length: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    type_id: int
    offset: int

    @property
    def type(self) -> GgmlType:
        return GGML_TYPES[self.type_id]

    @property
    def nbytes(self) -> int:
        rows = 1
        for n in self.shape[1:]:
            rows *= n
        return rows * row_bytes(self.type.name, self.shape[0])


@dataclass(frozen=True)
class GgufHeader:
    path: str
    version: int
    metadata: dict[str, Any]  # scalars, strings, short lists; ArrayLength for long arrays
    tensors: tuple[TensorInfo, ...]
    file_size: int

    @property
    def arch(self) -> str:
        value = self.metadata.get("general.architecture")
        if not isinstance(value, str) or not value:
            raise ModelError(f"{self.path}: the GGUF header names no general.architecture")
        return value

    def key(self, name: str, default: Any = None) -> Any:
        """metadata `ARCH.name` (the architecture's keys), else default."""
        return self.metadata.get(f"{self.arch}.{name}", default)


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class _Reader:
    """Reads the header from a file object, never past HEADER_LIMIT bytes."""

    def __init__(self, stream: BinaryIO, path: str) -> None:
        self.stream, self.path, self.read_bytes = stream, path, 0

    def fail(self, why: str) -> ModelError:
        return ModelError(f"{self.path} is not a GGUF model buildkit can read: {why}")

    def take(self, n: int) -> bytes:
        if self.read_bytes + n > HEADER_LIMIT:
            raise self.fail(f"its header is over {HEADER_LIMIT >> 20} MiB")
        data = self.stream.read(n)
        if len(data) != n:
            raise self.fail("it ends inside its header")
        self.read_bytes += n
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self, what: str) -> int:
        n = int(self.unpack("<Q"))
        if n > COUNT_LIMIT:
            raise self.fail(f"{n:,} {what} (at most {COUNT_LIMIT:,} are read)")
        return n

    def string(self) -> str:
        n = int(self.unpack("<Q"))
        if n > STRING_LIMIT:
            raise self.fail(f"a string of {n:,} bytes")
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            element = int(self.unpack("<I"))
            if element == _ARRAY:
                raise self.fail("an array of arrays")
            n = self.count("array elements")
            if element not in _SCALARS and element != _STRING:
                raise self.fail(f"an array of value type {element}")
            if n > ARRAY_KEPT:
                if element == _STRING:
                    for _ in range(n):
                        self.string()
                else:
                    self.take(n * struct.calcsize(_SCALARS[element]))
                return ArrayLength(element, n)
            return [self.value(element) for _ in range(n)]
        raise self.fail(f"a value of type {kind}")


def _open_regular(path: str) -> int:
    """A descriptor of path, a regular file (core/boundedread.open_regular: a FIFO or a device is refused before
    it is opened)."""
    try:
        return open_regular(path)
    except NotAFile:
        raise ModelError(f"{path} is not a regular file; a model is read from a file") from None
    except FileNotFoundError:
        raise ModelError(f"model file {path} does not exist") from None
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_header(path: Path | str) -> GgufHeader:
    """The GGUF header of path: its metadata and tensor infos (little-endian GGUF v2 or v3)."""
    where = str(path)
    fd = _open_regular(where)
    with os.fdopen(fd, "rb", buffering=1 << 20) as stream:
        reader = _Reader(stream, where)
        if reader.take(4) != MAGIC:
            raise reader.fail("it does not start with GGUF")
        version = int(reader.unpack("<I"))
        if version not in (2, 3):
            raise reader.fail(f"GGUF version {version} (2 and 3 are read; a big-endian file reads as another)")
        n_tensors, n_kv = reader.count("tensors"), reader.count("metadata keys")
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = reader.string()
            metadata[key] = reader.value(int(reader.unpack("<I")))
        tensors = []
        for _ in range(n_tensors):
            name = reader.string()
            dims = int(reader.unpack("<I"))
            if not 1 <= dims <= MAX_DIMS:
                raise reader.fail(f"tensor {name!r} has {dims} dimensions")
            shape = tuple(int(reader.unpack("<Q")) for _ in range(dims))
            type_id, offset = int(reader.unpack("<I")), int(reader.unpack("<Q"))
            if type_id not in GGML_TYPES:
                raise reader.fail(f"tensor {name!r} has type {type_id}, which buildkit does not know")
            if shape[0] % GGML_TYPES[type_id].block:
                raise reader.fail(f"tensor {name!r}: {shape[0]} values per row is not whole blocks of its type")
            tensors.append(TensorInfo(name, shape, type_id, offset))
        size = os.fstat(stream.fileno()).st_size
    return GgufHeader(where, version, metadata, tuple(tensors), size)
