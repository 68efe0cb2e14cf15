"""wire/compression.py: Kafka's codecs (gzip, snappy in xerial framing, lz4 frames, zstd)
checked against what Kafka and independent implementations (kafka-python, lz4, zstandard)
write and read, and against junk."""

from __future__ import annotations

import contextlib
import gzip
import random
import struct
import warnings
import zlib

import cramjam
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.compression import (
    LZ4_BLOCK_BYTES,
    SNAPPY_BLOCK_BYTES,
    XERIAL_MAGIC,
    CompressionError,
    compress,
    decompress,
)

with warnings.catch_warnings():
    # kafka-python 3 loads its protocol schemas through a deprecated importlib API on import;
    # pytest turns warnings into errors, and this one is not ours to fix.
    warnings.simplefilter("ignore", DeprecationWarning)
    import lz4.frame
    import zstandard
    from kafka.codec import snappy_encode

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4


def seeded_bytes(seed: int, size: int, alphabet: int = 256) -> bytes:
    rng = random.Random(seed)
    return bytes(rng.randrange(alphabet) for _ in range(size))


# ---------------------------------------------------------------------------- snappy (xerial)


def test_snappy_is_xerial_framed_in_32k_blocks() -> None:
    data = seeded_bytes(1, 80_000, alphabet=4)
    framed = compress(SNAPPY, data)
    assert framed[:8] == XERIAL_MAGIC
    assert struct.unpack(">ii", framed[8:16]) == (1, 1)
    pos, blocks = 16, []
    while pos < len(framed):
        (size,) = struct.unpack_from(">i", framed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(framed[pos + 4 : pos + 4 + size])))
        pos += 4 + size
    assert [len(b) for b in blocks] == [SNAPPY_BLOCK_BYTES, SNAPPY_BLOCK_BYTES, 80_000 - 65_536]
    assert b"".join(blocks) == data
    assert decompress(SNAPPY, framed) == data


def test_snappy_reads_raw_streams_and_kafka_python_xerial_streams() -> None:
    data = seeded_bytes(2, 50_000, alphabet=8)
    assert decompress(SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data
    assert decompress(SNAPPY, snappy_encode(data, xerial_compatible=True)) == data
    assert decompress(SNAPPY, snappy_encode(data, xerial_compatible=False)) == data


@pytest.mark.parametrize(
    ("framed", "message"),
    [
        (XERIAL_MAGIC + b"\x00\x00", "truncated xerial snappy header"),
        (XERIAL_MAGIC + struct.pack(">iih", 1, 1, 0), "truncated xerial snappy block length"),
        (XERIAL_MAGIC + struct.pack(">iii", 1, 1, 100) + b"abc", "beyond the data"),
        (XERIAL_MAGIC + struct.pack(">iii", 1, 1, -1), "beyond the data"),
        (XERIAL_MAGIC + struct.pack(">iii", 1, 1, 3) + b"\xff\xff\xff", "invalid header"),
        (b"\x80\x80\x80\x80\x08", "claims 2147483648 bytes, over the limit"),
        (b"\xff\xff\xff\xff\x7f", "larger than allowed"),
    ],
)
def test_snappy_rejects_bad_framing(framed: bytes, message: str) -> None:
    with pytest.raises(CompressionError, match=message):
        decompress(SNAPPY, framed)


# ---------------------------------------------------------------------------- lz4 (frame)


def test_lz4_frame_is_what_kafka_writes() -> None:
    data = seeded_bytes(3, 150_000, alphabet=6)
    frame = compress(LZ4, data)
    # magic, FLG (v1, independent blocks, no checksums), BD (64 KiB), header checksum
    assert frame[:7] == bytes.fromhex("04224d18604082")
    assert frame[-4:] == b"\x00\x00\x00\x00"
    pos, out = 7, bytearray()
    while True:
        (size,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if size == 0:
            break
        assert size & 0x7FFFFFFF <= LZ4_BLOCK_BYTES
        block = frame[pos : pos + (size & 0x7FFFFFFF)]
        if size & 0x80000000:
            out += block
        else:
            # Each block decodes on its own: blocks are independent, as Kafka's reader requires.
            expected = min(LZ4_BLOCK_BYTES, len(data) - len(out))
            out += bytes(cramjam.lz4.decompress_block(block, output_len=expected))
        pos += size & 0x7FFFFFFF
    assert pos == len(frame)
    assert out == data
    # cramjam checks the frame header checksum, so this also proves HC = 0x82 is right.
    assert bytes(cramjam.lz4.decompress(frame)) == data
    assert decompress(LZ4, frame) == data


def test_lz4_stores_incompressible_blocks_raw() -> None:
    data = seeded_bytes(4, 1000)
    frame = compress(LZ4, data)
    (size,) = struct.unpack_from("<I", frame, 7)
    assert size == 0x80000000 | 1000
    assert frame[11:1011] == data
    assert decompress(LZ4, frame) == data


def test_lz4_reads_other_writers_frames() -> None:
    data = seeded_bytes(5, 200_000, alphabet=3)
    linked = bytes(cramjam.lz4.compress(data))  # linked blocks and checksums
    assert decompress(LZ4, linked) == data
    assert decompress(LZ4, lz4.frame.compress(data, block_linked=False)) == data
    assert decompress(LZ4, compress(LZ4, data, level=9)) == data


def test_lz4_rejects_a_broken_frame() -> None:
    frame = bytearray(compress(LZ4, b"abc" * 1000))
    frame[6] ^= 1
    with pytest.raises(CompressionError):
        decompress(LZ4, bytes(frame))
    with pytest.raises(CompressionError):
        decompress(LZ4, bytes(frame[:-6]))


# ---------------------------------------------------------------------------- gzip, zstd


def test_gzip_is_deterministic_and_reads_concatenated_members() -> None:
    data = seeded_bytes(6, 10_000, alphabet=5)
    assert compress(GZIP, data) == compress(GZIP, data)
    assert gzip.decompress(compress(GZIP, data)) == data
    two = gzip.compress(data[:100]) + gzip.compress(data[100:])
    assert decompress(GZIP, two) == data
    assert decompress(GZIP, compress(GZIP, data, level=1)) == data
    with pytest.raises(CompressionError):
        decompress(GZIP, compress(GZIP, data)[:-5])
    with pytest.raises(CompressionError):
        decompress(GZIP, zlib.compress(data))


def test_zstd_reads_concatenated_frames_and_rejects_junk() -> None:
    data = seeded_bytes(7, 10_000, alphabet=5)
    assert decompress(ZSTD, compress(ZSTD, data)) == data
    assert decompress(ZSTD, zstandard.ZstdCompressor().compress(data)) == data
    two = compress(ZSTD, data[:10]) + compress(ZSTD, data[10:], level=19)
    assert decompress(ZSTD, two) == data
    with pytest.raises(CompressionError):
        decompress(ZSTD, compress(ZSTD, data)[:-3])


def test_unknown_codec_ids() -> None:
    with pytest.raises(CompressionError, match="no compressor for codec id 0"):
        compress(0, b"")
    with pytest.raises(CompressionError, match="no decompressor for codec id 7"):
        decompress(7, b"")


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
@given(data=st.binary(max_size=3000))
def test_round_trip_any_data(codec: int, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
@given(junk=st.binary(max_size=300))
def test_junk_raises_only_compression_error(codec: int, junk: bytes) -> None:
    with contextlib.suppress(CompressionError):
        decompress(codec, junk)
