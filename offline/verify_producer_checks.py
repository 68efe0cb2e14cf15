"""`ketch verify`'s check of idempotent producers' batches, per replica: pure functions.

The rules the log keeps (`runtime.log.producer_state`, Kafka's ProducerStateManager): per
partition and producer id, the producer epoch never goes back; within one epoch, sequences number
the producer's records, so a batch's base sequence follows the previous batch's last sequence
(base sequence + last offset delta; after INT32_MAX comes 0), and a retried batch (same epoch and
sequence range) is answered from the log, never appended twice. A new epoch may start at any
sequence (0 normally; a KIP-360 epoch bump or a producer whose state expired may start elsewhere).

Which batches are judged: a replica's valid batches below its limit (the `Checked` batches of
`offline.verify_checks`, or all batches of a `plainly_clean` replica) with a producer id >= 0 and
a base sequence >= 0, control batches excepted (a transaction marker carries the producer's
epoch but no sequence). In file order, the order the log was appended in (offsets out of order
are `offline.verify_checks`'s findings).

Findings (they make verify fail):

* ``duplicate_sequence`` — a batch with the (producer id, epoch, base sequence, last sequence)
  of an earlier batch of the replica: the double write idempotence exists to prevent. Offsets:
  the later copy's; the detail names the earlier one's. "Earlier" reaches back
  `SEQUENCE_REACH` sequences (half the int32 space) of that producer epoch: a producer that
  wrapped past INT32_MAX writes the same range again legitimately, a whole lap later.
* ``producer_epoch_decreasing`` — a batch whose epoch is below an earlier batch's of the same
  producer id (the leader fences that: INVALID_PRODUCER_EPOCH). It is reported and otherwise
  ignored: the producer stays at its higher epoch for the batches after it.

Sequence gaps are not findings and do not fail verify: a batch whose base sequence is not the
previous batch's (same producer id and epoch) last sequence + 1 is a `SequenceGap`. Compaction
removes batches, retention moves the log start, and a producer whose state expired
(``producer.id.expiration.ms``) may resume at any sequence, so a gap says "look here", not
"corrupt". The job counts them per replica and keeps the first few in the report's stats. A
duplicate does not move the producer on: the batch after it is judged against the original.

Fast path, as in `offline.verify_checks`: a `plainly_clean` replica without a producer id costs
one ``max`` (`has_producer_batches`); with some, `plainly_in_sequence` tests its columns with
whole-list operations (measured: 0.12 s for 100k batches of 8 interleaved producers, against
0.3 s for `producer_findings`, and 0.01 s for `plainly_clean` itself: grouping the batches by
producer needs a sort and a dozen new lists), and only a replica it does not pass is judged
batch by batch. A seeded test checks that the fast path never passes what
`producer_findings` would report.

Memory: per producer id, the sequence ranges of its current epoch (one dict entry per batch), of
the order of the replica's batch columns the driver already holds. Pure functions over values
they are given: nothing shared, no locks.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from offline.verify_checks import BatchRow, Columns, Finding
from runtime.log.producer_state import decrement_sequence, increment_sequence

SEQUENCE_REACH: Final = 1 << 30  # how far back (in sequences) a duplicate is looked for
_SEQUENCE_MODULUS: Final = 1 << 31  # as `runtime.log.producer_state` counts
_BASE, _LAST, _PRODUCER_ID, _PRODUCER_EPOCH, _BASE_SEQUENCE, _IS_CONTROL = map(
    BatchRow._fields.index,
    ("base_offset", "last_offset", "producer_id", "producer_epoch", "base_sequence", "is_control"),
)


@dataclass(frozen=True, slots=True)
class SequenceGap:
    """A batch whose base sequence does not follow its producer's previous batch (same epoch)."""

    broker_dir: str
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    expected_sequence: int  # the previous batch's last sequence + 1
    base_sequence: int
    offset: int  # the batch's base offset
    previous_offset: int  # the last offset of the producer's previous batch


@dataclass(slots=True)
class _Producer:
    """One producer id's state while a replica is walked."""

    epoch: int
    last_sequence: int
    last_offset: int
    # (base sequence, last sequence) -> (base offset, last offset), of the current epoch
    seen: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)


def has_producer_batches(columns: Columns) -> bool:
    """Whether a `plainly_clean` replica (every batch valid: no nulls) has a batch with a
    producer id, in C; the others need no per-batch rows for this check."""
    return bool(max(columns[_PRODUCER_ID], default=-1) >= 0)


def plainly_in_sequence(columns: Columns) -> bool:
    """True only when `producer_findings` would report nothing, no gap either, for a
    `plainly_clean` replica's columns: each producer id's batches (file order) have epochs that
    never decrease and, within an epoch, each starts right after the previous one's last
    sequence. Then no range can come back within `SEQUENCE_REACH` (batches span less than that,
    checked too), so there is no duplicate. Whole-list operations in C (a stable sort groups the
    batches by producer id), as `offline.verify_checks.plainly_clean`; anything else (control
    or unsequenced batches of a producer, a gap) goes through `producer_findings`."""
    pid = columns[_PRODUCER_ID]
    order = sorted(range(len(pid)), key=pid.__getitem__)
    producers = list(map(pid.__getitem__, order))
    order = order[bisect.bisect_left(producers, 0) :]  # the batches without a producer sort first
    if not order:
        return True
    producers = producers[-len(order) :]
    epoch, sequence, base, last, control = (
        list(map(columns[i].__getitem__, order))
        for i in (_PRODUCER_EPOCH, _BASE_SEQUENCE, _BASE, _LAST, _IS_CONTROL)
    )
    deltas = list(map(operator.sub, last, base))
    if any(control) or min(sequence) < 0 or min(epoch) < 0 or max(deltas) >= SEQUENCE_REACH:
        return False
    # Integers, not tuples, as keys: a tuple per batch costs its allocation and the collector's
    # attention (ints are not tracked), which took longer than the rest. key: (producer id,
    # epoch); start and end: (key, base sequence) and (key, the sequence expected next).
    keys = list(map(operator.or_, map(operator.lshift, producers, itertools.repeat(16)), epoch))
    if not all(map(operator.le, keys[:-1], keys[1:])):  # an epoch going back
        return False
    shifted = list(map(operator.lshift, keys, itertools.repeat(31)))
    after = map(operator.add, sequence, map(operator.add, deltas, itertools.repeat(1)))
    expected = map(operator.mod, after, itertools.repeat(_SEQUENCE_MODULUS))
    starts = list(map(operator.or_, shifted, sequence))
    ends = list(map(operator.or_, shifted, expected))
    # A batch not starting where its predecessor ended is fine only as the first of a new
    # (producer id, epoch): those starts differ from the ends in the key, the others must not.
    runs: int = sum(map(operator.ne, keys[1:], keys[:-1]))
    misses: int = sum(map(operator.ne, starts[1:], ends[:-1]))
    return misses == runs


def last_sequence(batch: BatchRow) -> int:
    """The sequence of the batch's last offset: Kafka numbers offsets, not records, so a
    compacted batch (records removed, last offset delta kept) still ends where it did."""
    assert batch.base_sequence is not None
    assert batch.base_offset is not None
    assert batch.last_offset is not None
    return increment_sequence(batch.base_sequence, batch.last_offset - batch.base_offset)


def _judged(batch: BatchRow) -> bool:
    return (
        batch.reason is None
        and batch.producer_id is not None
        and batch.producer_id >= 0
        and not batch.is_control
        and batch.base_sequence is not None
        and batch.base_sequence >= 0
    )


def producer_findings(
    key: tuple[str, str, int], batches: Iterable[BatchRow]
) -> tuple[list[Finding], list[SequenceGap]]:
    """The findings and the sequence gaps of one replica's batches (file order), as the module
    docstring says."""
    broker_dir, topic, partition = key
    found: list[Finding] = []
    gaps: list[SequenceGap] = []
    producers: dict[int, _Producer] = {}
    for b in filter(_judged, batches):
        pid, epoch = b.producer_id, b.producer_epoch
        assert pid is not None
        assert epoch is not None
        assert b.base_sequence is not None
        assert b.base_offset is not None
        assert b.last_offset is not None
        first, last = b.base_sequence, last_sequence(b)
        offsets = (b.base_offset, b.last_offset)
        producer = producers.get(pid)
        if producer is None or epoch > producer.epoch:
            producers[pid] = _Producer(epoch, last, b.last_offset, {(first, last): offsets})
            continue
        if epoch < producer.epoch:
            found.append(
                _finding(
                    key, b, "producer_epoch_decreasing",
                    f"producer {pid}: epoch {epoch} at offsets {offsets[0]}..{offsets[1]} after "
                    f"epoch {producer.epoch} (up to offset {producer.last_offset})",
                )
            )  # fmt: skip
            continue
        original = producer.seen.get((first, last))
        # How far the producer had got past this range: a lap later the range is new again.
        behind = decrement_sequence(producer.last_sequence, last)
        if original is not None and behind < SEQUENCE_REACH:
            found.append(
                _finding(
                    key, b, "duplicate_sequence",
                    f"producer {pid} epoch {epoch}: sequences {first}..{last} at offsets "
                    f"{offsets[0]}..{offsets[1]} were already written at offsets "
                    f"{original[0]}..{original[1]}",
                )
            )  # fmt: skip
            continue
        expected = increment_sequence(producer.last_sequence, 1)
        if first != expected:
            gaps.append(
                SequenceGap(
                    broker_dir, topic, partition, pid, epoch, expected, first, b.base_offset,
                    producer.last_offset,
                )
            )  # fmt: skip
        producer.seen[(first, last)] = offsets
        producer.last_sequence, producer.last_offset = last, b.last_offset
    return found, gaps


def _finding(key: tuple[str, str, int], b: BatchRow, kind: str, detail: str) -> Finding:
    broker_dir, topic, partition = key
    assert b.base_offset is not None
    assert b.last_offset is not None
    where = f"batch at byte {b.position} of segment {b.segment}"
    return Finding(
        kind, broker_dir, topic, partition, b.segment, (b.base_offset, b.last_offset),
        f"{where}: {detail}",
    )  # fmt: skip
