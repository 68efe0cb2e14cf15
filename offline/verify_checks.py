"""The checks of `ketch verify`, as pure functions over the small per-batch table.

Why not DataFrame operations: the expensive part of verification is reading and CRC-checking
every byte, which the "ketch" data source's ``verify`` level does in parallel Spark tasks. What
comes back is small (one row per batch, tens of thousands per GB, plus index findings), and
judging it as window functions and joins cost several Spark jobs, each with its own scheduling
and Arrow/JVM/Python conversions, ten times the scan itself. So the driver collects the table
once and these functions judge it in one pass per replica. Only the record-level comparison of
compacted topics (`divergent_keys`), which reads every record, stays a Spark job.

Inputs, per replica (broker dir, topic, partition): its `BatchRow`s in file order (segment,
position), its ``limit`` (check only offsets below it: the recovery point of a dir without a
clean-shutdown marker, else `NO_LIMIT`), whether the topic is compacted, and its
leader-epoch-checkpoint entries.

Checks (finding kinds):

* per batch, from the scan: ``crc_mismatch``, ``bad_magic``, ``bad_length``, ``torn_tail``,
  ``bad_codec``, ``bad_count``;
* per partition, ordered by (segment, position), between consecutive valid batches:
  ``offsets_not_increasing``, ``offset_overlap``, ``offset_gap`` (not for compacted topics),
  ``epoch_decreasing``; per segment: ``segment_base_mismatch`` (first batch's base offset
  differs from the file name's, or for a compacted topic lies below it);
* against leader-epoch-checkpoint: ``epoch_checkpoint_mismatch`` (a batch's epoch is not the
  one the checkpoint gives for its base offset), one finding per replica with the range;
* indexes: in `offline.verify_index_checks`, which runs inside the scan task;
* idempotent producers' sequences: in `offline.verify_producer_checks`;
* transaction markers against the ``.txnindex`` files: in `offline.verify_txn_checks`.

Fast path: a replica is first tested as columns (`plainly_clean`: whole-list operations in C);
only a replica that might have something to report, or whose partition's replicas differ
(`clean_spans_equal`), is judged batch by batch, by the functions that say what is wrong. A
seeded test checks that the fast path never passes what the per-batch checks would report.

Pure functions over values they are given: nothing shared, no locks.
"""

from __future__ import annotations

import bisect
import functools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

NO_LIMIT: Final = 2**63 - 1
# Kinds after which the batch's length (hence the next batch's position) is still trusted.
READABLE_KINDS: Final = frozenset({"crc_mismatch", "bad_codec", "bad_count"})
# Kinds whose header (base and last offset) was read: an index entry may rightly name them.
HEADER_KINDS: Final = READABLE_KINDS | {"torn_tail"}


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    broker_dir: str | None
    topic: str | None
    partition: int | None
    segment: int | None
    offsets: tuple[int, int] | None  # first and last offset concerned, inclusive
    detail: str


class BatchRow(NamedTuple):
    """One batch of a replica as the scan found it (a NamedTuple: one per batch, built in bulk
    from the collected columns). Offsets and epoch are None only for an unreadable header."""

    segment: int
    position: int
    base_offset: int | None
    last_offset: int | None
    leader_epoch: int | None
    size_bytes: int
    stored_crc: int | None
    reason: str | None  # None when valid; else starts with the kind token
    # For `offline.verify_producer_checks`; the defaults (a batch without a producer) keep
    # rows made by hand short.
    producer_id: int | None = -1
    producer_epoch: int | None = -1
    base_sequence: int | None = -1
    is_control: bool | None = False
    # For `offline.verify_txn_checks`: a control batch's record's type (0 ABORT, 1 COMMIT).
    is_transactional: bool | None = False
    control_type: int | None = None


class Checked(NamedTuple):
    """A batch below its replica's limit, with its place: the base offset when valid, else the
    offset after the previous batch of the partition (an invalid batch's offsets are not
    trusted), or the segment's base offset when it comes first. (A NamedTuple: one per batch.)"""

    batch: BatchRow
    place: int
    kind: str | None


@dataclass(frozen=True, slots=True)
class ReplicaSummary:
    first_offset: int
    next_offset: int
    batches: int
    bytes: int


def kind_of(reason: str | None) -> str | None:
    return None if reason is None else reason.split(":", 1)[0]


def checked_batches(batches: Sequence[BatchRow], limit: int) -> list[Checked]:
    """`batches` in file order; those whose place lies below `limit`."""
    out: list[Checked] = []
    prev_last: int | None = None
    first = True
    for batch in batches:
        if batch.reason is None:
            assert batch.base_offset is not None
            place = batch.base_offset
        elif not first and prev_last is not None:
            place = prev_last + 1
        else:
            place = batch.segment
        if place < limit:
            out.append(Checked(batch, place, kind_of(batch.reason)))
        prev_last, first = batch.last_offset, False
    return out


def invalid_batch_findings(key: tuple[str, str, int], checked: Iterable[Checked]) -> list[Finding]:
    broker_dir, topic, partition = key
    found = []
    for c in checked:
        b = c.batch
        if b.reason is None:
            continue
        assert c.kind is not None
        offsets: tuple[int, int] | None
        if c.kind in HEADER_KINDS:
            first, last = b.base_offset, b.last_offset
            offsets = None if first is None else (first, first if last is None else last)
        else:
            offsets = (c.place, c.place)
        found.append(
            Finding(
                c.kind, broker_dir, topic, partition, b.segment, offsets,
                f"batch at byte {b.position}: {b.reason}",
            )
        )  # fmt: skip
    return found


def ordering_findings(
    key: tuple[str, str, int], checked: Iterable[Checked], compacted: bool
) -> list[Finding]:
    """Offsets and epochs between consecutive batches, judged only when both are valid (an
    invalid batch is reported once, by its own kind, not again by its neighbours); batches
    whose length is untrusted do not count as neighbours."""
    broker_dir, topic, partition = key
    found: list[Finding] = []
    prev: BatchRow | None = None
    for c in checked:
        b = c.batch
        if b.reason is not None and c.kind not in READABLE_KINDS:
            continue
        if b.reason is None and prev is not None and prev.reason is None:
            assert b.base_offset is not None
            assert prev.last_offset is not None
            # The common case in one comparison chain; the details only when it fails.
            follows = b.base_offset == prev.last_offset + 1 or (
                compacted and b.base_offset > prev.last_offset
            )
            if not follows or (b.leader_epoch or 0) < (prev.leader_epoch or 0):
                found.extend(_order_pair(broker_dir, topic, partition, prev, b, compacted))
        prev = b
    return found


def _order_pair(
    broker_dir: str, topic: str, partition: int, prev: BatchRow, b: BatchRow, compacted: bool
) -> list[Finding]:
    base, last, epoch = b.base_offset, b.last_offset, b.leader_epoch
    p_base, p_last, p_epoch = prev.base_offset, prev.last_offset, prev.leader_epoch
    assert base is not None
    assert last is not None
    assert epoch is not None
    assert p_base is not None
    assert p_last is not None
    assert p_epoch is not None
    where = f"batch at byte {b.position} of segment {b.segment}"
    if b.segment != prev.segment:
        where += f" (previous batch in segment {prev.segment})"
    span, prev_span = f"{base}..{last}", f"{p_base}..{p_last}"

    def finding(kind: str, first: int, end: int, detail: str) -> Finding:
        return Finding(kind, broker_dir, topic, partition, b.segment, (first, end), detail)

    found = []
    if base <= p_base:
        found.append(
            finding(
                "offsets_not_increasing", base, last, f"{where}: offsets {span} after {prev_span}"
            )
        )
    elif base <= p_last:
        found.append(
            finding(
                "offset_overlap", base, min(p_last, last),
                f"{where}: offsets {span} overlap {prev_span}",
            )
        )  # fmt: skip
    if not compacted and base > p_last + 1:
        found.append(
            finding(
                "offset_gap", p_last + 1, base - 1,
                f"{where}: offsets {p_last + 1}..{base - 1} missing",
            )
        )  # fmt: skip
    if epoch < p_epoch:
        found.append(
            finding(
                "epoch_decreasing", base, last, f"{where}: leader epoch {epoch} after {p_epoch}"
            )
        )
    return found


def segment_base_findings(
    key: tuple[str, str, int], checked: Iterable[Checked], compacted: bool
) -> list[Finding]:
    broker_dir, topic, partition = key
    firsts: dict[int, tuple[int, int]] = {}  # segment -> (position, base) of its first valid batch
    for c in checked:
        b = c.batch
        if b.reason is not None:
            continue
        assert b.base_offset is not None
        seen = firsts.get(b.segment)
        if seen is None or b.position < seen[0]:
            firsts[b.segment] = (b.position, b.base_offset)
    found = []
    for segment, (_, first_base) in firsts.items():
        wrong = first_base < segment if compacted else first_base != segment
        if wrong:
            found.append(
                Finding(
                    "segment_base_mismatch", broker_dir, topic, partition, segment,
                    (first_base, first_base),
                    f"segment {segment} starts with a batch at offset {first_base}",
                )
            )  # fmt: skip
    return found


def epoch_checkpoint_findings(
    key: tuple[str, str, int], checked: Iterable[Checked], epochs: Sequence[tuple[int, int]]
) -> list[Finding]:
    """`epochs`: the replica's leader-epoch-checkpoint entries ``(epoch, start offset)``; each
    governs the offsets from its start to the next entry's. One finding per replica."""
    if not epochs:
        return []
    ranges = sorted(epochs, key=lambda e: e[1])
    starts = [start for _, start in ranges]
    first: int | None = None
    last = 0
    count = 0
    example = (0, 0)
    for c in checked:
        b = c.batch
        if b.reason is not None or b.leader_epoch is None or b.leader_epoch < 0:
            continue
        assert b.base_offset is not None
        assert b.last_offset is not None
        # The last entry starting at or below the base offset (of equal starts, the later one
        # governs: the earlier covers no offsets).
        at = bisect.bisect_right(starts, b.base_offset) - 1
        if at < 0 or ranges[at][0] == b.leader_epoch:
            continue
        count += 1
        last = max(last, b.last_offset)
        if first is None or b.base_offset < first:
            first, example = b.base_offset, (b.leader_epoch, ranges[at][0])
    if first is None:
        return []
    broker_dir, topic, partition = key
    return [
        Finding(
            "epoch_checkpoint_mismatch", broker_dir, topic, partition, None, (first, last),
            f"{count} batch(es) carry a leader epoch other than leader-epoch-checkpoint's; "
            f"first: {example[0]} where the checkpoint says {example[1]}",
        )
    ]  # fmt: skip


def replica_summary(checked: Iterable[Checked]) -> ReplicaSummary | None:
    """First and next offset of the valid batches, counts and bytes; None without any."""
    first: int | None = None
    next_offset = 0
    batches = size = 0
    for c in checked:
        b = c.batch
        if b.reason is not None:
            continue
        assert b.base_offset is not None
        assert b.last_offset is not None
        first = b.base_offset if first is None else min(first, b.base_offset)
        next_offset = max(next_offset, b.last_offset + 1)
        batches += 1
        size += b.size_bytes
    if first is None:
        return None
    return ReplicaSummary(first, next_offset, batches, size)


def divergent_batches(
    replicas: Sequence[tuple[str, Sequence[Checked]]], lo: int, hi: int, max_rows: int
) -> list[dict[str, Any]]:
    """Batch groups of one partition (same base offset in ``[lo, hi)``) where the replicas
    disagree: a differing (last offset, epoch, size, CRC) or a replica without it.

    Byte identity by CRC: the stored CRC covers everything but base offset and epoch, which
    are compared directly, and the size. Whether each copy matches its CRC is the scan's
    finding (``crc_mismatch``), not a divergence: a flipped bit is reported once.

    Returns dicts ``base_offset, last_offset, replicas: [{broker_dir, variant}]`` in offset
    order, at most `max_rows`; a variant is a tuple to compare, not to show.
    """
    spans = [(broker_dir, _variants(checked, lo, hi)) for broker_dir, checked in replicas]
    if all(variants == spans[0][1] for _, variants in spans[1:]):
        return []  # byte-identical replicas, the common case: one list comparison in C
    groups: dict[int, list[tuple[str, tuple[int | None, ...]]]] = {}
    for broker_dir, variants in spans:
        for variant in variants:
            groups.setdefault(variant[0] or 0, []).append((broker_dir, variant[1:]))
    out: list[dict[str, Any]] = []
    for base in sorted(groups):
        members = groups[base]
        if len({v for _, v in members}) > 1 or len(members) < len(replicas):
            out.append(
                {
                    "base_offset": base,
                    "last_offset": max(v[0] or 0 for _, v in members),
                    "replicas": [{"broker_dir": b, "variant": v} for b, v in members],
                }
            )
            if len(out) >= max_rows:
                break
    return out


def _variants(checked: Iterable[Checked], lo: int, hi: int) -> list[tuple[int | None, ...]]:
    """What replicas must agree on for each batch placed in ``[lo, hi)``: (base offset, last
    offset, epoch, size, CRC), a slice of the `BatchRow` (taken in C)."""
    return [
        b[2:7]
        for b in (c.batch for c in checked)
        if b.base_offset is not None and lo <= b.base_offset < hi
    ]


def divergent_keys(records: Any, bounds: Any, max_rows: int, aborted: Any = None) -> Any:
    """For compacted topics (a Spark job over the record level): keys whose latest record below
    ``hi`` differs between replicas.

    A replica's state of a key is its latest record's (offset, value hash), or absent when the
    latest is a tombstone or the key is gone (a cleaner may drop tombstones). The records of
    `aborted` (broker_dir, topic, partition, batch_base_offset: batches of aborted
    transactions, which a cleaner removes) do not count. Returns (topic, partition, key, states:
    array<struct<broker_dir, offset, state>>, n_replicas).
    """
    from pyspark.sql import functions as F

    if aborted is not None:
        location = ["broker_dir", "topic", "partition", "batch_base_offset"]
        records = records.join(F.broadcast(aborted), location, "left_anti")
    rows = (
        records.where(F.col("key").isNotNull() & ~F.col("is_control"))
        .join(F.broadcast(bounds), ["topic", "partition"])
        .where((F.col("offset") >= F.col("lo")) & (F.col("offset") < F.col("hi")))
    )
    latest = rows.groupBy("broker_dir", "topic", "partition", "key", "n_replicas").agg(
        F.max_by(F.struct("offset", "value"), "offset").alias("latest")
    )
    present = latest.where(F.col("latest.value").isNotNull()).select(
        "broker_dir",
        "topic",
        "partition",
        "key",
        "n_replicas",
        F.col("latest.offset").alias("offset"),
        F.concat_ws("/", F.col("latest.offset"), F.sha2(F.col("latest.value"), 256)).alias("state"),
    )
    grouped = present.groupBy("topic", "partition", "key", "n_replicas").agg(
        F.collect_list(F.struct("broker_dir", "offset", "state")).alias("states"),
        F.countDistinct("state").alias("variants"),
    )
    return (
        grouped.where((F.col("variants") > 1) | (F.size("states") < F.col("n_replicas")))
        .orderBy("topic", "partition", "key")
        .limit(max_rows)
    )


# -- the fast path: a replica whose columns show nothing to report ----------------------------

# A replica's batches as columns in file order, in `BatchRow` field order: segment, position,
# base_offset, last_offset, leader_epoch, size_bytes, stored_crc, reason, producer_id,
# producer_epoch, base_sequence, is_control, is_transactional, control_type.
Columns = tuple[list[Any], ...]
_SEGMENT, _POSITION, _BASE, _LAST, _EPOCH, _SIZE, _CRC, _REASON = range(8)
_new_row: Final = functools.partial(tuple.__new__, BatchRow)


def rows_of(columns: Columns) -> list[BatchRow]:
    return list(map(_new_row, zip(*columns, strict=True)))


def plainly_clean(
    columns: Columns, compacted: bool, limit: int, epochs: Sequence[tuple[int, int]]
) -> bool:
    """True only when none of the per-replica checks above could report anything: every batch
    valid and below the limit, each following the previous (offsets contiguous, or only
    increasing for a compacted topic), epochs not decreasing and as the checkpoint says, each
    segment starting at its base offset. Whole-list operations (slices, comparisons, `count`,
    `bisect`) run in C, so a clean GB costs milliseconds; anything else goes through the
    per-batch functions, which say what is wrong."""
    segment, base, last, epoch = (columns[i] for i in (_SEGMENT, _BASE, _LAST, _EPOCH))
    n = len(base)
    if limit != NO_LIMIT or columns[_REASON].count(None) != n:
        return False
    if n == 0:
        return True
    if compacted:
        follows = all(map(operator.gt, base[1:], last[:-1]))
    else:
        follows = base[1:] == [x + 1 for x in last[:-1]]
    if not follows or not all(map(operator.le, epoch[:-1], epoch[1:])) or epoch[0] < 0:
        return False
    for seg in dict.fromkeys(segment):  # in order; the first batch of each segment
        first = base[segment.index(seg)]
        if first < seg if compacted else first != seg:
            return False
    ranges = sorted(epochs, key=lambda e: e[1])
    for at, (expected, start) in enumerate(ranges):
        end = ranges[at + 1][1] if at + 1 < len(ranges) else NO_LIMIT
        lo, hi = bisect.bisect_left(base, start), bisect.bisect_left(base, end)
        if epoch[lo:hi].count(expected) != hi - lo:
            return False
    return True


def clean_summary(columns: Columns) -> ReplicaSummary | None:
    """`replica_summary` of a `plainly_clean` replica (offsets increase, so the ends are the
    first and last batch's)."""
    base, last = columns[_BASE], columns[_LAST]
    if not base:
        return None
    return ReplicaSummary(base[0], last[-1] + 1, len(base), sum(columns[_SIZE]))


def clean_spans_equal(replicas: Sequence[Columns], lo: int, hi: int) -> bool:
    """Whether `plainly_clean` replicas hold the same batches (base, last, epoch, size, CRC) in
    ``[lo, hi)``: list equality in C; when not, `divergent_batches` says where."""
    spans = []
    for columns in replicas:
        base = columns[_BASE]
        a, b = bisect.bisect_left(base, lo), bisect.bisect_left(base, hi)
        spans.append([columns[i][a:b] for i in (_BASE, _LAST, _EPOCH, _SIZE, _CRC)])
    return all(span == spans[0] for span in spans[1:])
