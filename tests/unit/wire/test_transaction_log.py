"""__transaction_state records in Kafka's format, and the partition of a transactional id."""

from __future__ import annotations

import random
import struct

import pytest

from wire import group_records
from wire.batch_builder import build_batch, build_records_batch
from wire.record_reader import iter_records
from wire.records import CompressionType, Record
from wire.transaction_log import (
    TransactionLogError,
    TransactionLogValue,
    TransactionState,
    TxnPartitions,
    build_transaction_batch,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    iter_transaction_records,
    partition_for,
)

SEED = 19

ONGOING = TransactionLogValue(
    producer_id=1000,
    producer_epoch=5,
    transaction_timeout_ms=60_000,
    transaction_status=TransactionState.ONGOING,
    transaction_partitions=(TxnPartitions("orders", (0, 3)), TxnPartitions("t", (1,))),
    transaction_last_update_timestamp_ms=2000,
    transaction_start_timestamp_ms=1500,
)

# The same value as Kafka lays it out, byte by byte (TransactionLogValue v0).
ONGOING_V0 = (
    b"\x00\x00"  # version 0
    b"\x00\x00\x00\x00\x00\x00\x03\xe8"  # producer_id 1000
    b"\x00\x05"  # producer_epoch 5
    b"\x00\x00\xea\x60"  # transaction_timeout_ms 60000
    b"\x01"  # transaction_status Ongoing
    b"\x00\x00\x00\x02"  # two topics
    b"\x00\x06orders"
    b"\x00\x00\x00\x02"  # two partitions
    b"\x00\x00\x00\x00"
    b"\x00\x00\x00\x03"
    b"\x00\x01t"
    b"\x00\x00\x00\x01"  # one partition
    b"\x00\x00\x00\x01"
    b"\x00\x00\x00\x00\x00\x00\x07\xd0"  # last update 2000
    b"\x00\x00\x00\x00\x00\x00\x05\xdc"  # start 1500
)


def _value(status: TransactionState, partitions: tuple[TxnPartitions, ...] | None) -> bytes:
    """A v0 value around a status and partitions, for the malformed-input tests."""
    out = b"\x00\x00" + struct.pack(">qhib", 7, 1, 100, status)
    if partitions is None:
        out += b"\xff\xff\xff\xff"
    else:
        out += struct.pack(">i", len(partitions))
        for entry in partitions:
            out += struct.pack(">h", len(entry.topic)) + entry.topic.encode()
            ids = entry.partition_ids
            out += struct.pack(f">i{len(ids)}i", len(ids), *ids)
    return out + struct.pack(">qq", 20, 10)


# -- the partition of an id ------------------------------------------------------------------------


def test_partition_for_is_kafkas_abs_hash_modulo() -> None:
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("Hello World", 50) == (-862545276 & 0x7FFFFFFF) % 50
    assert partition_for("polygenelubricants", 50) == 0  # hash Integer.MIN_VALUE: abs is 0
    assert partition_for("\U0001f600", 7) == (0xD83D * 31 + 0xDE00) % 7  # UTF-16 code units


def test_partition_for_places_an_id_as_a_group_of_the_same_name() -> None:
    rng = random.Random(SEED)
    for _ in range(200):
        name = "".join(rng.choice("abcxyz-_0\u00e9") for _ in range(rng.randint(0, 12)))
        partitions = rng.randint(1, 60)
        got = partition_for(name, partitions)
        assert got == group_records.partition_for(name, partitions), f"{name!r} (seed={SEED})"
        assert 0 <= got < partitions


def test_partition_for_needs_a_partition() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for("txn", 0)


# -- keys ------------------------------------------------------------------------------------------


def test_key_golden_bytes() -> None:
    assert encode_key("txn-1") == b"\x00\x00" + b"\x00\x05txn-1"
    assert decode_key(b"\x00\x00\x00\x05txn-1") == "txn-1"


@pytest.mark.parametrize("transactional_id", ["", "a", "\u00e9t\u00e9", "x" * 1000])
def test_keys_round_trip(transactional_id: str) -> None:
    assert decode_key(encode_key(transactional_id)) == transactional_id


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "truncated"),
        (b"\x00", "truncated"),
        (b"\x00\x01\x00\x01t", "key version 1 is unknown"),
        (b"\x00\x00\x00\x05tx", "truncated"),
        (b"\x00\x00\xff\xff", "null"),
        (b"\x00\x00\x00\x01tx", "1 trailing bytes"),
        (b"\x00\x00\x00\x02\xff\xfe", "not UTF-8"),
    ],
)
def test_malformed_keys_are_transaction_log_errors(data: bytes, match: str) -> None:
    with pytest.raises(TransactionLogError, match=match):
        decode_key(data)


def test_keys_too_long_for_an_int16_length_are_refused() -> None:
    with pytest.raises(ValueError, match="too long"):
        encode_key("x" * 0x8000)


# -- values ----------------------------------------------------------------------------------------


def test_value_golden_bytes() -> None:
    assert encode_value(ONGOING) == ONGOING_V0
    assert decode_value(ONGOING_V0) == ONGOING


def test_an_empty_transaction_has_null_partitions() -> None:
    empty = TransactionLogValue(3, 0, 100, TransactionState.EMPTY, None, 9, -1)
    data = encode_value(empty)
    assert data == (
        b"\x00\x00"
        + struct.pack(">qhib", 3, 0, 100, 0)
        + b"\xff\xff\xff\xff"
        + struct.pack(">qq", 9, -1)
    )
    assert decode_value(data) == empty
    # An empty array is not null: both are kept apart.
    no_partitions = TransactionLogValue(3, 0, 100, TransactionState.COMPLETE_COMMIT, (), 9, 5)
    assert decode_value(encode_value(no_partitions)) == no_partitions


def test_a_tombstone_is_none() -> None:
    assert decode_value(None) is None


def test_every_status_byte_is_kafkas_transaction_state_id() -> None:
    assert [(s.value, s.kafka_name) for s in TransactionState] == [
        (0, "Empty"),
        (1, "Ongoing"),
        (2, "PrepareCommit"),
        (3, "PrepareAbort"),
        (4, "CompleteCommit"),
        (5, "CompleteAbort"),
        (6, "Dead"),
        (7, "PrepareEpochFence"),
    ]
    for status in TransactionState:
        data = _value(status, ())
        assert data[16] == status.value
        value = decode_value(data)
        assert value is not None
        assert value.transaction_status is status


def test_values_round_trip() -> None:
    rng = random.Random(SEED)
    for _ in range(300):
        topics = rng.sample(["a", "orders", "t-1", "\u00e9v\u00e9nements"], rng.randint(0, 3))
        partitions = tuple(
            TxnPartitions(topic, tuple(rng.sample(range(100), rng.randint(0, 4))))
            for topic in topics
        )
        value = TransactionLogValue(
            producer_id=rng.randint(0, 2**63 - 1),
            producer_epoch=rng.randint(-1, 2**15 - 1),
            transaction_timeout_ms=rng.randint(1, 2**31 - 1),
            transaction_status=rng.choice(list(TransactionState)),
            transaction_partitions=rng.choice([None, partitions]),
            transaction_last_update_timestamp_ms=rng.randint(-1, 2**41),
            transaction_start_timestamp_ms=rng.randint(-1, 2**41),
        )
        assert decode_value(encode_value(value)) == value, f"seed={SEED}"


def test_version_1_flexible_values_decode_with_their_tagged_fields() -> None:
    data = (
        b"\x00\x01"  # version 1 (flexible)
        + struct.pack(">qhib", 1000, 5, 60_000, 2)  # ... PrepareCommit
        + b"\x02"  # compact array: one topic
        + b"\x02t"  # compact string "t"
        + b"\x03"  # compact array: two partition ids
        + struct.pack(">ii", 7, 9)
        + b"\x00"  # the topic entry's tag buffer: empty
        + struct.pack(">qq", 2000, 1500)
        + b"\x04"  # four tagged fields
        + b"\x00\x08"
        + struct.pack(">q", 41)  # 0: previous_producer_id
        + b"\x01\x08"
        + struct.pack(">q", 1001)  # 1: next_producer_id
        + b"\x02\x02"
        + struct.pack(">h", 2)  # 2: client_transaction_version
        + b"\x09\x01\xff"  # a tag this schema does not know: skipped
    )
    assert decode_value(data) == TransactionLogValue(
        producer_id=1000,
        producer_epoch=5,
        transaction_timeout_ms=60_000,
        transaction_status=TransactionState.PREPARE_COMMIT,
        transaction_partitions=(TxnPartitions("t", (7, 9)),),
        transaction_last_update_timestamp_ms=2000,
        transaction_start_timestamp_ms=1500,
        previous_producer_id=41,
        next_producer_id=1001,
        client_transaction_version=2,
    )
    # Null partitions (compact: 0), no tags: the schema's defaults.
    empty = b"\x00\x01" + struct.pack(">qhib", 3, 0, 100, 0) + b"\x00" + struct.pack(">qq", 9, -1)
    assert decode_value(empty + b"\x00") == TransactionLogValue(
        3, 0, 100, TransactionState.EMPTY, None, 9, -1
    )


def test_encoding_refuses_what_version_0_cannot_hold() -> None:
    with pytest.raises(ValueError, match="tagged fields"):
        encode_value(TransactionLogValue(1, 0, 1, TransactionState.EMPTY, None, 0, -1, 7))
    with pytest.raises(ValueError, match="producer_epoch 32768 does not fit 16 bits"):
        encode_value(TransactionLogValue(1, 2**15, 1, TransactionState.EMPTY, None, 0, -1))


FLEX_HEAD = b"\x00\x01" + struct.pack(">qhib", 3, 0, 100, 1)
FLEX_TAIL = struct.pack(">qq", 9, 5)
ONE_TOPIC = _value(TransactionState.ONGOING, ())[:17] + b"\x00\x00\x00\x01"  # then the topic


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\x00\x02" + ONGOING_V0[2:], "value version 2 is unknown"),
        (b"\xff\xff" + ONGOING_V0[2:], "value version -1 is unknown"),
        (ONGOING_V0 + b"\x00", "1 trailing bytes"),
        (ONGOING_V0[:16] + b"\x08" + ONGOING_V0[17:], "status 8 is unknown"),
        (ONGOING_V0[:17] + b"\x7f\xff\xff\xff" + ONGOING_V0[21:], "passes the end"),
        (ONE_TOPIC + b"\xff\xff", "topic is null"),
        (ONE_TOPIC + b"\x00\x01t\xff\xff\xff\xff", "partition_ids is null"),
        (ONE_TOPIC + b"\x00\x02\xc3\x28", "topic is not UTF-8"),
        (FLEX_HEAD + b"\x01" + FLEX_TAIL + b"\x01\x00\x04\x00\x00\x00\x01", "4 bytes, not 8"),
        (FLEX_HEAD + b"\x01" + FLEX_TAIL + b"\x02\x05\x00\x05\x00", "tag 5 appears twice"),
        (FLEX_HEAD + b"\x01" + FLEX_TAIL + b"\xff\xff\xff\xff\xff\x01", "varint too long"),
        (FLEX_HEAD + b"\x01" + FLEX_TAIL, "truncated"),  # no tag buffer
    ],
)
def test_malformed_values_are_transaction_log_errors(data: bytes, match: str) -> None:
    with pytest.raises(TransactionLogError, match=match):
        decode_value(data)


def test_every_truncation_of_a_value_is_an_error() -> None:
    for size in range(len(ONGOING_V0)):
        with pytest.raises(TransactionLogError):
            decode_value(ONGOING_V0[:size])


# -- batches ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", list(CompressionType))
def test_batches_carry_values_and_tombstones(compression: CompressionType) -> None:
    entries: list[tuple[str, TransactionLogValue | None]] = [
        ("txn-a", ONGOING),
        ("txn-b", TransactionLogValue(3, 0, 100, TransactionState.EMPTY, None, 9, -1)),
        ("txn-c", None),
    ]
    batch = build_transaction_batch(entries, timestamp_ms=5)
    assert [(tid, v) for _, tid, v in iter_transaction_records(batch)] == entries
    # As stored: at offsets, possibly compressed by a foreign writer (what loading reads back).
    stored = build_records_batch(
        [Record(100 + i, r.timestamp, r.key, r.value) for i, r in enumerate(iter_records(batch))],
        compression=compression,
    )
    assert [(o, tid) for o, tid, _ in iter_transaction_records(stored)] == [
        (100, "txn-a"),
        (101, "txn-b"),
        (102, "txn-c"),
    ]


def test_control_batches_are_skipped_and_keyless_records_refused() -> None:
    marker = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], is_control=True)
    data = marker + build_transaction_batch([("txn-a", ONGOING)], timestamp_ms=5)
    assert [tid for _, tid, _ in iter_transaction_records(data)] == ["txn-a"]
    keyless = build_records_batch([Record(0, 5, None, ONGOING_V0)])
    with pytest.raises(TransactionLogError, match="no key"):
        list(iter_transaction_records(keyless))
