"""Kafka protocol primitives read from and written to frames by hand, for the hot APIs' codecs
(wire/kafka/produce_codec.py, wire/kafka/fetch_codec.py) — sans-IO.

The encodings are Kafka's (the "Protocol Primitive Types" of its protocol guide):

    int8/16/32/64         big-endian two's complement
    unsigned varint       7 bits a byte, least significant group first, high bit = "more"
    string                legacy: int16 length, -1 = null; compact (flexible versions):
                          unsigned varint length + 1, 0 = null; then UTF-8
    bytes / records       legacy: int32 length, -1 = null; compact as for strings
    array                 legacy: int32 count, -1 = null; compact: unsigned varint count + 1
    uuid                  16 raw bytes
    tagged fields         (flexible structs) unsigned varint count, then per field its tag,
                          its size and its value, each tag and size an unsigned varint

`Reader` reads one request frame and raises `KafkaFrameError` for anything it cannot trust, so
no IndexError, struct.error or UnicodeDecodeError leaves it. Where a Kafka rule and kio's reader
(which the general path in wire/kafka/codec.py uses) agree, the reader follows them: a varint
of more than 5 bytes, a null where the field is not nullable, a negative length other than
null's -1, bad UTF-8, a length past the frame's end and an unknown tag are errors; the size
given with a known tagged field is read but not checked against the field's own length, and a
later copy of a tag replaces an earlier one; bytes after the body are ignored. Two rules are
stricter than kio's reader, as Kafka's own generated readers are: a null array where the schema
has no nullable array is an error (kio reads it as None), and an array whose count exceeds the
bytes left is refused before anything is allocated for it (kio's native reader reserves room
for a compact array's count first, which a count near 2**32 turns into a failed allocation that
aborts the whole process).

The write helpers append to a `bytearray`; integers out of their type's range raise
`struct.error`, as kio's writers do (a bug in the response, not in a request).

State: none; a `Reader` holds only its position in the caller's frame.
"""

from __future__ import annotations

import struct
from typing import Final, TypeAlias

from kio.schema.errors import ErrorCode as KioErrorCode

from wire.errors import ErrorCode
from wire.kafka.codec import KafkaFrameError, RequestPrefix

Buffer: TypeAlias = bytes | bytearray | memoryview
"""A frame or a record set: any contiguous buffer of bytes (memoryviews of format "B")."""

I16: Final = struct.Struct(">h")
I32: Final = struct.Struct(">i")
I64: Final = struct.Struct(">q")

REQUEST_HEADER_BYTES: Final = 8  # api key, api version, correlation id (`RequestPrefix`)
VARINT_MAX_BYTES: Final = 5
UUID_BYTES: Final = 16
NO_TAGGED_FIELDS: Final = 0

# The error codes kio can write. The general path converts a native code through kio's enum and
# answers one kio does not know as UNKNOWN_SERVER_ERROR (wire/kafka/convert.py); using kio's own
# table keeps the two paths byte for byte the same.
_KAFKA_CODES: Final = frozenset(code.value for code in KioErrorCode)


def kafka_error_code(code: int) -> int:
    """`code` as a Kafka response carries it: unknown codes become UNKNOWN_SERVER_ERROR."""
    return code if code in _KAFKA_CODES else int(ErrorCode.UNKNOWN_SERVER_ERROR)


class Reader:
    """Bounds-checked reading of one request frame, from just after the request's prefix.

    `flexible` selects the compact encodings of strings, bytes and arrays (the request
    header's client id stays legacy whatever the version: `client_id()`). The hot reads take
    their common case inline (a one-byte varint, no tagged fields), as a call costs as much as
    the read itself.
    """

    __slots__ = ("end", "flexible", "pos", "prefix", "view")

    def __init__(self, frame: Buffer, prefix: RequestPrefix, flexible: bool) -> None:
        self.view = memoryview(frame)
        self.pos = REQUEST_HEADER_BYTES
        self.end = len(self.view)
        self.flexible = flexible
        self.prefix = prefix  # only for error messages

    def error(self, reason: str) -> KafkaFrameError:
        """What to raise for a malformed request, naming it and where reading stopped."""
        prefix = self.prefix
        return KafkaFrameError(
            f"malformed API {prefix.api_key} v{prefix.api_version} request "
            f"(correlation id {prefix.correlation_id}): {reason} at byte {self.pos}"
        )

    def _truncated(self, size: int) -> KafkaFrameError:
        return self.error(f"{size} bytes wanted, {self.end - self.pos} left")

    # Fixed-width reads let struct check the bounds (the view ends where the frame does): no
    # comparison of ours on the hot path, and a struct.error becomes the frame error.

    def int32(self) -> int:
        pos = self.pos
        try:
            value: int = I32.unpack_from(self.view, pos)[0]
        except struct.error:
            raise self._truncated(4) from None
        self.pos = pos + 4
        return value

    def int64(self) -> int:
        pos = self.pos
        try:
            value: int = I64.unpack_from(self.view, pos)[0]
        except struct.error:
            raise self._truncated(8) from None
        self.pos = pos + 8
        return value

    def fields(self, layout: struct.Struct) -> tuple[int, ...]:
        """Several fixed-width integers in a row, in one unpack (a partition's fixed fields)."""
        pos = self.pos
        try:
            values: tuple[int, ...] = layout.unpack_from(self.view, pos)
        except struct.error:
            raise self._truncated(layout.size) from None
        self.pos = pos + layout.size
        return values

    def uuid(self) -> bytes:
        pos = self.pos
        if self.end - pos < UUID_BYTES:
            raise self._truncated(UUID_BYTES)
        self.pos = pos + UUID_BYTES
        return bytes(self.view[pos : pos + UUID_BYTES])

    def uvarint(self) -> int:
        pos = self.pos
        if pos < self.end:
            byte = self.view[pos]
            if byte < 0x80:  # the common case: a value below 128, one byte
                self.pos = pos + 1
                return byte
        return self._long_uvarint()

    def _long_uvarint(self) -> int:
        view, pos, end = self.view, self.pos, self.end
        value = shift = 0
        for _ in range(VARINT_MAX_BYTES):
            if pos >= end:
                raise self.error("varint runs past the end of the frame")
            byte = view[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos
                return value
            shift += 7
        raise self.error(f"varint longer than {VARINT_MAX_BYTES} bytes")

    # -- lengths, strings, bytes ------------------------------------------------------------------

    def _length(self, legacy: struct.Struct, what: str) -> int:
        """A string's, bytes' or array's length (`what`): -1 for null; at most the bytes left
        (an array's elements take at least a byte each)."""
        if not self.flexible:
            return self._legacy_length(legacy, what)
        # The compact form: an unsigned varint of the length + 1 (0 for null), its one-byte
        # case inline.
        pos = self.pos
        if pos < self.end and (byte := self.view[pos]) < 0x80:
            length = byte - 1
            self.pos = pos = pos + 1
        else:
            length = self._long_uvarint() - 1
            pos = self.pos
        if length > self.end - pos:
            raise self.error(f"{what} length {length} runs past the end of the frame")
        return length

    def _legacy_length(self, layout: struct.Struct, what: str) -> int:
        """A length as a fixed-width integer (int16 for strings, int32 for the rest)."""
        pos = self.pos
        try:
            length: int = layout.unpack_from(self.view, pos)[0]
        except struct.error:
            raise self._truncated(layout.size) from None
        self.pos = pos = pos + layout.size
        if length < -1:
            raise self.error(f"negative {what} length {length}")
        if length > self.end - pos:
            raise self.error(f"{what} length {length} runs past the end of the frame")
        return length

    def _utf8(self, length: int) -> str:
        pos = self.pos
        try:
            text = str(self.view[pos : pos + length], "utf-8")
        except UnicodeDecodeError:
            raise self.error("string is not UTF-8") from None
        self.pos = pos + length
        return text

    def nullable_string(self) -> str | None:
        length = self._length(I16, "string")
        return None if length < 0 else self._utf8(length)

    def string(self) -> str:
        length = self._length(I16, "string")
        if length < 0:
            raise self.error("null where the string is not nullable")
        return self._utf8(length)

    def client_id(self) -> str | None:
        """The request header's client id: a nullable string, legacy in every header version
        (Kafka's RequestHeader.json keeps it so, for ApiVersions' sake)."""
        length = self._legacy_length(I16, "string")
        return None if length < 0 else self._utf8(length)

    def nullable_bytes(self) -> tuple[int, int] | None:
        """Where a nullable bytes field's (a record set's) value lies in the frame, or None:
        the caller slices it, so that slice is the only copy (or none, for a memoryview)."""
        length = self._length(I32, "bytes")
        if length < 0:
            return None
        pos = self.pos
        self.pos = pos + length
        return pos, pos + length

    def array_length(self) -> int:
        """The element count of an array the schema does not let be null."""
        count = self._length(I32, "array")
        if count < 0:
            raise self.error("null where the array is not nullable")
        return count

    def int32_array(self) -> list[int]:
        count = self.array_length()
        return list(self.fields(struct.Struct(f">{count}i")))

    # -- tagged fields ----------------------------------------------------------------------------

    def tag_count(self) -> int:
        """How many tagged fields follow; each takes at least two bytes (tag and size)."""
        count = self.uvarint()
        if count > (self.end - self.pos) // 2:
            raise self.error(f"{count} tagged fields cannot fit in what is left of the frame")
        return count

    def unknown_tag(self, tag: int) -> KafkaFrameError:
        # kio, which the general path decodes with, refuses a tag its schema does not name.
        return self.error(f"unknown tagged field {tag}")

    def no_tagged_fields(self) -> None:
        """The end of a flexible struct whose version names no tagged field."""
        pos = self.pos
        if pos < self.end and self.view[pos] == 0:  # the common case: no tagged field
            self.pos = pos + 1
            return
        if self.tag_count():
            raise self.unknown_tag(self.uvarint())


# -- writing ---------------------------------------------------------------------------------------


def write_uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_length(out: bytearray, length: int, flexible: bool, legacy: struct.Struct) -> None:
    """A string's, bytes' or array's length; -1 is null."""
    if flexible:
        write_uvarint(out, length + 1)
    else:
        out += legacy.pack(length)


def write_array_length(out: bytearray, count: int | None, flexible: bool) -> None:
    write_length(out, -1 if count is None else count, flexible, I32)


def write_nullable_string(out: bytearray, text: str | None, flexible: bool) -> None:
    if text is None:
        write_length(out, -1, flexible, I16)
        return
    encoded = text.encode()
    write_length(out, len(encoded), flexible, I16)
    out += encoded


def write_bytes_length(out: bytearray, size: int, flexible: bool) -> None:
    """The length in front of a bytes field (a record set) whose bytes the caller places."""
    write_length(out, size, flexible, I32)
