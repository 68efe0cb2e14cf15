"""wire/varint.py: zigzag varints and varlongs checked against known encodings and against an
independent implementation (kafka-python's)."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    VarintError,
    read_varint,
    read_varlong,
    size_of_varint,
    write_varint,
    write_varlong,
)

with warnings.catch_warnings():
    # kafka-python 3 loads its protocol schemas through a deprecated importlib API on import;
    # pytest turns warnings into errors, and this one is not ours to fix.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.util import decode_varint as kafka_decode_varint
    from kafka.record.util import encode_varint as kafka_encode_varint


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (300, "d804"),
        (INT32_MAX, "feffffff0f"),
        (INT32_MIN, "ffffffff0f"),
    ],
)
def test_known_varint_encodings(value: int, encoded: str) -> None:
    out = bytearray()
    write_varint(value, out)
    assert out.hex() == encoded
    assert size_of_varint(value) == len(out)
    assert read_varint(bytes(out), 0, len(out)) == (value, len(out))


@given(st.integers(INT32_MIN, INT32_MAX))
def test_varint_round_trip_and_matches_kafka_python(value: int) -> None:
    out = bytearray()
    write_varint(value, out)
    theirs = bytearray()
    kafka_encode_varint(value, theirs.append)
    assert out == theirs
    assert read_varint(b"\x00" + bytes(out), 1, len(out) + 1) == (value, len(out) + 1)
    assert kafka_decode_varint(bytes(out), 0) == (value, len(out))


@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trip(value: int) -> None:
    out = bytearray()
    write_varlong(value, out)
    assert len(out) == size_of_varint(value) <= 10
    assert read_varlong(bytes(out), 0, len(out)) == (value, len(out))


def test_varint_errors() -> None:
    with pytest.raises(VarintError, match="runs past the end"):
        read_varint(b"\x80\x80", 0, 2)
    with pytest.raises(VarintError, match="runs past the end"):
        read_varint(b"\x80\x80\x00", 0, 2)  # the terminator lies beyond `end`
    with pytest.raises(VarintError, match="runs past the end"):
        read_varint(b"", 0, 0)
    with pytest.raises(VarintError, match="longer than 5 bytes"):
        read_varint(b"\x80\x80\x80\x80\x80\x00", 0, 6)
    with pytest.raises(VarintError, match="outside int32 range"):
        read_varint(b"\xff\xff\xff\xff\x1f", 0, 5)
    with pytest.raises(VarintError, match="longer than 10 bytes"):
        read_varlong(b"\x80" * 10 + b"\x00", 0, 11)
    with pytest.raises(VarintError, match="outside int64 range"):
        read_varlong(b"\xff" * 9 + b"\x03", 0, 10)
    with pytest.raises(ValueError, match="outside int32 range"):
        write_varint(INT32_MAX + 1, bytearray())
    with pytest.raises(ValueError, match="outside int64 range"):
        write_varlong(INT64_MIN - 1, bytearray())
