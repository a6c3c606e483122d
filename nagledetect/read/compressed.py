"""Captures compressed with gzip, bzip2 or xz, as `tcpdump -z gzip` and log rotation leave them.

Why: an archive of rotated captures is usually compressed, and decompressing thousands of files
by hand first doubles the disk it needs. The compiled core decompresses as it reads; here a
file's format is told from its first bytes (the archive's sniffing, the grouping by size), and
the annotated copy of a compressed capture is written from a decompressed temporary copy
(`DecompressedCopy`), removed once written. A stream cut short (a capture rotated while it was
written, a partial download) gives what it held, and says so.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import struct
import tempfile
import zlib
from collections.abc import Callable
from typing import BinaryIO

from nagledetect.errors import InputError

COMPRESSED_MAGICS = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zX": "xz",
                     b"\x28\xb5\x2f\xfd": "zstd", b"PK\x03\x04": "zip"}
"""How a compressed file starts (at most four bytes of each format's magic), and its format."""
MAGIC_BYTES = 4
"""The bytes read to tell a file's format: a capture's or a compressor's magic."""
OPENERS: dict[str, Callable[[BinaryIO], BinaryIO]] = {
    "gzip": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"),
    "bzip2": bz2.BZ2File,
    "xz": lzma.LZMAFile,
}
"""The formats read here (Python's own modules), each a reader of the compressed file object;
others are refused with the reason."""
UNREAD_COMPRESSION = "decompress it to analyse it (nagledetect reads gzip, bzip2 and xz)"
DAMAGED_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, ValueError)
"""What the decompressors raise on damaged data (bz2's is OSError or ValueError)."""
COPY_CHUNK_BYTES = 1 << 20
"""Decompressed a chunk at a time, each read with `read1`: `read` asks for more until it has
the whole chunk, and a stream cut short then raises and loses what it had decompressed."""
ESTIMATED_RATIO = 4
"""Decompressed bytes per compressed byte, assumed where a format does not say (bzip2, xz):
about what captures of TCP headers compress to. It only steers how a capture is split into
parts and grouped with others."""
GZIP_SIZE_MODULUS = 1 << 32
"""gzip's trailer holds the decompressed size modulo this."""


def compression_of(start: bytes) -> str | None:
    """The compression format of a file that starts with these bytes (its first four), or
    None."""
    for magic, compression in COMPRESSED_MAGICS.items():
        if start.startswith(magic):
            return compression
    return None


def file_compression(path: str) -> str | None:
    """The compression format of the file, from its first bytes (None: not compressed)."""
    return compression_of(first_bytes(path))


def held_start(path: str) -> tuple[str | None, bytes]:
    """The file's compression format (None: not compressed) and the first MAGIC_BYTES of what
    it holds: decompressed when compressed in a format read here (empty when that data is
    damaged), else as they lie."""
    start = first_bytes(path)
    compression = compression_of(start)
    if compression not in OPENERS:
        return compression, start
    try:
        with open(path, "rb") as raw, OPENERS[compression](raw) as stream:
            return compression, stream.read(MAGIC_BYTES)
    except DAMAGED_ERRORS:
        return compression, b""


def first_bytes(path: str) -> bytes:
    """The file's first MAGIC_BYTES, read without a file object (a folder of an archive is
    sniffed a file at a time: 161,700 files took a fifth longer through `open`)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        return os.read(descriptor, MAGIC_BYTES)
    finally:
        os.close(descriptor)


def capture_bytes(path: str) -> int:
    """About how many bytes the capture takes once decompressed (its size when it is not
    compressed; 0 when it cannot be read, which its reader then says): gzip's trailer says it
    modulo 4 GiB, taken as the least such size that is at least half the file (gzip never
    doubles what it stores; a small capture's file is often larger than the capture); other
    formats are estimated. It steers the split into parts, the grouping and the progress line
    only."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb", buffering=0) as handle:
            compression = compression_of(handle.read(MAGIC_BYTES))
            if compression is None:
                return size
            if compression != "gzip" or size < 18:
                return size * ESTIMATED_RATIO
            handle.seek(-4, os.SEEK_END)
            (modulo,) = struct.unpack("<I", handle.read(4))
    except OSError:
        return 0
    least = size // 2
    wraps = max(0, least - modulo + GZIP_SIZE_MODULUS - 1) // GZIP_SIZE_MODULUS
    return modulo + wraps * GZIP_SIZE_MODULUS


class DecompressedCopy:
    """A compressed capture's decompressed copy in the temporary folder (`path`), with
    `cut_short` saying why the stream ended early (None: it ended whole). `remove()` deletes
    it."""

    def __init__(self, path: str, compression: str) -> None:
        if compression not in OPENERS:
            raise InputError(f"{path}: compressed with {compression}: {UNREAD_COMPRESSION}")
        handle, self.path = tempfile.mkstemp(prefix="nagledetect-decompressed-", suffix=".pcap")
        self.cut_short: str | None = None
        try:
            with os.fdopen(handle, "wb") as copy:
                self._copy(path, compression, copy)
        except BaseException:  # a damaged stream, a full disk, Ctrl-C: leave no copy behind
            self.remove()
            raise

    def _copy(self, path: str, compression: str, copy: BinaryIO) -> None:
        try:
            with open(path, "rb") as raw, OPENERS[compression](raw) as stream:
                while chunk := stream.read1(COPY_CHUNK_BYTES):
                    copy.write(chunk)
        except EOFError:
            self.cut_short = f"the {compression} stream ends before its end marker"
        except DAMAGED_ERRORS as error:
            if isinstance(error, OSError) and error.errno is not None:
                raise
            if copy.tell() == 0:
                raise InputError(f"{path}: damaged {compression} data ({error})") from None
            self.cut_short = f"damaged {compression} data ({error})"

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
