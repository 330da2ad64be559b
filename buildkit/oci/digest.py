"""Content digests (pure): the one place a digest is parsed, checked, turned into a file name, and compared
with the bytes it names.

A digest comes from untrusted content (a manifest, an index, a registry's answer) and names a file
(`blobs/<algorithm>/<hex>` of an OCI layout, a cache entry): `Digest.parse` takes only the algorithms the
OCI image spec registers with their exact length of lowercase hex (sha256: 64, sha512: 128), so no
digest can climb out of a folder or name a device. Every blob read is compared with its digest and its
declared size before it is used: a document read whole (`read_bounded`, then `check_bytes`), a stream
through `VerifiedReader`, which never gives more than the declared size (one byte over is the error) and
fails at its end when the bytes are not what the digest says.
"""

from __future__ import annotations

import hashlib
import io
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import IO, Any, cast

from buildkit.core.errors import ImageSourceError

ALGORITHMS = {"sha256": 64, "sha512": 128}  # the OCI image spec's registered algorithms: hex length
MAX_DOCUMENT = 4 << 20  # an index, a manifest, an image config, a page of tags: read whole, never more
_HEX = re.compile(r"[0-9a-f]+")


@dataclass(frozen=True)
class Digest:
    algorithm: str
    hex: str

    @classmethod
    def parse(cls, text: object, where: str = "", error: type[Exception] = ImageSourceError) -> Digest:
        """`algorithm:hex` checked (ALGORITHMS, lowercase hex of the algorithm's length); one line naming
        where otherwise."""
        if isinstance(text, str):
            algorithm, sep, hexpart = text.partition(":")
            if sep and len(hexpart) == ALGORITHMS.get(algorithm, -1) and _HEX.fullmatch(hexpart):
                return cls(algorithm, hexpart)
        shown = repr(text)[:100] if isinstance(text, str) else type(text).__name__
        prefix = f"{where}: " if where else ""
        raise error(f"{prefix}invalid digest {shown} (expected sha256: and 64 lowercase hex digits, "
                    "or sha512: and 128)")

    @classmethod
    def of(cls, data: bytes, algorithm: str = "sha256") -> Digest:
        return cls(algorithm, hashlib.new(algorithm, data).hexdigest())

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.hex}"

    @property
    def short(self) -> str:
        return str(self)[:19]

    def blob_path(self) -> PurePosixPath:
        """Where an OCI layout keeps the blob: blobs/<algorithm>/<hex>."""
        return PurePosixPath("blobs", self.algorithm, self.hex)

    def file_name(self) -> str:
        """A file name for the blob in a flat folder (a cache): <algorithm>-<hex>."""
        return f"{self.algorithm}-{self.hex}"

    def hasher(self) -> Any:  # hashlib's _Hash, not importable for the type checker
        return hashlib.new(self.algorithm)

    def matches(self, data: bytes) -> bool:
        return hashlib.new(self.algorithm, data).hexdigest() == self.hex


def read_bounded(fh: IO[bytes], limit: int, where: str, error: type[Exception] = ImageSourceError) -> bytes:
    """All of fh, reading at most limit + 1 bytes: one byte over is the error naming where and the limit."""
    chunks, got = [], 0
    while got <= limit:
        chunk = fh.read(min(1 << 20, limit + 1 - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    if got > limit:
        raise error(f"{where}: larger than the limit of {limit} bytes")
    return b"".join(chunks)


def check_bytes(data: bytes, digest: Digest, size: int | None, where: str,
                error: type[Exception] = ImageSourceError) -> bytes:
    """data, when it is size bytes (None: any) with digest; one line naming where otherwise."""
    if size is not None and len(data) != size:
        raise error(f"{where}: {len(data)} bytes, not the {size} its descriptor declares")
    if not digest.matches(data):
        raise error(f"{where}: the bytes do not match the digest {digest} "
                    f"(they are {Digest.of(data, digest.algorithm)})")
    return data


class VerifiedReader(io.RawIOBase):
    """A blob's stream that gives at most its declared size and checks its digest at the end.

    Reading past the declared size (one byte more is asked of the source) or reaching the end with other
    bytes than the digest names raises `error`; leaving a `with` block normally reads what is left (a tar
    reader stops at its end marker) and checks it, so a blob is always compared whole before what was made
    of it is used. When the block ends in an error (a broken gzip stream), the rest is checked too, and a
    blob that is not its digest's is the error raised, in place of what the consumer made of its bytes.
    Seekable to its start, for an upload's retry."""

    def __init__(self, fh: IO[bytes], digest: Digest, size: int, where: str,
                 error: type[Exception] = ImageSourceError) -> None:
        super().__init__()
        self.fh, self.digest, self.size, self.where, self.error = fh, digest, size, where, error
        self._hash = digest.hasher()
        self._got = 0
        self._done = False
        self.failure = ""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def _fail(self, what: str) -> Exception:
        self.failure = f"{self.where}: {what}"
        return self.error(self.failure)

    def readinto(self, buffer: Any) -> int:
        if self._done:
            return 0
        view = memoryview(buffer).cast("B")
        want = min(len(view), self.size + 1 - self._got)
        chunk = self.fh.read(want) if want > 0 else b""
        if not chunk:
            self._done = True
            if self._got != self.size:
                raise self._fail(f"{self._got} bytes, not the {self.size} its descriptor declares")
            if self._hash.hexdigest() != self.digest.hex:
                raise self._fail(f"the bytes do not match the digest {self.digest}")
            return 0
        self._got += len(chunk)
        if self._got > self.size:
            self._done = True
            raise self._fail(f"more bytes than the {self.size} its descriptor declares")
        self._hash.update(chunk)
        view[:len(chunk)] = chunk
        return len(chunk)

    def verify(self) -> None:
        """Read what is left (at most the declared size and one byte) and check it all."""
        if self.failure:
            raise self.error(self.failure)
        while self.read(1 << 20):
            pass

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 1 and offset == 0:
            return self._got
        if (offset, whence) != (0, 0):
            raise OSError("a verified blob seeks only to its start")
        self.fh.seek(0)
        self._hash, self._got, self._done, self.failure = self.digest.hasher(), 0, False, ""
        return 0

    def tell(self) -> int:
        return self._got

    def close(self) -> None:
        if not self.closed:
            self.fh.close()
        super().close()

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        try:
            if kind is None:
                self.verify()
            elif issubclass(kind, Exception) and not (self.failure and isinstance(exc, self.error)):
                try:  # what the consumer failed on (a broken gzip stream) may come of bytes that are not the blob's
                    self.verify()
                except self.error:
                    raise self.error(self.failure) from None
        finally:
            self.close()


def verified(fh: IO[bytes], digest: Digest, size: int, where: str,
             error: type[Exception] = ImageSourceError) -> IO[bytes]:
    """fh as a VerifiedReader, typed as the binary file it is used as."""
    return cast(IO[bytes], VerifiedReader(fh, digest, size, where, error))


__all__ = ["ALGORITHMS", "MAX_DOCUMENT", "Digest", "VerifiedReader", "check_bytes", "read_bounded", "verified"]
