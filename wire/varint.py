"""Kafka's variable-length integers (protobuf style, zigzag-encoded), sans-IO.

Layout: a signed value ``n`` is first zigzag-mapped to an unsigned one (0 -> 0, -1 -> 1, 1 -> 2,
-2 -> 3, ...) so that small negative numbers stay short, then written seven bits at a time, least
significant group first; every byte but the last has its high bit (0x80) set.

- a *varint* carries an int32 and takes at most 5 bytes,
- a *varlong* carries an int64 and takes at most 10 bytes.

Decoding is strict, as Kafka's ``ByteUtils.readVarint``/``readVarlong`` are: a value that runs past
the end of the buffer, needs more than the maximum number of bytes, or decodes outside the signed
range raises :class:`VarintError` (a ``ValueError``), never ``IndexError``.
"""

from __future__ import annotations

from typing import Final, TypeAlias

Buffer: TypeAlias = bytes | bytearray | memoryview
"""Any contiguous byte buffer the decoders accept (memoryviews must have byte format)."""

INT16_MIN: Final = -(1 << 15)
INT16_MAX: Final = (1 << 15) - 1
INT32_MIN: Final = -(1 << 31)
INT32_MAX: Final = (1 << 31) - 1
INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1

VARINT_MAX_BYTES: Final = 5
VARLONG_MAX_BYTES: Final = 10


class VarintError(ValueError):
    """A variable-length integer in the input is malformed (truncated, too long or out of range)."""


def zigzag_encode(value: int) -> int:
    """Map a signed integer onto an unsigned one, interleaving negatives with positives."""
    return value << 1 if value >= 0 else ((-value) << 1) - 1


def zigzag_decode(raw: int) -> int:
    """Inverse of :func:`zigzag_encode`."""
    return (raw >> 1) ^ -(raw & 1)


def _write_unsigned(raw: int, out: bytearray) -> None:
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def write_varint(value: int, out: bytearray) -> None:
    """Append ``value`` (an int32) to ``out`` as a zigzag varint."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint value {value} outside int32 range")
    _write_unsigned(zigzag_encode(value), out)


def write_varlong(value: int, out: bytearray) -> None:
    """Append ``value`` (an int64) to ``out`` as a zigzag varlong."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong value {value} outside int64 range")
    _write_unsigned(zigzag_encode(value), out)


def size_of_varint(value: int) -> int:
    """Number of bytes :func:`write_varint` / :func:`write_varlong` use for ``value``."""
    raw = zigzag_encode(value)
    size = 1
    while raw > 0x7F:
        raw >>= 7
        size += 1
    return size


def _read_unsigned(buf: Buffer, pos: int, end: int, max_bytes: int, what: str) -> tuple[int, int]:
    raw = 0
    shift = 0
    limit = min(end, pos + max_bytes)
    while pos < limit:
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return raw, pos
        shift += 7
    # Every byte up to the limit had its continuation bit set: either the data ended first or
    # the encoding is longer than the type allows.
    if shift // 7 < max_bytes:
        raise VarintError(f"{what} runs past the end of its data")
    raise VarintError(f"{what} longer than {max_bytes} bytes")


def read_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """Decode an int32 varint at ``buf[pos:end]``; return ``(value, position after it)``."""
    raw, pos = _read_unsigned(buf, pos, end, VARINT_MAX_BYTES, "varint")
    if raw >> 32:
        raise VarintError("varint value outside int32 range")
    return zigzag_decode(raw), pos


def read_varlong(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """Decode an int64 varlong at ``buf[pos:end]``; return ``(value, position after it)``."""
    raw, pos = _read_unsigned(buf, pos, end, VARLONG_MAX_BYTES, "varlong")
    if raw >> 64:
        raise VarintError("varlong value outside int64 range")
    return zigzag_decode(raw), pos
