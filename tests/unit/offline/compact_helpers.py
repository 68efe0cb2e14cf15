"""A stopped broker's log dir with one compacted topic, written by the storage engine, its
compaction config, and the model of what one cleaning pass keeps; a partition with committed,
aborted and open transactions (`build_transactional_partition`); shared by the compaction tests
(test_compact_write.py, test_compact_install.py, test_compact.py, test_compact_txn.py here, and
Spark's tests/spark/test_compact.py). Deterministic from a seed; the clock is a `ManualClock`."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from offline.batch_scan import control_types, read_txn_index, scan_segment
from offline.compact_plan import CompactConfig
from offline.verify_checks import BatchRow, Finding
from offline.verify_txn_checks import TxnEntryRow, txn_findings
from runtime.clock import ManualClock
from runtime.log.checkpoints import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile
from runtime.log.config import LogConfig, LogManagerConfig
from runtime.log.log import Log
from runtime.log.manager import LogManager
from runtime.log.segment import LOG_SUFFIX
from runtime.log.transaction_index import AbortedTxn, TransactionIndex
from wire.batch_builder import build_batch
from wire.record_reader import iter_records
from wire.records import BatchHeader, CompressionType, Record, iter_batches
from wire.topic import TopicPartition

WALL_MS = 1_700_000_000_000
TOPIC = "t"
SEGMENT_BYTES = 2048
RETENTION_MS = 1000
COMPACT_PROPS: dict[str, object] = {
    "cleanup.policy": "compact",
    "segment.bytes": SEGMENT_BYTES,
    "index.interval.bytes": 200,
    "delete.retention.ms": RETENTION_MS,
}


@dataclass(frozen=True, slots=True)
class BrokerDir:
    data_dir: Path
    seed: int
    high_watermarks: dict[int, int]
    end_ms: int  # wall time of the last append


def _producer_batch(
    rng: random.Random, ts: int, keys: int, sequence: int | None, *, keyless: bool = False
) -> tuple[bytes, int | None]:
    """A batch, idempotent or not, and the idempotent producer's next sequence. `sequence` is
    that producer's next one in this partition; None before its first batch, which starts at a
    random sequence (the leader accepts any from a producer it has no state for)."""
    count = rng.randint(1, 6)
    records: list[tuple[bytes | None, bytes | None]] = []
    for _ in range(count):
        key = None if keyless else b"k%d" % rng.randrange(keys)
        value = None if rng.random() < 0.15 else rng.randbytes(rng.randint(5, 60))
        records.append((key, value))
    compression = rng.choice([CompressionType.NONE, CompressionType.NONE, CompressionType.GZIP])
    idempotent = rng.random() < 0.5
    if idempotent:
        start = rng.randrange(1000)  # drawn for every idempotent batch: seeds keep their data
        sequence = start if sequence is None else sequence
    data = build_batch(
        records,
        timestamps=[ts + i for i in range(count)],
        compression=compression,
        producer_id=7 if idempotent else -1,
        producer_epoch=2 if idempotent else -1,
        base_sequence=sequence if idempotent and sequence is not None else -1,
    )
    return data, sequence + count if idempotent and sequence is not None else sequence


def build_broker_dir(
    root: Path,
    seed: int,
    *,
    partitions: int = 1,
    batches: int = 80,
    keys: int = 12,
    hw_fraction: float = 0.8,
    props: dict[str, object] | None = None,
    keyless_at: int | None = None,
) -> BrokerDir:
    """A stopped broker's log dir written by the storage engine: `batches` producer batches per
    partition (keys from a small key space, ~15% tombstones, some gzip, some idempotent), one
    millisecond apart, HW checkpoint at `hw_fraction` of the log end, clean shutdown."""
    rng = random.Random(seed)
    data_dir = root / "broker-0"
    clock = ManualClock(0, wall_offset_ms=WALL_MS)
    topic_props = dict(COMPACT_PROPS if props is None else props)
    manager = LogManager(LogManagerConfig(log_dirs=(str(data_dir),)), clock)
    manager.open()
    manager.set_topic_config(TOPIC, topic_props)
    hws: dict[int, int] = {}
    for p in range(partitions):
        log = manager.get_or_create_log(TopicPartition(TOPIC, p))
        sequence: int | None = None
        for i in range(batches):
            clock.advance(1)
            ts = clock.wall_ms()
            data, sequence = _producer_batch(rng, ts, keys, sequence, keyless=i == keyless_at)
            log.append_as_leader(data, 1 + i // 30)
        hws[p] = int(log.log_end_offset * hw_fraction)
    manager.write_high_watermarks({TopicPartition(TOPIC, p): hw for p, hw in hws.items()})
    manager.shutdown()
    return BrokerDir(data_dir, seed, hws, clock.wall_ms())


def read_partition(directory: Path) -> list[tuple[BatchHeader, Record]]:
    """Every (batch header, record) of a partition directory's segments, in offset order."""
    out: list[tuple[BatchHeader, Record]] = []
    for path in sorted(directory.glob(f"*{LOG_SUFFIX}")):
        data = path.read_bytes()
        for pos, header in iter_batches(data):
            out.extend((header, record) for record in iter_records(data, pos))
    return out


def expected_after_pass(
    records: list[Record], end_offset: int, now_ms: int, horizons: dict[int, int]
) -> list[Record]:
    """Model of one pass over records below `end_offset`: the latest per key, tombstones whose
    batch horizon (by offset, from `horizons`) has passed dropped; records above kept."""
    latest = {r.key: r.offset for r in records if r.offset < end_offset}
    last = max((r.offset for r in records if r.offset < end_offset), default=-1)
    kept = []
    for r in records:
        if r.offset >= end_offset:
            kept.append(r)
        elif latest[r.key] == r.offset:
            horizon = horizons.get(r.offset)
            expired = horizon is not None and now_ms >= horizon and r.offset != last
            if not (r.value is None and expired):
                kept.append(r)
    return kept


def config(**overrides: object) -> CompactConfig:
    return CompactConfig.from_properties({**COMPACT_PROPS, **overrides})


# -- a partition with transactions ----------------------------------------------------------------

TXN_PRODUCERS = (100, 101)
OPEN_TXN_PRODUCER = 100  # the one whose transaction is still open at the end


@dataclass(frozen=True, slots=True)
class TxnPartition:
    """A partition written through `Log` with two transactional producers (committed and aborted
    transactions, interleaved), plain batches, and one transaction left open near the end."""

    directory: Path
    high_watermark: int  # the log end offset
    last_stable_offset: int  # the open transaction's first offset
    kinds: dict[int, str]  # record offset -> "plain", "committed", "aborted" or "open"
    markers: dict[int, bool]  # marker offset -> committed?
    aborted: tuple[AbortedTxn, ...]  # every .txnindex entry, in offset order


def _txn_log_config() -> LogConfig:
    return LogConfig(
        segment_bytes=SEGMENT_BYTES, index_interval_bytes=200, cleanup_policy="compact"
    )


def build_transactional_partition(
    data_dir: Path, partition: int, seed: int, *, steps: int = 110, keys: int = 6
) -> TxnPartition:
    """`<data_dir>/t-<partition>`, deterministic from `seed`, HW at the log end written to the
    dir's replication-offset-checkpoint. Few keys, so aborted records are often a key's latest
    record (compaction must not let them hide an older committed one)."""
    rng = random.Random(seed)
    clock = ManualClock(0, wall_offset_ms=WALL_MS)
    log = Log.open(data_dir / f"{TOPIC}-{partition}", _txn_log_config(), clock)
    kinds: dict[int, str] = {}
    markers: dict[int, bool] = {}
    sequences = dict.fromkeys(TXN_PRODUCERS, 0)
    pending: dict[int, list[int]] = {pid: [] for pid in TXN_PRODUCERS}  # open txn's offsets

    def append(pid: int) -> None:
        count = rng.randint(1, 3)
        clock.advance(1)
        transactional = pid >= 0
        # Transactions also write keys of their own, so some committed record is its key's
        # latest; the shared keys let aborted records follow committed ones.
        space = keys + 3 if transactional else keys
        records = [(b"k%d" % rng.randrange(space), rng.randbytes(8)) for _ in range(count)]
        data = build_batch(
            records,
            base_timestamp=clock.wall_ms(),
            producer_id=pid,
            producer_epoch=0 if transactional else -1,
            base_sequence=sequences[pid] if transactional else -1,
            is_transactional=transactional,
        )
        info = log.append_as_leader(data, 1)
        offsets = list(range(info.first_offset, info.last_offset + 1))
        if transactional:
            sequences[pid] += count
            pending[pid].extend(offsets)
        else:
            kinds.update(dict.fromkeys(offsets, "plain"))

    def end(pid: int, commit: bool) -> None:
        clock.advance(1)
        info = log.append_end_txn_marker(pid, 0, 0, commit=commit, leader_epoch=1)
        markers[info.first_offset] = commit
        kinds.update(dict.fromkeys(pending[pid], "committed" if commit else "aborted"))
        pending[pid] = []

    for _ in range(steps):
        roll = rng.random()
        pid = rng.choice(TXN_PRODUCERS)
        if roll < 0.3:
            append(-1)
        elif pending[pid] and roll < 0.55:
            end(pid, commit=rng.random() < 0.5)
        else:
            append(pid)
    for pid in TXN_PRODUCERS:
        if pending[pid]:
            end(pid, commit=False)
    append(OPEN_TXN_PRODUCER)  # left open: the cleanable range must stop before it
    for _ in range(30):  # enough to roll past the open transaction's segment
        append(-1)
    kinds.update(dict.fromkeys(pending[OPEN_TXN_PRODUCER], "open"))
    high_watermark = log.log_end_offset
    log.update_high_watermark(high_watermark)
    stable = log.last_stable_offset
    aborted = tuple(e for s in log.segments for e in s.txn_index.all_entries())
    log.close()
    checkpoint = OffsetCheckpointFile(data_dir / REPLICATION_OFFSET_CHECKPOINT)
    offsets = checkpoint.read()
    offsets[TopicPartition(TOPIC, partition)] = high_watermark
    checkpoint.write(offsets)
    return TxnPartition(
        data_dir / f"{TOPIC}-{partition}", high_watermark, stable, kinds, markers, aborted
    )


def reopen_txn_partition(txns: TxnPartition, *, clean: bool) -> Log:
    """The partition opened as a broker does, after a clean shutdown (producer state from its
    snapshot) or not (every segment recovered, every .txnindex rebuilt by replay)."""
    return Log.open(
        txns.directory,
        _txn_log_config(),
        ManualClock(0, wall_offset_ms=WALL_MS),
        high_watermark=txns.high_watermark,
        had_clean_shutdown=clean,
    )


def txn_index_entries(directory: Path) -> dict[int, list[AbortedTxn]]:
    """Every segment's .txnindex entries, by segment base offset (segments without one: [])."""
    out: dict[int, list[AbortedTxn]] = {}
    for path in sorted(directory.glob(f"*{LOG_SUFFIX}")):
        base = int(path.name.split(".")[0])
        index = TransactionIndex(path.with_suffix(".txnindex"), base)
        index.sanity_check()
        out[base] = index.all_entries()
        index.close()
    return out


def marker_transactions_with_data(directory: Path) -> dict[int, bool]:
    """For each marker of a producer, whether a transactional batch of its transaction (since
    the producer's previous marker) is in the partition's segments."""
    has_data: dict[int, bool] = {}
    open_with_data: set[int] = set()
    seen: set[int] = set()
    for header, _ in read_partition(directory):
        if header.base_offset in seen or header.producer_id < 0:
            continue
        seen.add(header.base_offset)
        if header.is_control:
            has_data[header.base_offset] = header.producer_id in open_with_data
            open_with_data.discard(header.producer_id)
        elif header.is_transactional:
            open_with_data.add(header.producer_id)
    return has_data


def txn_index_findings(directory: Path) -> list[Finding]:
    """`ketch verify`'s marker/.txnindex check of one partition dir, without Spark: the scan
    functions its tasks use, then `txn_findings`."""
    batches: list[BatchRow] = []
    entries: list[TxnEntryRow] = []
    for path in sorted(directory.glob(f"*{LOG_SUFFIX}")):
        base = int(path.name.split(".")[0])
        scanned = list(scan_segment(path))
        controls = [i for i, b in enumerate(scanned) if b.attributes and b.attributes & 0x20]
        types = control_types(path, scanned, controls)
        for i, b in enumerate(scanned):
            assert b.reason is None, b
            assert b.attributes is not None
            batches.append(
                BatchRow(
                    base, b.position, b.base_offset, b.last_offset, b.leader_epoch, b.size_bytes,
                    b.stored_crc, None, b.producer_id, b.producer_epoch, b.base_sequence,
                    bool(b.attributes & 0x20), bool(b.attributes & 0x10), types.get(i),
                )
            )  # fmt: skip
        found, problem = read_txn_index(path, base)
        assert problem is None, problem
        entries.extend(
            TxnEntryRow(base, slot, e.producer_id, e.first_offset, e.last_offset)
            for slot, e in enumerate(found)
        )
    findings, _ = txn_findings(("dir", TOPIC, 0), batches, entries)
    return findings


def txn_survivors(txns: TxnPartition, records: list[Record], end_offset: int) -> set[int]:
    """Model of one pass over a `TxnPartition` below `end_offset`: the latest record per key
    among the committed and plain ones (an aborted record never counts)."""
    latest: dict[bytes | None, int] = {}
    for record in records:
        if record.offset < end_offset and txns.kinds[record.offset] in ("plain", "committed"):
            latest[record.key] = record.offset
    return set(latest.values())


def check_txn_index_entries(txns: TxnPartition, markers: set[int], label: str) -> None:
    """Each segment's .txnindex holds exactly the original entries of the ABORT markers left in
    it (an old segment's index surviving an install would hold others), and verify's
    marker/index check passes."""
    entries = txn_index_entries(txns.directory)
    bases = sorted(entries)
    for at, base in enumerate(bases):
        following = bases[at + 1] if at + 1 < len(bases) else 1 << 62
        want = [
            e
            for e in txns.aborted
            if base <= e.last_offset < following and e.last_offset in markers
        ]
        assert entries[base] == want, f"{label}: segment {base}"
    assert txn_index_findings(txns.directory) == [], label


def last_batch_below(directory: Path, end_offset: int) -> set[int]:
    """The offsets of the last batch below `end_offset`: a cleaned range's last batch, which a
    pass never drops."""
    last = [h for h, _ in read_partition(directory) if h.last_offset < end_offset][-1]
    return set(range(last.base_offset, last.last_offset + 1))


def check_first_txn_pass(
    txns: TxnPartition, before: list[Record], end_offset: int, label: str
) -> None:
    """What one pass over [log start, `end_offset`) of a `TxnPartition` must leave: aborted
    records gone (but in the range's last batch), the latest committed or plain record per key,
    everything above the range, every marker (with a delete horizon once its transaction has no
    data), .txnindex files holding the original entries of the ABORT markers in them, and a log
    that reopens with the same end and last stable offset, from its producer snapshot and by a
    full recovery (which replays every marker: one dropped before its data would leave a
    transaction open forever)."""
    after = read_partition(txns.directory)
    records = {r.offset for h, r in after if not h.is_control}
    markers = {h.base_offset: h for h, _ in after if h.is_control}
    tail = last_batch_below(txns.directory, end_offset)
    assert any(k == "aborted" and o < end_offset for o, k in txns.kinds.items()), label
    for offset, kind in txns.kinds.items():
        if offset >= end_offset:
            assert offset in records, f"{label}: {offset} above the range"
        elif kind == "aborted":
            assert (offset in records) == (offset in tail), f"{label}: aborted {offset}"
    kept = {o for o in records if o < end_offset and txns.kinds[o] != "aborted"}
    assert kept == txn_survivors(txns, before, end_offset), label
    assert any(txns.kinds[o] == "committed" for o in kept), label
    assert sorted(markers) == sorted(txns.markers), label
    with_data = marker_transactions_with_data(txns.directory)
    for offset, header in markers.items():
        if offset < end_offset:
            assert header.has_delete_horizon == (not with_data[offset]), f"{label}: {offset}"
    check_txn_index_entries(txns, set(markers), label)
    for clean in (True, False):
        log = reopen_txn_partition(txns, clean=clean)
        try:
            assert log.log_end_offset == txns.high_watermark, label
            assert log.last_stable_offset == txns.last_stable_offset, f"{label}: clean={clean}"
            assert not log.recovery_report.rebuilt_indexes, label
        finally:
            log.close()
