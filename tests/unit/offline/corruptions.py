"""One problem injected into each replica of a copy of the built cluster
(tests/unit/offline/helpers.py), plus a partition written with an idempotent producer's batch
appended twice and one with transactions whose ``.txnindex`` was damaged (an entry naming
another producer, an entry lost; one transaction left open, which is no problem), and a
compacted topic whose replicas differ only by an aborted transaction's batch that a cleaner
removed from one of them (no problem either), with the findings `ketch verify` must report for
them: kind, log dir, partition and offsets. Shared by
the Spark test (tests/spark/test_verify.py), which runs the whole job, and the driver-side
checks without Spark (test_verify_checks.py). It edits files under the given root only: no
state of its own."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.clock import ManualClock
from runtime.log.checkpoints import RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from runtime.log.log import Log
from runtime.log.manager import CLEAN_SHUTDOWN_FILE
from runtime.log.producer_replay import end_txn_marker_batch
from runtime.log.transaction_index import ENTRY_SIZE, AbortedTxn
from tests.unit.offline.helpers import (
    CONFIG,
    EVENTS,
    TABLE,
    BuiltCluster,
    batches_in,
    flip_byte,
    patch_int,
    replace_batch,
    segment_paths,
    truncate_tail,
    with_changed_value,
)
from wire.batch_builder import build_batch
from wire.record_reader import iter_records
from wire.topic import TopicPartition

Expected = set[tuple[str, str | None, str, int, tuple[int, int] | None]]
PRODUCERS = "producers"  # the partition with the duplicated idempotent batch (broker-0 only)
TXNS = "txns"  # the partition with transactions and a damaged .txnindex (broker-0 only)
OPEN_TXN = (TXNS, 0, 21)  # (topic, partition, producer id) of its one open transaction
CTXN = "ctxn"  # compacted, on broker-0 and broker-1: an aborted batch cleaned away on broker-1


def _in_partition(root: Path, broker: int, topic: str, partition: int) -> Path:
    return root / f"broker-{broker}" / f"{topic}-{partition}"


def _uncommitted_free(cluster: BuiltCluster, tp: TopicPartition, base: int) -> bool:
    return base < cluster.high_watermarks[tp]


def corrupt(cluster: BuiltCluster, root: Path) -> Expected:
    """Inject one problem per replica; return the findings they must produce."""
    expected: Expected = set()
    b0, b1, b2 = "broker-0", "broker-1", "broker-2"

    # flip a byte in the payload of the third batch of events-0 on broker-1
    log = segment_paths(_in_partition(root, 1, EVENTS, 0))[0]
    position, header = batches_in(log)[2]
    flip_byte(log, position + 100)
    expected.add(("crc_mismatch", b1, EVENTS, 0, (header.base_offset, header.last_offset)))

    # a valid but different batch below the HW on broker-2 (events-0): a diverged replica
    tp0 = TopicPartition(EVENTS, 0)
    log = segment_paths(_in_partition(root, 2, EVENTS, 0))[0]
    data = log.read_bytes()
    position, header = next(
        (p, h) for p, h in batches_in(log)[1:] if h.attributes & 7 == 0 and p > 0
    )
    assert _uncommitted_free(cluster, tp0, header.base_offset)
    batch = data[position : position + header.size_bytes]
    replace_batch(log, position, with_changed_value(batch, header.base_offset))
    expected.add(("replica_divergence", b2, EVENTS, 0, (header.base_offset, header.last_offset)))

    # broker-2 is live (no clean-shutdown marker); events-0's recovery point sits at the start
    # of its last segment, and a byte flipped above it is not judged
    (root / b2 / CLEAN_SHUTDOWN_FILE).unlink()
    last_segment = segment_paths(_in_partition(root, 2, EVENTS, 0))[-1]
    recovery_point = int(last_segment.name.split(".")[0])
    checkpoint = OffsetCheckpointFile(root / b2 / RECOVERY_POINT_CHECKPOINT)
    points = checkpoint.read()
    points[tp0] = recovery_point
    checkpoint.write(points)
    flip_byte(last_segment, batches_in(last_segment)[0][0] + 80)

    # truncate the tail of events-1 on broker-2 (its last batch, above the HW, is torn)
    log = segment_paths(_in_partition(root, 2, EVENTS, 1))[-1]
    position, header = batches_in(log)[-1]
    truncate_tail(log, 100)
    expected.add(("torn_tail", b2, EVENTS, 1, (header.base_offset, header.last_offset)))

    # break the epoch order on broker-1 (events-1): an epoch-3 batch below the HW says 2
    tp1 = TopicPartition(EVENTS, 1)
    found = [
        (log, p, h)
        for log in segment_paths(_in_partition(root, 1, EVENTS, 1))
        for p, h in batches_in(log)
        if h.partition_leader_epoch == 3 and h.last_offset < cluster.high_watermarks[tp1]
    ]
    log, position, header = found[len(found) // 2]
    patch_int(log, position + 12, ">i", 2)
    offsets = (header.base_offset, header.last_offset)
    expected |= {
        ("epoch_decreasing", b1, EVENTS, 1, offsets),
        ("epoch_checkpoint_mismatch", b1, EVENTS, 1, offsets),
        ("replica_divergence", b1, EVENTS, 1, offsets),
    }

    # delete an offset index entry of events-2 on broker-0 (the index zeroes what it drops)
    log = segment_paths(_in_partition(root, 0, EVENTS, 2))[0]
    index = log.with_suffix(".index")
    assert index.stat().st_size >= 3 * 8
    patch_int(index, 8, ">q", 0)
    expected.add(("offset_index_order", b0, EVENTS, 2, (0, 0)))

    # point an offset index entry of events-2 on broker-1 one byte past its batch
    index = segment_paths(_in_partition(root, 1, EVENTS, 2))[0].with_suffix(".index")
    relative, entry_position = (int.from_bytes(index.read_bytes()[i : i + 4]) for i in (0, 4))
    patch_int(index, 4, ">i", entry_position + 1)
    expected.add(("offset_index_entry", b1, EVENTS, 2, (relative, relative)))

    # a gap: the middle segment of events-2 on broker-2 is gone
    segments = segment_paths(_in_partition(root, 2, EVENTS, 2))
    assert len(segments) >= 3
    middle = segments[len(segments) // 2]
    first = int(middle.name.split(".")[0])
    last = int(segments[len(segments) // 2 + 1].name.split(".")[0]) - 1
    for suffix in (".log", ".index", ".timeindex"):
        middle.with_suffix(suffix).unlink()
    assert last < cluster.high_watermarks[TopicPartition(EVENTS, 2)]
    expected |= {
        ("offset_gap", b2, EVENTS, 2, (first, last)),
        ("replica_divergence", b2, EVENTS, 2, (first, last)),
    }

    # the compacted topic: broker-1's latest value of one key differs
    log = segment_paths(_in_partition(root, 1, TABLE, 0))[-1]
    position, header = batches_in(log)[-1]
    batch = log.read_bytes()[position : position + header.size_bytes]
    latest = {key: offset for key, (offset, value) in cluster.latest_by_key.items() if value}
    target = next(r for r in iter_records(batch) if r.key in latest and latest[r.key] == r.offset)
    replace_batch(log, position, with_changed_value(batch, target.offset))
    expected.add(("replica_record_divergence", None, TABLE, 0, (target.offset, target.offset)))

    # an idempotent producer's batch written twice (producers-0, only on broker-0)
    expected.add(("duplicate_sequence", b0, PRODUCERS, 0, _write_duplicate(root / b0)))

    # transactions (txns-0, only on broker-0): the first aborted transaction's entry names
    # another producer, the last one's entry is lost
    wrong, lost = _write_transactions(root / b0)
    expected.add(("txn_index_mismatch", b0, TXNS, 0, (wrong.first_offset, wrong.last_offset)))
    expected.add(("txn_index_missing", b0, TXNS, 0, (lost.first_offset, lost.last_offset)))

    # a compacted topic with an aborted transaction, cleaned on broker-1 only: nothing to report
    _write_compacted_transaction(root)
    return expected


def _write_compacted_transaction(root: Path) -> None:
    """ctxn-0 on broker-0 and broker-1: key a = 1 (plain), then producer 31's transaction writes
    a = 2 and aborts, then b = 1. broker-1's copy was compacted: the aborted batch is gone, its
    marker kept. Both replicas' latest value of a is 1 once aborted records are left out."""

    def batch(base: int, key: bytes, value: bytes, producer_id: int = -1) -> bytes:
        transactional = producer_id >= 0
        return build_batch(
            [(key, value)], base_offset=base, partition_leader_epoch=1, base_timestamp=1_000,
            producer_id=producer_id, producer_epoch=0 if transactional else -1,
            base_sequence=0 if transactional else -1, is_transactional=transactional,
        )  # fmt: skip

    marker = end_txn_marker_batch(
        31, 0, 0, commit=False, base_offset=2, leader_epoch=1, timestamp=1_000
    )
    full = [batch(0, b"a", b"1"), batch(1, b"a", b"2", 31), marker, batch(3, b"b", b"1")]
    for broker, batches in ((0, full), (1, [full[0], *full[2:]])):
        log = Log.open(
            root / f"broker-{broker}" / f"{CTXN}-0", CONFIG, ManualClock(0, wall_offset_ms=1_000)
        )
        try:
            log.append_as_follower(b"".join(batches))
        finally:
            log.close()
    configs = root / "topic-configs.json"
    loaded = json.loads(configs.read_text())
    loaded[CTXN] = {"cleanup.policy": "compact"}
    configs.write_text(json.dumps(loaded))


def _write_transactions(broker_dir: Path) -> tuple[AbortedTxn, AbortedTxn]:
    """Producers 21 and 22, interleaved with plain batches: 21 aborts, 22 commits, 21 aborts, 22
    aborts, 21 stays open. Then the one segment's .txnindex (three entries) is damaged: the first
    entry's producer id becomes 22, the last entry is cut off. Returns those two entries."""
    log = Log.open(broker_dir / f"{TXNS}-0", CONFIG, ManualClock(0, wall_offset_ms=1_000))
    sequences = {21: 0, 22: 0}

    def data(pid: int) -> None:
        records = [(b"k%d" % i, b"v") for i in range(2)]
        transactional = pid >= 0
        log.append_as_leader(
            build_batch(
                records, base_timestamp=1_000, producer_id=pid,
                producer_epoch=0 if transactional else -1,
                base_sequence=sequences[pid] if transactional else -1,
                is_transactional=transactional,
            ),
            1,
        )  # fmt: skip
        if transactional:
            sequences[pid] += len(records)

    try:
        for pid, commit in ((21, False), (22, True), (21, False), (22, False)):
            data(pid)
            data(-1)
            data(pid)
            log.append_end_txn_marker(pid, 0, 0, commit=commit, leader_epoch=1)
        data(21)
        data(-1)
        (segment,) = log.segments
        entries = segment.txn_index.all_entries()
        index = segment.txn_index.path
    finally:
        log.close()
    assert len(entries) == 3, entries
    patch_int(index, 2, ">q", 22)  # the first entry's producer id (after its int16 version)
    truncate_tail(index, ENTRY_SIZE)
    return entries[0], entries[2]


def _write_duplicate(broker_dir: Path) -> tuple[int, int]:
    """A log whose third batch repeats the first's producer id, epoch and sequences at later
    offsets (a follower appends whatever it is given); returns the repeat's offsets. The batch
    after it continues the original's sequences: no gap, one finding."""

    def batch(base_offset: int, base_sequence: int) -> bytes:
        records = [(b"k%d" % i, b"v%d" % (base_sequence + i)) for i in range(3)]
        return build_batch(
            records, base_offset=base_offset, partition_leader_epoch=1, base_timestamp=1_000,
            producer_id=7, producer_epoch=2, base_sequence=base_sequence,
        )  # fmt: skip

    log = Log.open(broker_dir / f"{PRODUCERS}-0", CONFIG, ManualClock())
    try:
        log.append_as_follower(batch(0, 0) + batch(3, 3) + batch(6, 0) + batch(9, 6))
    finally:
        log.close()
    return (6, 8)
