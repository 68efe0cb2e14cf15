"""The bounds check before kio (wire/kafka/guard.py): for every API version the Kafka listener
serves, a huge count or length anywhere in a request is refused before kio reads it (kio would
reserve gigabytes for an array's count and abort the process); valid requests decode exactly as
kio alone decodes them; and on damaged requests the guard and kio agree.

Only one test runs kio on a request the guard refuses, in a child process with its address space
limited, to show that the abort is gone. The others would kill the test run if the guard missed
a count, so they run kio only on requests the guard let through (whose counts fit the frame).
"""

from __future__ import annotations

import dataclasses
import re
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader
from kio.serial.errors import InvalidUnicode, UnexpectedNull
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32

from wire.kafka.codec import KafkaFrameError, decode_request, read_prefix, schema
from wire.kafka.guard import RequestLayoutError, check_request, walk_source

from .request_shapes import (
    METADATA_V4_HUGE,
    METADATA_V12_HUGE,
    PRODUCE_V9_HUGE,
    SERVED,
    full,
    lengths,
    request_frames,
    with_huge,
)

ROOT = Path(__file__).resolve().parents[4]


def kio_read(frame: bytes, request_cls: type[Any]) -> tuple[Any, Any, int]:
    """(header, body, end of the body) as kio alone reads a request frame."""
    header, used = entity_reader(request_cls.__header_schema__)(frame, 0)
    body, size = entity_reader(request_cls)(frame, used)
    return header, body, used + size


# -- the abort is gone -----------------------------------------------------------------------------

_CHILD = """
import resource, sys
# 1 GiB of address space: a count that got through would fail to allocate and abort, rather
# than eat the machine's memory.
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from wire.kafka.codec import KafkaFrameError, decode_request, read_prefix
for frame in map(bytes.fromhex, sys.argv[1:]):
    try:
        decode_request(frame, read_prefix(frame))
    except KafkaFrameError as exc:
        print("refused:", exc, flush=True)
"""


def test_a_huge_count_no_longer_aborts_the_process() -> None:
    frames = [METADATA_V12_HUGE, METADATA_V4_HUGE, PRODUCE_V9_HUGE]
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CHILD), *(frame.hex() for frame in frames)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    refusals = child.stdout.splitlines()
    assert len(refusals) == len(frames), child.stdout
    assert all("RequestLayoutError: array topic" in line for line in refusals), refusals


# -- every length of every served version ----------------------------------------------------------


@pytest.mark.parametrize(("api_key", "version"), SERVED)
def test_every_huge_count_or_length_is_refused_before_kio(api_key: int, version: int) -> None:
    """Each length and count of a request with one element in every array, replaced in turn by
    the largest its encoding can say. The guard's own message shows kio never ran (had it run on
    a huge count, the test process would have aborted)."""
    frame, found = lengths(api_key, version)
    assert any(length.field == "client_id" for length in found)
    prefix = read_prefix(frame)
    for length in found:
        damaged = with_huge(frame, length)
        pattern = rf"RequestLayoutError: (array )?{re.escape(length.field)} declares \d+"
        with pytest.raises(KafkaFrameError, match=pattern):
            decode_request(damaged, prefix)


@pytest.mark.parametrize(("api_key", "version"), SERVED)
def test_the_full_request_passes_and_decodes_as_kio_decodes_it(api_key: int, version: int) -> None:
    frame, _ = lengths(api_key, version)
    request_cls = schema(api_key, version, EntityType.request)
    header, body, end = kio_read(frame, request_cls)
    assert check_request(frame, request_cls) == end == len(frame)
    request = decode_request(memoryview(frame), read_prefix(frame))
    assert (request.client_id, request.body) == (header.client_id, body)
    assert body == full(request_cls)


# -- valid requests: identical to kio --------------------------------------------------------------


@pytest.mark.parametrize(("api_key", "version"), SERVED)
@settings(max_examples=25)
@given(data=st.data())
def test_random_requests_decode_as_kio_decodes_them(
    api_key: int, version: int, data: st.DataObject
) -> None:
    frame = data.draw(request_frames(api_key, version))
    trailing = data.draw(st.binary(max_size=3))  # kio ignores bytes after the body
    request_cls = schema(api_key, version, EntityType.request)
    header, body, end = kio_read(frame + trailing, request_cls)
    assert end == len(frame)
    assert check_request(frame + trailing, request_cls) == end
    request = decode_request(frame + trailing, read_prefix(frame))
    assert (request.correlation_id, request.client_id) == (header.correlation_id, header.client_id)
    assert request.body == body


# -- damaged requests: the guard and kio agree -----------------------------------------------------


@pytest.mark.parametrize(("api_key", "version"), SERVED)
@settings(max_examples=25)
@given(data=st.data())
def test_damaged_requests_are_refused_where_kio_refuses_them(
    api_key: int, version: int, data: st.DataObject
) -> None:
    """Random bytes overwritten, or the frame cut short: what the guard lets through, kio reads
    to the same end or refuses for a reason of its own (a bad bool, UTF-8, null); what the guard
    refuses, kio refuses too (run only when the refusal was not a count, which kio might have
    aborted on)."""
    frame = bytearray(data.draw(request_frames(api_key, version)))
    for _ in range(data.draw(st.integers(1, 3))):
        frame[data.draw(st.integers(8, len(frame) - 1))] = data.draw(st.integers(0, 255))
    frame = frame[: data.draw(st.integers(8, len(frame)))]
    request_cls = schema(api_key, version, EntityType.request)
    try:
        end = check_request(frame, request_cls)
    except RequestLayoutError as refusal:
        if "elements of at least" in str(refusal):
            return  # the case kio cannot be run on in-process
        with pytest.raises(Exception):  # noqa: B017, PT011 - any of kio's errors
            kio_read(bytes(frame), request_cls)
        return
    try:
        _, _, kio_end = kio_read(bytes(frame), request_cls)
    except Exception as refusal:
        kio_refusal = refusal
    else:
        assert kio_end == end
        return
    # kio checks more than the layout: a bool's value, UTF-8, a null where none may be.
    beyond_layout = isinstance(kio_refusal, (UnexpectedNull, InvalidUnicode))
    assert beyond_layout or "boolean" in str(kio_refusal), repr(kio_refusal)


# -- shapes no served request has ------------------------------------------------------------------


def _kio_class(name: str, flexible: bool, fields: list[tuple[str, Any, Any]], **extra: Any) -> Any:
    """A class as kio's generated schema modules define them (built at run time, as this
    module's annotations are strings, which kio's reader does not resolve)."""
    return dataclasses.make_dataclass(
        name,
        fields,
        frozen=True,
        slots=True,
        kw_only=True,
        namespace={"__version__": i16(0), "__flexible__": flexible, **extra},
    )


_INNER = _kio_class(
    "Inner",
    False,
    [
        ("value", i32, dataclasses.field(metadata={"kafka_type": "int32"})),
        ("name", str, dataclasses.field(metadata={"kafka_type": "string"})),
    ],
    __type__=EntityType.nested,
)
# A request with a nullable struct (KIP-893): an int8 marker, -1 for null.
_NULLABLE_STRUCT_REQUEST = _kio_class(
    "NullableStructRequest",
    False,
    [
        ("inner", _INNER | None, dataclasses.field()),
        ("after", i32, dataclasses.field(metadata={"kafka_type": "int32"})),
    ],
    __type__=EntityType.request,
    __api_key__=i16(3),
    __header_schema__=schema(3, 0, EntityType.request).__header_schema__,
)


@pytest.mark.parametrize(
    "body",
    [
        "ff" + "00000003",  # null
        "01" + "00000001" + "000178" + "00000003",  # a struct follows
        "02" + "00000001" + "000178" + "00000003",  # kio reads any marker but -1 as "follows"
        "01" + "00000001" + "7fff" + "00000003",  # the struct's string runs past the end
    ],
)
def test_a_nullable_struct_is_walked_as_kio_reads_it(body: str) -> None:
    frame = bytes.fromhex("0003000000000007ffff" + body)
    try:
        _, _, end = kio_read(frame, _NULLABLE_STRUCT_REQUEST)
    except Exception:
        with pytest.raises(RequestLayoutError):
            check_request(frame, _NULLABLE_STRUCT_REQUEST)
        return
    assert check_request(frame, _NULLABLE_STRUCT_REQUEST) == end


def test_varints_written_longer_than_needed_are_read_as_kio_reads_them() -> None:
    # Metadata v12: header tagged-field count 0 in two bytes, one topic (count 2 in two bytes)
    # named "ab" (length 3 in three bytes), a zero topic id, both bools, no tagged fields.
    request_cls = schema(3, 12, EntityType.request)
    frame = bytes.fromhex(
        "0003000c00000007ffff" + "8000" + "8200" + "00" * 16 + "838000" + "6162" + "00" + "010100"
    )
    _, body, end = kio_read(frame, request_cls)
    assert body.topics[0].name == "ab"
    assert check_request(frame, request_cls) == end == len(frame)
    with pytest.raises(RequestLayoutError, match="varint longer than 5 bytes"):
        check_request(frame[:10] + b"\x80" * 5 + b"\x00", request_cls)


def test_the_walk_of_a_known_tag_ends_where_its_value_ends_whatever_its_size_says() -> None:
    # Fetch v15's request: everything empty, then the tagged replica_state (tag 1) whose size
    # says 40 bytes although its value (replica id, epoch, no tags) takes 13, then 27 bytes kio
    # never reads.
    request_cls = schema(1, 15, EntityType.request)
    body = struct.pack(">iiibii", 500, 1, 1024, 0, 0, -1) + b"\x01\x01\x01"
    value = struct.pack(">iq", 2, 3) + b"\x00"
    frame = bytes.fromhex("0001000f00000007ffff00") + body + b"\x01\x01\x28" + value + bytes(27)
    _, read, end = kio_read(frame, request_cls)
    assert read.replica_state.replica_id == 2
    assert check_request(frame, request_cls) == end == len(frame) - 27
    unknown = frame[: -len(value) - 27 - 2] + b"\x05\x01\x00"
    with pytest.raises(RequestLayoutError, match="unknown tagged field 5"):
        check_request(unknown, request_cls)
    with pytest.raises(KeyError):  # kio refuses it too
        kio_read(unknown, request_cls)


def test_the_generated_walk_names_what_it_checks() -> None:
    source = walk_source(schema(8, 2, EntityType.request))  # OffsetCommit v2
    for name in ("client_id", "group_id", "member_id", "topics", "partitions"):
        assert f"# {name}" in source
    assert "c2 * 14 > end - p" in source  # partition: index, offset, empty metadata
