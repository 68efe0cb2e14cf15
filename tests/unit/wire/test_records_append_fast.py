"""The produce hot path's validator agrees with `validate_batch` on every input.

`validate_batch_for_append` is a hand-written shortcut (no BatchHeader); it must accept exactly
what `validate_batch` accepts, with the same field values, and reject everything else with the
very same error (type, message, position). Inputs: valid batches (from the builder and with
arbitrary header fields), then the same damaged every way a produce request can be — flipped
bytes, truncation, lying lengths, odd magic and codec ids, bad positions.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.wire.batch_helpers import recrc
from wire.batch_builder import build_batch
from wire.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    validate_batch,
    validate_batch_for_append,
)

_HEADER = struct.Struct(">qiibIhiqqqhii")
_FIELDS = BatchHeader.__slots__


def expected_fields(header: BatchHeader) -> tuple[int, ...]:
    return (
        header.batch_length,
        header.magic,
        header.crc,
        header.attributes,
        header.last_offset_delta,
        header.max_timestamp,
        header.records_count,
    )


def outcome(check: object, buf: bytes | bytearray, pos: int) -> tuple[str, object]:
    """What `check` does with ``buf`` at ``pos``: the fields it returns, or the error."""
    assert callable(check)
    try:
        result = check(memoryview(buf), pos)
    except (CorruptRecordError, ValueError) as error:
        position = error.position if isinstance(error, CorruptRecordError) else None
        return "error", (type(error).__name__, str(error), position)
    if isinstance(result, BatchHeader):
        return "ok", expected_fields(result)
    return "ok", result


def assert_agree(buf: bytes | bytearray, pos: int) -> None:
    slow = outcome(validate_batch, buf, pos)
    fast = outcome(validate_batch_for_append, buf, pos)
    assert fast == slow, (bytes(buf[:80]).hex(), pos)


@st.composite
def batch_bytes(draw: st.DrawFn) -> bytes:
    """A valid batch: built records, then arbitrary header fields with the CRC fixed up."""
    count = draw(st.integers(1, 5))
    value_size = draw(st.integers(0, 300))
    data = build_batch(
        [(b"k%d" % i, b"v" * value_size) for i in range(count)],
        base_timestamp=draw(st.integers(-1, 1 << 45)),
    )
    fields = list(_HEADER.unpack_from(data))
    for name in draw(st.lists(st.sampled_from(_FIELDS), max_size=4, unique=True)):
        index = _FIELDS.index(name)
        if name in ("batch_length", "magic", "crc"):
            continue  # damaged separately below, where the CRC is not fixed up
        fmt = _HEADER.format[1 + index]
        bits = {"q": 64, "i": 32, "h": 16, "b": 8, "I": 32}[fmt]
        low, high = (0, (1 << bits) - 1) if fmt == "I" else (-(1 << bits - 1), (1 << bits - 1) - 1)
        fields[index] = draw(st.integers(low, high))
    out = bytearray(data)
    _HEADER.pack_into(out, 0, *fields)
    return bytes(recrc(out))


@given(batch_bytes(), st.data())
def test_agrees_on_valid_and_damaged_batches(data: bytes, draw: st.DataObject) -> None:
    buf = bytearray(data)
    damage = draw.draw(st.sampled_from(["none", "flip", "truncate", "length", "magic", "prefix"]))
    if damage == "flip":
        at = draw.draw(st.integers(0, len(buf) - 1))
        buf[at] ^= draw.draw(st.integers(1, 255))
    elif damage == "truncate":
        del buf[draw.draw(st.integers(0, len(buf) - 1)) :]
    elif damage == "length":
        struct.pack_into(">i", buf, 8, draw.draw(st.integers(-(1 << 31), (1 << 31) - 1)))
    elif damage == "magic":
        buf[16] = draw.draw(st.integers(0, 255))
    elif damage == "prefix":  # a batch after some other bytes, checked at its position
        buf[:0] = draw.draw(st.binary(max_size=80))
    pos = len(buf) - len(data) if damage == "prefix" and len(buf) >= len(data) else 0
    assert_agree(buf, pos)
    assert_agree(buf, draw.draw(st.integers(-5, len(buf) + 5)))


@given(batch_bytes(), st.integers(0, 7))
def test_agrees_on_every_codec_id(data: bytes, codec: int) -> None:
    buf = bytearray(data)
    (attributes,) = struct.unpack_from(">h", buf, 21)
    struct.pack_into(">h", buf, 21, (attributes & ~7) | codec)
    assert_agree(recrc(buf), 0)


@given(st.binary(max_size=2 * RECORD_BATCH_OVERHEAD), st.integers(-3, 130))
def test_agrees_on_garbage(buf: bytes, pos: int) -> None:
    assert_agree(buf, pos)


def test_second_batch_in_a_buffer_and_exact_errors() -> None:
    first = build_batch([(b"a", b"1")], base_timestamp=5)
    second = build_batch([(b"b", b"2"), (b"c", b"3")], base_timestamp=7)
    buf = first + second
    fields = validate_batch_for_append(memoryview(buf), len(first))
    assert fields == expected_fields(validate_batch(buf, len(first)))
    assert fields[0] + LOG_OVERHEAD == len(second)
    assert fields[-1] == 2
    torn = bytearray(buf[:-1])
    with pytest.raises(CorruptRecordError, match="length beyond buffer") as caught:
        validate_batch_for_append(memoryview(torn), len(first))
    assert caught.value.position == len(first)
    bad_crc = bytearray(first)
    bad_crc[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        validate_batch_for_append(memoryview(bad_crc), 0)
    with pytest.raises(ValueError, match="negative buffer position"):
        validate_batch_for_append(memoryview(buf), -len(second))
