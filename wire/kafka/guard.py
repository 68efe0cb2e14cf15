"""The bounds check every kio-decoded Kafka request passes before kio reads it — sans-IO.

Why it exists: kio's native reader reserves memory for an array's declared element count before
it reads one element. A 17-byte Metadata v12 request whose topic count is the compact varint
`ff ff ff ff 0f` (4294967294 elements) makes it ask for ~34 GB; the allocation fails and the
native code aborts the whole broker process (exit 134), every connection with it. A legacy int32
count of 2**31 - 1 asks for ~17 GB. kio exposes no hook to guard its array reader:
`entity_reader` composes its readers inside the extension and never calls back into Python, so
neither a wrapper nor a monkeypatch of kio's Python-level readers would ever run. Hence this
pre-pass: `check_request` walks the frame the way kio will read it, field by field from kio's own
schema classes, and refuses it (`RequestLayoutError`) before kio runs when an array count, a
string's or a bytes field's length cannot fit in what is left of the frame. `decode_request`
(wire/kafka/codec.py) turns the refusal into `KafkaFrameError`, which closes the connection, as
Kafka closes one whose request it cannot parse.

The rule is the one Kafka's generated readers apply ("Tried to allocate a collection of size N,
but there are only M bytes remaining"), made tighter by the least encoded size of an element:

    element                           legacy (non-flexible)       compact (flexible)
    bool, int8                        1                           1
    int16                             2                           2
    int32, timedelta_i32              4                           4
    int64, timedelta_i64, float64     8                           8
    uuid                              16                          16
    string                            2 (int16 length)            1 (varint length + 1)
    bytes, records                    4 (int32 length)            1
    array                             4 (int32 count)             1
    struct                            sum of its fields'          sum of its fields' + 1 (tags)

and never less than one byte, so that no element type multiplies a count for free. A request
kio can read has every array of n elements followed by at least n times that minimum, so it
always passes; and whatever the walk refuses, kio refuses too (it would run out of bytes, or
meets the same negative length, over-long varint or unknown tag at the same place). What changes
is only that kio no longer aborts the process, and the error's message.

How the walk follows kio's reader (the tests compare where the two end for random requests of
every served API version, and for hand-made classes with the shapes no served one has):

    struct          its fields in declaration order, tagged fields left out; a flexible struct
                    then has its tagged fields: a varint count, then per field its tag, its size
                    and its value. kio reads a known tag's value with the field's own reader and
                    carries on where that value ends, not where the size says; it refuses an
                    unknown tag.
    null            a null array (-1, compact 0) or string is skipped whether or not the schema
                    lets the field be null (kio reads a null array as None and refuses a null
                    string itself); a nullable struct starts with an int8 marker, -1 for null
                    and anything else for a struct that follows.
    request header  the client id is a legacy nullable string in every header version (Kafka's
                    RequestHeader.json keeps it so, for ApiVersions' sake).
    varint          at most 5 bytes; a value written in more bytes than it needs is read.
    bytes after the body are ignored, as kio ignores them.

Cost. The walk of each request class is generated once, as straight-line Python (the way
wire/messages/fields.py generates the native codecs): runs of fixed-width fields become one
addition, arrays of fixed-width elements one multiplication, and a length costs one read and two
comparisons. An OffsetCommit v2 request (one topic, three partitions) is walked by

    def walk(f, p, end):
        p += 8
        # client_id
        n = _I16(f, p)[0]
        p += 2
        if n > 0:
            if n > end - p:
                raise _runs_past('client_id', n, p, end)
            p += n
        elif n < -1:
            raise _negative('client_id', n, p - 2)
        ...
        # topics
        c1 = _I32(f, p)[0]
        p += 4
        if c1 > 0:
            if c1 * 6 > end - p:
                raise _cannot_fit('topics', c1, 6, p, end)
            for _ in range(c1):
                ...

(`walk_source` shows any request class's). On the machine it was written on, the walk of a
56-174 byte Metadata, OffsetCommit or JoinGroup request (legacy and flexible versions) took
0.65-1.2 us, and `decode_request` went from 2.0-2.6 us to 2.9-4.0 us; the same walk as nested
closures (one call per string, array and struct) took twice as long.

State: the generated walk of each kio request class, in `_walks`, and the sizes of kio's struct
classes (`_least_size`, `_fixed_size`, cached), all filled on first use and never changed after
(the event loop's thread is their only user; two builds for one class are equal).
"""

from __future__ import annotations

import dataclasses
import functools
import struct
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias

Buffer: TypeAlias = bytes | bytearray | memoryview

Walk: TypeAlias = Callable[[Buffer, int, int], int]
"""(frame, position, end of the frame) -> the position after the request's body."""

VARINT_MAX_BYTES: Final = 5
LEGACY_STRING_LENGTH_BYTES: Final = 2
LEGACY_LENGTH_BYTES: Final = 4  # a legacy bytes field's length, a legacy array's count
NULL_STRUCT_MARKER: Final = 0xFF  # int8 -1, read as the unsigned byte it is in the frame
TAGGED_FIELD_LEAST_BYTES: Final = 2  # its tag and its size, one varint byte each at least
# Python compiles at most 20 nested loops; the indent, which counts the ifs too, stays below
# that (the deepest served request, DescribeConfigs v4, needs 7).
_MAX_INDENT: Final = 20

# Kafka's fixed-width types by kio's names for them.
FIXED_SIZES: Final[Mapping[str, int]] = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_LENGTH_PREFIXED: Final = frozenset({"string", "bytes", "records"})


class RequestLayoutError(ValueError):
    """A request whose counts, lengths or tags its frame cannot hold (or that kio would refuse
    at the same place): refused before kio reads it."""


def check_request(frame: Buffer, request_cls: type[Any]) -> int:
    """Walk `frame` (a request's header and body, without the 4-byte length) as kio will read
    a request of kio's class `request_cls`; the position where the body ends.

    Raises `RequestLayoutError` for an array count, string or bytes length that cannot fit in
    what is left of the frame, a frame that ends inside a field, a negative length other than
    null's -1, a varint longer than 5 bytes and an unknown tagged field.
    """
    walk = _walks.get(request_cls)
    if walk is None:
        walk = _walks[request_cls] = _build(request_cls)
    end = len(frame)
    try:
        pos = walk(frame, 0, end)
    except (struct.error, IndexError):  # a fixed-width read past the end of the frame
        raise RequestLayoutError(f"the frame of {end} bytes ends inside a field") from None
    if pos > end:
        raise RequestLayoutError(f"the frame of {end} bytes ends inside a field ({pos} needed)")
    return pos


def walk_source(request_cls: type[Any]) -> str:
    """The Python source of the walk generated for kio's request class `request_cls`."""
    return _Source.of_request(request_cls)


_walks: dict[type[Any], Walk] = {}


def _build(request_cls: type[Any]) -> Walk:
    source = walk_source(request_cls)
    namespace: dict[str, Any] = {
        "_I16": struct.Struct(">h").unpack_from,
        "_I32": struct.Struct(">i").unpack_from,
        "_uvarint": _uvarint,
        "_no_tags": _no_tags,
        "_cannot_fit": _cannot_fit,
        "_runs_past": _runs_past,
        "_negative": _negative,
        "_too_many_tags": _too_many_tags,
        "_unknown_tag": _unknown_tag,
    }
    # The source is built only from kio's schema classes (integers and field names, which are
    # identifiers), never from a request.
    exec(compile(source, f"<walk of {request_cls.__module__}>", "exec"), namespace)
    walk: Walk = namespace["walk"]
    return walk


# -- what the generated code calls ----------------------------------------------------------------


def _uvarint(frame: Buffer, pos: int) -> tuple[int, int]:
    """(value, position after it) of an unsigned varint of up to 5 bytes, as kio reads it."""
    start = pos
    value = shift = 0
    for _ in range(VARINT_MAX_BYTES):
        byte = frame[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise RequestLayoutError(f"varint longer than {VARINT_MAX_BYTES} bytes at byte {start}")


def _no_tags(frame: Buffer, pos: int) -> int:
    """The tagged fields of a struct whose version names none: only a count of 0 is read."""
    count, pos = _uvarint(frame, pos)
    if count:
        tag, pos = _uvarint(frame, pos)
        raise _unknown_tag(tag, pos)
    return pos


def _left(pos: int, end: int) -> str:
    left = max(end - pos, 0)
    return "1 byte is left" if left == 1 else f"{left} bytes are left"


def _cannot_fit(field: str, count: int, least: int, pos: int, end: int) -> RequestLayoutError:
    return RequestLayoutError(
        f"array {field} declares {count} elements of at least {least} bytes each, but only "
        f"{_left(pos, end)} after its count (byte {pos})"
    )


def _runs_past(field: str, length: int, pos: int, end: int) -> RequestLayoutError:
    return RequestLayoutError(
        f"{field} declares {length} bytes, but only {_left(pos, end)} after its length (byte {pos})"
    )


def _negative(field: str, length: int, pos: int) -> RequestLayoutError:
    return RequestLayoutError(f"negative length {length} of {field} at byte {pos}")


def _too_many_tags(count: int, pos: int, end: int) -> RequestLayoutError:
    return RequestLayoutError(
        f"{count} tagged fields declared, but only {_left(pos, end)} after their count (byte {pos})"
    )


def _unknown_tag(tag: int, pos: int) -> RequestLayoutError:
    return RequestLayoutError(f"unknown tagged field {tag} before byte {pos}")


# -- sizes of kio's types --------------------------------------------------------------------------


def _shape(annotation: Any) -> tuple[Any, bool, bool]:
    """(element type, is an array, is nullable) of a kio field's annotation."""
    assert not isinstance(annotation, str), "kio's annotations are types, not strings"
    nullable = typing.get_origin(annotation) in (types.UnionType, typing.Union)
    if nullable:
        (annotation,) = [arg for arg in typing.get_args(annotation) if arg is not types.NoneType]
    if typing.get_origin(annotation) is tuple:
        return typing.get_args(annotation)[0], True, nullable
    return annotation, False, nullable


def _is_struct(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def _kafka_type(field: dataclasses.Field[Any]) -> str:
    kafka_type = field.metadata.get("kafka_type")
    if kafka_type not in FIXED_SIZES and kafka_type not in _LENGTH_PREFIXED:
        raise TypeError(f"no walk for kio's Kafka type {kafka_type!r} of field {field.name}")
    return str(kafka_type)


def _untagged(cls: type[Any]) -> list[dataclasses.Field[Any]]:
    return [field for field in dataclasses.fields(cls) if "tag" not in field.metadata]


def _length_bytes(kafka_type: str, flexible: bool) -> int:
    """The least size of a string or bytes value: its length's."""
    if flexible:
        return 1
    return LEGACY_STRING_LENGTH_BYTES if kafka_type == "string" else LEGACY_LENGTH_BYTES


@functools.cache
def _least_size(cls: type[Any]) -> int:
    """The fewest bytes a struct of kio's class `cls` takes."""
    flexible: bool = cls.__flexible__
    total = 1 if flexible else 0  # the tagged fields' count
    for field in _untagged(cls):
        kind, is_array, nullable = _shape(field.type)
        if is_array:
            total += 1 if flexible else LEGACY_LENGTH_BYTES
        elif _is_struct(kind):
            total += 1 if nullable else _least_size(kind)
        else:
            kafka_type = _kafka_type(field)
            total += FIXED_SIZES.get(kafka_type) or _length_bytes(kafka_type, flexible)
    return total


@functools.cache
def _fixed_size(cls: type[Any]) -> int | None:
    """The size of every struct of kio's class `cls`, if they all have one."""
    if cls.__flexible__:
        return None  # its tagged fields
    total = 0
    for field in _untagged(cls):
        kind, is_array, nullable = _shape(field.type)
        if is_array or (nullable and _is_struct(kind)):
            return None
        size = _fixed_size(kind) if _is_struct(kind) else FIXED_SIZES.get(_kafka_type(field))
        if size is None:
            return None
        total += size
    return total


# -- generating a walk -----------------------------------------------------------------------------


class _Source:
    """The lines of one request class's walk, as they are generated."""

    def __init__(self) -> None:
        self.lines = ["def walk(f, p, end):"]
        self.names = 0  # counts the loop variables, so that nested loops get their own

    @classmethod
    def of_request(cls, request_cls: type[Any]) -> str:
        source = cls()
        source.struct(request_cls.__header_schema__, 1, in_header=True)
        source.struct(request_cls, 1)
        source.emit(1, "return p")
        return "\n".join(source.lines) + "\n"

    def emit(self, indent: int, line: str) -> None:
        if indent > _MAX_INDENT:
            raise TypeError("the schema nests deeper than a walk can be generated for")
        self.lines.append("    " * indent + line)

    def name(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def struct(self, cls: type[Any], indent: int, *, in_header: bool = False) -> None:
        """A struct's fields in turn (each run of fixed-width ones as one addition), then its
        tagged fields if it is flexible."""
        flexible: bool = cls.__flexible__
        fixed = 0
        for field in _untagged(cls):
            size = self.fixed_field(field)
            if size is not None:
                fixed += size
                continue
            if fixed:
                self.emit(indent, f"p += {fixed}")
                fixed = 0
            self.emit(indent, f"# {field.name}")
            # Kafka keeps the request header's client id legacy in every header version.
            legacy = in_header and field.name == "client_id"
            self.field(field, flexible and not legacy, indent)
        if fixed:
            self.emit(indent, f"p += {fixed}")
        if flexible:
            self.tagged_fields(cls, indent)

    def fixed_field(self, field: dataclasses.Field[Any]) -> int | None:
        kind, is_array, nullable = _shape(field.type)
        if is_array or (nullable and _is_struct(kind)):
            return None
        return _fixed_size(kind) if _is_struct(kind) else FIXED_SIZES.get(_kafka_type(field))

    def field(
        self, field: dataclasses.Field[Any], flexible: bool, indent: int, *, tagged: bool = False
    ) -> None:
        """A field that has no fixed width (or any field's value, for a tagged one)."""
        kind, is_array, nullable = _shape(field.type)
        if is_array:
            self.array(field, flexible, indent)
        elif not _is_struct(kind):
            kafka_type = _kafka_type(field)
            size = FIXED_SIZES.get(kafka_type)
            if size is not None:  # only a tagged field's value comes here with a fixed width
                self.emit(indent, f"p += {size}")
            else:
                self.length_prefixed(field.name, kafka_type, flexible, indent)
        elif nullable and not tagged:  # a tagged field's absence is its null: no marker
            self.emit(indent, "p += 1")
            self.emit(indent, f"if f[p - 1] != {NULL_STRUCT_MARKER}:")
            self.struct(kind, indent + 1)
        else:
            self.struct(kind, indent)

    def length_prefixed(self, what: str, kafka_type: str, flexible: bool, indent: int) -> None:
        """A string or bytes value: its length (null's -1 reads as no bytes), then its bytes."""
        width = _length_bytes(kafka_type, flexible)
        if flexible:
            self.compact_length("n", indent)
        else:
            self.emit(indent, f"n = {'_I16' if width == 2 else '_I32'}(f, p)[0]")
            self.emit(indent, f"p += {width}")
        self.emit(indent, "if n > 0:")
        self.emit(indent + 1, "if n > end - p:")
        self.emit(indent + 2, f"raise _runs_past({what!r}, n, p, end)")
        self.emit(indent + 1, "p += n")
        if not flexible:  # a compact length cannot be below null's
            self.emit(indent, "elif n < -1:")
            self.emit(indent + 1, f"raise _negative({what!r}, n, p - {width})")

    def compact_length(self, target: str, indent: int) -> None:
        """A compact length or count (varint of the value + 1) into `target`; -1 for null."""
        self.emit(indent, f"{target} = f[p] - 1")
        self.emit(indent, f"if {target} < 0x7F:  # a one-byte varint")
        self.emit(indent + 1, "p += 1")
        self.emit(indent, "else:")
        self.emit(indent + 1, f"{target}, p = _uvarint(f, p)")
        self.emit(indent + 1, f"{target} -= 1")

    def array(self, field: dataclasses.Field[Any], flexible: bool, indent: int) -> None:
        """An array: its count, checked against what is left, then its elements (all in one
        step when they have a fixed width)."""
        kind = _shape(field.type)[0]
        count = self.name("c")
        kafka_type = "" if _is_struct(kind) else _kafka_type(field)
        if kafka_type:
            size = FIXED_SIZES.get(kafka_type)
            least = size or _length_bytes(kafka_type, flexible)
        else:
            size, least = _fixed_size(kind), _least_size(kind)
        least = max(least, 1)  # even an element that could be empty may not multiply a count
        if flexible:
            self.compact_length(count, indent)
        else:
            self.emit(indent, f"{count} = _I32(f, p)[0]")
            self.emit(indent, f"p += {LEGACY_LENGTH_BYTES}")
        self.emit(indent, f"if {count} > 0:")
        self.emit(indent + 1, f"if {count} * {least} > end - p:")
        self.emit(indent + 2, f"raise _cannot_fit({field.name!r}, {count}, {least}, p, end)")
        if size is not None:
            self.emit(indent + 1, f"p += {count} * {size}")
        else:
            self.emit(indent + 1, f"for _ in range({count}):")
            if kafka_type:
                self.length_prefixed(f"{field.name}[]", kafka_type, flexible, indent + 2)
            else:
                self.struct(kind, indent + 2)
        if not flexible:
            self.emit(indent, f"elif {count} < -1:")
            self.emit(
                indent + 1, f"raise _negative({field.name!r}, {count}, p - {LEGACY_LENGTH_BYTES})"
            )

    def tagged_fields(self, cls: type[Any], indent: int) -> None:
        """A flexible struct's tagged fields: a count, then tag, size and value of each."""
        tagged = [field for field in dataclasses.fields(cls) if "tag" in field.metadata]
        self.emit(indent, "if f[p] == 0:  # the common case: no tagged field")
        self.emit(indent + 1, "p += 1")
        self.emit(indent, "else:")
        if not tagged:
            self.emit(indent + 1, "p = _no_tags(f, p)")
            return
        count, tag = self.name("t"), self.name("g")
        self.emit(indent + 1, f"{count}, p = _uvarint(f, p)")
        self.emit(indent + 1, f"if {count} * {TAGGED_FIELD_LEAST_BYTES} > end - p:")
        self.emit(indent + 2, f"raise _too_many_tags({count}, p, end)")
        self.emit(indent + 1, f"for _ in range({count}):")
        self.emit(indent + 2, f"{tag}, p = _uvarint(f, p)")
        self.emit(indent + 2, "p = _uvarint(f, p)[1]  # the value's size, which kio ignores")
        for i, field in enumerate(tagged):
            keyword = "if" if i == 0 else "elif"
            self.emit(indent + 2, f"{keyword} {tag} == {int(field.metadata['tag'])}:")
            self.emit(indent + 3, f"# {field.name}")
            self.field(field, True, indent + 3, tagged=True)
        self.emit(indent + 2, "else:")
        self.emit(indent + 3, f"raise _unknown_tag({tag}, p)")
