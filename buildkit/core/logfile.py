"""Reading a log buildkit judges (`gpu-check --log`): line by line, bounded, plain or compressed.

A log comes from elsewhere (a GPU host's backend-ops.log, copied back, often as .xz). It is read the way
core/boundedread.py reads any file buildkit does not own: a regular file only (a FIFO would block until a
writer came, /dev/zero never ends), opened without blocking and checked again on what was opened. Then:

* its first bytes say whether it is compressed: xz, gzip (the standard library's lzma and gzip) or zstd
  (Python 3.14's compression.zstd; an older Python refuses it in one line, saying how to decompress it); the
  xz decoder's memory and zstd's window are capped at 256 MiB (a header may ask for a dictionary of 1.5 GiB);
* at most `limit` bytes of text are read (the decompressed bytes, for a compressed log), so a log of 1 GiB,
  or a small file that decompresses to one, is one line naming the limit, never a MemoryError;
* lines are given one at a time, each cut at MAX_LINE characters (the rest of a longer one is dropped), so
  memory stays at one block and one line whatever the file holds. Bytes that are not UTF-8 are replaced.

Every failure is a LogUnreadable (an OSError) whose text is one line naming the file.
"""

from __future__ import annotations

import codecs
import gzip
import importlib
import io
import lzma
import os
from collections.abc import Iterator
from pathlib import Path

from buildkit.core.boundedread import NotAFile, open_regular, size_text

LOG_LIMIT = 64 << 20  # bytes of text; a full test-backend-ops run on an H200 printed 2.3 MB
MAX_LINE = 8192  # characters of one line (its longest case lines are a few hundred)
XZ_MEMLIMIT = 256 << 20  # bytes the xz decoder may use (xz -9 needs 65 MiB; a header may ask for 1.5 GiB)
_BLOCK = 1 << 20
_MAGIC = {b"\xfd7zXZ\x00": "xz", b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd"}


def _stream_errors() -> tuple[type[Exception], ...]:
    errors: tuple[type[Exception], ...] = (lzma.LZMAError, EOFError, gzip.BadGzipFile, ValueError)
    try:
        return errors + (importlib.import_module("compression.zstd").ZstdError,)
    except (ImportError, AttributeError):
        return errors


_STREAM_ERRORS = _stream_errors()  # what a broken xz, gzip or zstd stream raises


class LogUnreadable(OSError):
    """The log cannot be read within buildkit's rules (not a file, too large, a broken or unknown stream)."""


def _opened(path: Path) -> io.BufferedReader:
    try:
        fd = open_regular(path)  # core/boundedread.py: a regular file, checked before and after it is opened
    except NotAFile as exc:
        raise LogUnreadable(str(exc)) from None
    except OSError as exc:
        raise LogUnreadable(f"cannot read {path}: {exc.strerror or exc}") from None
    return os.fdopen(fd, "rb")


def _xz_blocks(raw: io.BufferedReader) -> Iterator[bytes]:
    """The decompressed blocks of an xz file (its streams one after the other, as lzma.LZMAFile reads them),
    the decoder's memory capped at XZ_MEMLIMIT: a header may ask for a dictionary of 1.5 GiB."""
    pending, first = b"", True
    while True:
        decoder = lzma.LZMADecompressor(memlimit=XZ_MEMLIMIT)
        while not decoder.eof:
            if decoder.needs_input:
                pending = pending or raw.read(_BLOCK)
                if not pending:
                    raise EOFError("Compressed file ended before the end-of-stream marker was reached")
            try:
                out = decoder.decompress(pending, max_length=_BLOCK)
            except lzma.LZMAError:
                if first:
                    raise
                return  # what follows a whole stream and is not one: trailing bytes, as LZMAFile ignores them
            pending, first = b"", False
            if out:
                yield out
        pending = decoder.unused_data.lstrip(b"\0") or raw.read(_BLOCK).lstrip(b"\0")
        if not pending:
            return


def _blocks(path: Path, raw: io.BufferedReader, kind: str) -> Iterator[bytes]:
    """The file's bytes, decompressed where it is compressed, in blocks of at most _BLOCK."""
    if kind == "xz":
        yield from _xz_blocks(raw)
        return
    if kind == "gzip":
        stream: io.BufferedIOBase = gzip.GzipFile(fileobj=raw)  # a window of 32 KiB: no dictionary to cap
    elif kind == "zstd":
        try:
            zstd = importlib.import_module("compression.zstd")  # Python 3.14 and later
        except ImportError:
            raise LogUnreadable(f"{path} is zstd-compressed and this Python has no zstd decompressor (3.14 has one): "
                                f"decompress it first (zstd -d {path}) or give it as .xz or .gz") from None
        window = zstd.DecompressionParameter.window_log_max  # its window capped as xz's dictionary is
        stream = zstd.ZstdFile(raw, options={window: XZ_MEMLIMIT.bit_length() - 1})
    else:
        stream = raw
    with stream:
        while block := stream.read(_BLOCK):
            yield block


def log_lines(path: Path | str, limit: int = LOG_LIMIT) -> Iterator[str]:
    """The log's lines (without their line breaks), read as the module's docstring says."""
    path = Path(path)
    with _opened(path) as raw:
        head = raw.read(6)
        raw.seek(0)
        kind = next((k for magic, k in _MAGIC.items() if head.startswith(magic)), "")
        size = os.fstat(raw.fileno()).st_size
        if size > limit:
            raise LogUnreadable(f"{path} is over {size_text(limit)}, the most buildkit reads of a log")
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        line, cut, total = "", False, 0
        try:
            for block in _blocks(path, raw, kind):
                total += len(block)
                if total > limit:
                    raise LogUnreadable(f"{path} holds over {size_text(limit)} of text{f' ({kind})' if kind else ''}, "
                                        "the most buildkit reads of a log")
                pieces = decoder.decode(block).split("\n")
                for piece in pieces[:-1]:
                    yield line if cut else (line + piece)[:MAX_LINE]
                    line, cut = "", False
                if not cut:
                    line = (line + pieces[-1])[:MAX_LINE + 1]
                    cut = len(line) > MAX_LINE
                    line = line[:MAX_LINE]
            rest = decoder.decode(b"", final=True)
            if rest and not cut:
                line = (line + rest)[:MAX_LINE]
            if line:
                yield line
        except _STREAM_ERRORS as exc:
            if "Memory usage limit" in str(exc):
                raise LogUnreadable(f"{path} asks for more than {size_text(XZ_MEMLIMIT)} to decompress (its xz "
                                    "dictionary), the most buildkit gives a log") from None
            raise LogUnreadable(f"{path} is not a whole {kind or 'plain'} stream: {exc}") from None
        except LogUnreadable:
            raise
        except OSError as exc:
            raise LogUnreadable(f"cannot read {path}: {exc.strerror or exc}") from None
