"""Property tests: round trips of arbitrary records, and corrupt input of every kind.

Whatever is done to the bytes — flipped bits, truncation, lying lengths and counts (with the CRC
fixed up so the record parser must notice), garbage compressed data — the reader either returns
records or raises CorruptRecordError; no other exception type may escape.
"""

from __future__ import annotations

import contextlib
import itertools
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.wire.batch_helpers import recrc
from wire.batch_builder import build_batch
from wire.record_reader import iter_keys, iter_records
from wire.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    CompressionType,
    CorruptRecordError,
    Record,
    iter_batches,
    read_header,
    validate_batch,
)

TS_BOUND = 1 << 62  # keeps every timestamp delta inside int64

nullable_bytes = st.none() | st.binary(max_size=64)
headers = st.lists(st.tuples(st.text(max_size=8), nullable_bytes), max_size=3).map(tuple)
records = st.lists(
    st.builds(
        Record,
        offset=st.just(0),
        timestamp=st.integers(-TS_BOUND, TS_BOUND),
        key=nullable_bytes,
        value=nullable_bytes,
        headers=headers,
    ),
    max_size=12,
)
codecs = st.sampled_from(list(CompressionType))


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    return build_batch(
        draw(records),
        base_offset=draw(st.integers(0, 1 << 62)),
        partition_leader_epoch=draw(st.integers(-1, 1 << 30)),
        compression=draw(codecs),
        producer_id=draw(st.integers(-1, 1 << 40)),
        producer_epoch=draw(st.integers(-1, 100)),
        base_sequence=draw(st.integers(-1, 1000)),
        is_transactional=draw(st.booleans()),
    )


def parse_or_error(
    buf: bytes | bytearray, *, verify_crc: bool = True
) -> tuple[list[Record], CorruptRecordError | None]:
    """Like :func:`read_everything`, but return the error instead of raising it."""
    try:
        return read_everything(buf, verify_crc=verify_crc), None
    except CorruptRecordError as exc:
        return [], exc


def read_everything(buf: bytes | bytearray, *, verify_crc: bool = True) -> list[Record]:
    """Parse every batch and every record of ``buf``, the way a deep dump would."""
    out: list[Record] = []
    for pos, _ in iter_batches(buf, validate=verify_crc):
        out.extend(iter_records(buf, pos, verify_crc=verify_crc))
    return out


@given(records, st.integers(0, 1 << 62), codecs)
def test_any_records_round_trip(rs: list[Record], base_offset: int, codec: CompressionType) -> None:
    batch = build_batch(rs, base_offset=base_offset, compression=codec)
    header = validate_batch(batch)
    assert header.records_count == len(rs)
    assert header.size_bytes == len(batch)
    expected = [
        Record(base_offset + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(rs)
    ]
    assert list(iter_records(batch)) == expected
    if rs:
        assert header.max_timestamp == max(r.timestamp for r in rs)
        assert header.base_timestamp == rs[0].timestamp


@settings(max_examples=300)
@given(batches(), st.data())
def test_flipped_bytes_raise_only_corrupt_record_error(batch: bytes, data: st.DataObject) -> None:
    damaged = bytearray(batch)
    flips = data.draw(
        st.lists(st.tuples(st.integers(0, len(batch) - 1), st.integers(1, 255)), min_size=1)
    )
    for index, mask in flips:
        damaged[index] ^= mask
    _, error = parse_or_error(damaged)
    if error is not None:
        assert error.position == 0
    else:
        # Only base offset and leader epoch lie outside every check (they are the fields the
        # broker patches); any other change must be caught by length, magic or CRC-32C checks.
        assert damaged[8:12] == batch[8:12]
        assert damaged[16:] == batch[16:]


@settings(max_examples=400)
@given(batches(), st.data())
def test_mutations_behind_a_fixed_crc_raise_only_corrupt_record_error(
    batch: bytes, data: st.DataObject
) -> None:
    """Mutate the records region (flip, insert, delete) and fix length and CRC to match."""
    body = bytearray(batch[RECORD_BATCH_OVERHEAD:])
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["flip", "insert", "delete", "count"]))
        if action == "flip" and body:
            body[data.draw(st.integers(0, len(body) - 1))] ^= data.draw(st.integers(1, 255))
        elif action == "insert":
            at = data.draw(st.integers(0, len(body)))
            body[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif action == "delete" and body:
            at = data.draw(st.integers(0, len(body) - 1))
            del body[at : at + data.draw(st.integers(1, 8))]
    header = bytearray(batch[:RECORD_BATCH_OVERHEAD])
    if data.draw(st.booleans()):
        struct.pack_into(">i", header, 57, data.draw(st.integers(-5, (1 << 31) - 1)))
    mutated = header + body
    struct.pack_into(">i", mutated, 8, len(mutated) - LOG_OVERHEAD)
    mutated = recrc(mutated)
    out, error = parse_or_error(mutated)
    if error is not None:
        assert error.position == 0
    else:
        assert len(out) == read_header(mutated).records_count


@settings(max_examples=60)
@given(st.lists(batches(), min_size=1, max_size=3), st.data())
def test_truncation_anywhere_keeps_the_whole_batches_before_it(
    parts: list[bytes], data: st.DataObject
) -> None:
    buf = b"".join(parts)
    starts = [sum(len(p) for p in parts[:i]) for i in range(len(parts) + 1)]
    cut = data.draw(st.integers(0, len(buf)))
    complete = [s for s, e in itertools.pairwise(starts) if e <= cut]
    seen: list[int] = []
    failed_at: int | None = None
    try:
        for pos, _ in iter_batches(buf[:cut]):
            seen.append(pos)
            list(iter_records(buf[:cut], pos))
    except CorruptRecordError as exc:
        failed_at = exc.position
    assert seen == complete
    if cut in starts:
        assert failed_at is None
    else:
        assert failed_at == max(s for s in starts if s < cut)


def test_every_truncation_of_a_compressed_batch() -> None:
    batch = build_batch([(b"k", b"v" * 300)] * 20, compression=CompressionType.LZ4)
    for cut in range(1, len(batch)):
        _, error = parse_or_error(batch[:cut])
        assert error is not None, f"truncation at {cut} of {len(batch)} went unnoticed"
        assert error.position == 0


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_corrupt_record_error(junk: bytes) -> None:
    with contextlib.suppress(CorruptRecordError):
        read_everything(junk, verify_crc=False)


@settings(max_examples=300)
@given(
    st.sampled_from([c for c in CompressionType if c is not CompressionType.NONE]),
    st.binary(max_size=200),
    st.integers(0, 5),
)
def test_garbage_compressed_payload_raises_only_corrupt_record_error(
    codec: CompressionType, junk: bytes, count: int
) -> None:
    batch = bytearray(build_batch([], compression=codec)) + junk
    struct.pack_into(">i", batch, 8, len(batch) - LOG_OVERHEAD)
    struct.pack_into(">i", batch, 57, count)
    with contextlib.suppress(CorruptRecordError):
        read_everything(recrc(batch))


# -- iter_keys: the log cleaner's key-only walk ----------------------------------------------------


@given(batches())
def test_iter_keys_reads_what_iter_records_reads(batch: bytes) -> None:
    expected = [(record.offset, record.key) for record in iter_records(batch)]
    assert list(iter_keys(batch)) == expected


@given(batches(), st.data())
def test_iter_keys_on_mutated_records_raises_only_corrupt_record_error(
    batch: bytes, data: st.DataObject
) -> None:
    """Record bytes damaged behind a valid header (the cleaner trusts the scan's CRC check, so
    the records are all it could be given wrong): keys, or CorruptRecordError, nothing else."""
    header, body = (
        bytearray(batch[:RECORD_BATCH_OVERHEAD]),
        bytearray(batch[RECORD_BATCH_OVERHEAD:]),
    )
    if body:
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()) and body:
        del body[data.draw(st.integers(0, len(body) - 1)) :]
    mutated = header + body
    struct.pack_into(">i", mutated, 8, len(mutated) - LOG_OVERHEAD)
    with contextlib.suppress(CorruptRecordError):
        keys = list(iter_keys(bytes(mutated)))
        assert len(keys) == read_header(mutated).records_count


@given(
    st.lists(st.none() | st.binary(min_size=0, max_size=40), min_size=1, max_size=400),
    st.integers(0, 20_000),
    codecs,
)
def test_iter_keys_on_long_batches_of_large_records(
    keys: list[bytes | None], value_bytes: int, codec: CompressionType
) -> None:
    """Offset deltas and record lengths of one, two and three varint bytes."""
    batch = build_batch([(key, bytes(value_bytes)) for key in keys], compression=codec)
    assert list(iter_keys(batch)) == list(enumerate(keys))
