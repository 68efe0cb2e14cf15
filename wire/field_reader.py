"""`FieldReader`: bounds-checked reading of the fixed fields of Kafka's internal-topic records
(`__consumer_offsets` in wire/group_records.py, `__transaction_state` in wire/transaction_log.py):
big-endian integers, unsigned varints, and the check that nothing trails. Each record module
subclasses it with its own strings, arrays and tagged fields, and names the error it raises.

Pure: reads the caller's bytes, holds only its position.
"""

from __future__ import annotations

import struct
from typing import ClassVar, Final

_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")


class FieldReader:
    error: ClassVar[type[ValueError]] = ValueError  # what a subclass raises on bad bytes

    def __init__(self, data: bytes, what: str) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.what = what

    def _take(self, size: int) -> memoryview:
        if size < 0 or self.pos + size > len(self.data):
            raise self.error(f"{self.what}: truncated at byte {self.pos}")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def i8(self) -> int:
        return int(_I8.unpack(self._take(1))[0])

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise self.error(f"{self.what}: varint too long at byte {self.pos}")

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self.error(f"{self.what}: {len(self.data) - self.pos} trailing bytes")
