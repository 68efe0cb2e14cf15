"""Kafka's four record-batch codecs, as the Java client writes them, sans-IO.

The records of a compressed batch (everything after recordsCount) form one compressed block:

- **gzip** (id 1): a gzip stream (RFC 1952; several concatenated members are accepted on read).
  Written by the stdlib with mtime 0, so output is deterministic.
- **snappy** (id 2): the *xerial* framing of snappy-java's ``SnappyOutputStream``, which Kafka
  uses::

      magic   8 bytes  0x82 'S' 'N' 'A' 'P' 'P' 'Y' 0x00
      version int32 BE (1)         compatible version int32 BE (1)
      then blocks: length int32 BE, followed by that many bytes of raw snappy

  Each block holds at most 32 KiB of input (snappy-java's default block size). Reading also
  accepts a bare raw-snappy stream without the magic, as snappy-java's reader does.
- **lz4** (id 3): the LZ4 *frame* format, as Kafka's ``Lz4BlockOutputStream`` writes it::

      magic 0x184D2204 (LE) | FLG 0x60 | BD 0x40 | HC
      then blocks: size uint32 LE (bit 31 set = stored uncompressed), then the block bytes
      end mark: uint32 0

  FLG 0x60 = version 1 with independent blocks and no checksums; BD 0x40 = 64 KiB maximum block;
  HC = second byte of xxHash32(FLG, BD), which for these fixed values is 0x82. Kafka's reader
  rejects frames with linked blocks, so the writer here builds frames block by block rather than
  using a general-purpose frame encoder. Reading accepts any valid LZ4 frame.
- **zstd** (id 4): a zstd frame (several concatenated frames are accepted on read).

Every decoding failure, whatever the library raised, becomes :class:`CompressionError` (a
``ValueError``). Snappy announces its output size up front, so claims above
``MAX_DECOMPRESSED_BYTES`` are refused before any allocation.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Callable
from enum import IntEnum
from typing import Final

import cramjam

__all__ = [
    "LZ4_BLOCK_BYTES",
    "MAX_DECOMPRESSED_BYTES",
    "SNAPPY_BLOCK_BYTES",
    "XERIAL_MAGIC",
    "CompressionError",
    "compress",
    "decompress",
]

MAX_DECOMPRESSED_BYTES: Final = 1 << 30
SNAPPY_BLOCK_BYTES: Final = 32 * 1024
LZ4_BLOCK_BYTES: Final = 64 * 1024
XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_LZ4_FRAME_HEADER: Final = struct.pack("<I", 0x184D2204) + bytes((0x60, 0x40, 0x82))
_LZ4_END_MARK: Final = b"\x00\x00\x00\x00"
_LZ4_UNCOMPRESSED_BIT: Final = 0x80000000
_INT32: Final = struct.Struct(">i")
_UINT32_LE: Final = struct.Struct("<I")
_GZIP_DEFAULT_LEVEL: Final = 6  # java.util.zip.Deflater.DEFAULT_COMPRESSION, what Kafka uses


class CompressionError(ValueError):
    """Compressed record data could not be decoded (or a codec argument is invalid)."""


class _Codec(IntEnum):
    # Mirrors wire.records.CompressionType; duplicated so this module does not import records.
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# --------------------------------------------------------------------------------------------
# encoding


def _gzip_compress(data: bytes, level: int | None) -> bytes:
    return gzip.compress(
        data, compresslevel=_GZIP_DEFAULT_LEVEL if level is None else level, mtime=0
    )


def _snappy_compress(data: bytes, level: int | None) -> bytes:
    del level  # snappy has no levels
    out = bytearray(_XERIAL_HEADER)
    for start in range(0, len(data), SNAPPY_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + SNAPPY_BLOCK_BYTES]))
        out += _INT32.pack(len(block))
        out += block
    return bytes(out)


def _lz4_compress(data: bytes, level: int | None) -> bytes:
    out = bytearray(_LZ4_FRAME_HEADER)
    for start in range(0, len(data), LZ4_BLOCK_BYTES):
        chunk = data[start : start + LZ4_BLOCK_BYTES]
        if level is None:
            block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        else:
            block = bytes(
                cramjam.lz4.compress_block(
                    chunk, mode="high_compression", compression=level, store_size=False
                )
            )
        # Like Kafka, store a block raw when compression does not shrink it.
        if len(block) >= len(chunk):
            out += _UINT32_LE.pack(len(chunk) | _LZ4_UNCOMPRESSED_BIT)
            out += chunk
        else:
            out += _UINT32_LE.pack(len(block))
            out += block
    out += _LZ4_END_MARK
    return bytes(out)


def _zstd_compress(data: bytes, level: int | None) -> bytes:
    if level is None:
        return bytes(cramjam.zstd.compress(data))
    return bytes(cramjam.zstd.compress(data, level=level))


_COMPRESSORS: Final[dict[int, Callable[[bytes, int | None], bytes]]] = {
    _Codec.GZIP: _gzip_compress,
    _Codec.SNAPPY: _snappy_compress,
    _Codec.LZ4: _lz4_compress,
    _Codec.ZSTD: _zstd_compress,
}


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """Compress ``data`` with codec id 1-4 the way Kafka's Java client frames it."""
    try:
        compressor = _COMPRESSORS[codec]
    except KeyError:
        raise CompressionError(f"no compressor for codec id {codec}") from None
    return compressor(data, level)


# --------------------------------------------------------------------------------------------
# decoding


def _gzip_decompress(data: bytes) -> bytes:
    return gzip.decompress(data)


def _snappy_raw(block: bytes) -> bytes:
    claimed = cramjam.snappy.decompress_raw_len(block)
    if claimed > MAX_DECOMPRESSED_BYTES:
        raise CompressionError(f"snappy block claims {claimed} bytes, over the limit")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_raw(data)
    if len(data) < len(_XERIAL_HEADER):
        raise CompressionError("truncated xerial snappy header")
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    while pos < len(data):  # bounded: every iteration consumes at least 4 bytes
        if len(data) - pos < _INT32.size:
            raise CompressionError("truncated xerial snappy block length")
        (size,) = _INT32.unpack_from(data, pos)
        pos += _INT32.size
        if size < 0 or size > len(data) - pos:
            raise CompressionError(f"xerial snappy block length {size} beyond the data")
        out += _snappy_raw(data[pos : pos + size])
        pos += size
        if len(out) > MAX_DECOMPRESSED_BYTES:
            raise CompressionError("snappy data decompresses past the limit")
    return bytes(out)


def _lz4_decompress(data: bytes) -> bytes:
    return bytes(cramjam.lz4.decompress(data))


def _zstd_decompress(data: bytes) -> bytes:
    return bytes(cramjam.zstd.decompress(data))


_DECOMPRESSORS: Final[dict[int, Callable[[bytes], bytes]]] = {
    _Codec.GZIP: _gzip_decompress,
    _Codec.SNAPPY: _snappy_decompress,
    _Codec.LZ4: _lz4_decompress,
    _Codec.ZSTD: _zstd_decompress,
}


def decompress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Decompress one batch's record block; any failure raises :class:`CompressionError`."""
    try:
        decompressor = _DECOMPRESSORS[codec]
    except KeyError:
        raise CompressionError(f"no decompressor for codec id {codec}") from None
    try:
        return decompressor(bytes(data))
    except CompressionError:
        raise
    except (cramjam.DecompressionError, OSError, EOFError, zlib.error, ValueError) as exc:
        # Each library reports bad input its own way; callers only need "this block is bad".
        raise CompressionError(str(exc) or type(exc).__name__) from None
