"""One partition's producer state (Kafka's ProducerStateManager): idempotence and transactions.

Per producer id it keeps the epoch, the last `NUM_BATCHES_TO_RETAIN` (5) data batches appended
(sequence range, offsets, timestamp), the coordinator epoch of the last transaction marker and
the first offset of the ongoing transaction, if any. From that:

* `check` — the leader's rules for one produced batch, before it is appended, in Kafka's order
  (the first that applies wins):

  ==============================================================  =============================
  producer id < 0 (not idempotent), or no entry for the producer  Accepted (any sequence;
  (new, expired, or its batches deleted by retention)             KIP-360)
  same epoch, same (first_seq, last_seq) as one of the 5 batches  Duplicate(that batch)
  epoch below the entry's                                         INVALID_PRODUCER_EPOCH
  epoch above the entry's and first_seq != 0                      OUT_OF_ORDER_SEQUENCE_NUMBER
  same epoch, first_seq != last_seq + 1 (INT32_MAX wraps to 0;    OUT_OF_ORDER_SEQUENCE_NUMBER
  with no batch yet, e.g. after a marker, it must be 0)
  non-transactional batch while a transaction is ongoing          INVALID_TXN_STATE
  ==============================================================  =============================

  A batch a coordinator of this broker writes (`AppendOrigin.COORDINATOR`: the group
  coordinator's transactional offset commits, written with the producer's id and epoch but
  sequences of its own) skips the duplicate and sequence rows, as Kafka's AppendOrigin.COORDINATOR
  does: the producer numbers only the batches it sends itself, so the coordinator's cannot
  follow them, and two commits of the same size would read as a retry. The epoch row still
  applies, so a fenced producer's late commit is refused.

* `update`, `complete_txn`, `update_from_batch` — fold in what was appended. They never reject:
  leader appends (after `check`), follower appends and recovery replay build the same state.
* `first_unstable_offset` — the first offset of the oldest ongoing transaction (for the LSO).
* `remove_expired` — producers idle for ``producer.id.expiration.ms`` without an ongoing
  transaction are forgotten.
* Snapshots — ``%020d.snapshot`` files (layout in `runtime.log.producer_snapshot`) named by the
  map end offset: one past the last offset folded in. `truncate_and_reload` rebuilds the state
  from the newest snapshot in ``[log start, log end]`` and answers the offset from which the
  owner must replay the log's batches through `update_from_batch`.

The owner (the partition's `Log`) calls `truncate_and_reload` when it opens the log and after a
truncation, `take_snapshot` on segment roll and clean shutdown, `delete_snapshots_below` with
retention. Owned by that log, hence by one actor: no locks. Snapshot writes, reloads and deletes
block (file I/O, fsync); everything else is in memory.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final, TypeAlias

from runtime.log.errors import CorruptSnapshotError
from runtime.log.producer_snapshot import NO_OFFSET, SnapshotEntry, SnapshotFiles
from wire.errors import ErrorCode
from wire.records import NO_PRODUCER_EPOCH, NO_SEQUENCE, NO_TIMESTAMP, BatchHeader

logger = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN: Final = 5
UNKNOWN_COORDINATOR_EPOCH: Final = -1
CONTROL_TYPE_ABORT: Final = 0  # Kafka's ControlRecordType ids, from the control record key
CONTROL_TYPE_COMMIT: Final = 1
_SEQUENCE_MODULUS: Final = 1 << 31  # sequences are non-negative int32s


class AppendOrigin(enum.Enum):
    """Who asks for a leader append (Kafka's AppendOrigin; a follower's appends have a path of
    their own, `Log.append_as_follower`)."""

    CLIENT = enum.auto()  # a producer's request: every rule of `check`
    COORDINATOR = enum.auto()  # a coordinator on this broker: no duplicate or sequence rules


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's sequence arithmetic: after INT32_MAX comes 0."""
    return (sequence + increment) % _SEQUENCE_MODULUS


def decrement_sequence(sequence: int, decrement: int) -> int:
    return (sequence - decrement) % _SEQUENCE_MODULUS


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended data batch of a producer."""

    first_seq: int
    last_seq: int
    last_offset: int
    offset_delta: int  # last_offset - first_offset
    timestamp: int

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    """What one producer id has appended; `batch_metadata` holds the last 5, oldest first."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int = UNKNOWN_COORDINATOR_EPOCH
    current_txn_first_offset: int | None = None
    last_timestamp: int = NO_TIMESTAMP
    batch_metadata: deque[BatchMetadata] = field(default_factory=deque)

    def __post_init__(self) -> None:
        # The bound is the retention rule itself: appending to a full deque drops the oldest.
        self.batch_metadata = deque(self.batch_metadata, maxlen=NUM_BATCHES_TO_RETAIN)

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else NO_OFFSET

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for batch in self.batch_metadata:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def maybe_update_producer_epoch(self, producer_epoch: int) -> None:
        """Another epoch starts a new sequence space: the old batches can no longer match."""
        if producer_epoch != self.producer_epoch:
            self.batch_metadata.clear()
            self.producer_epoch = producer_epoch


@dataclass(frozen=True, slots=True)
class Accepted:
    """`check` found nothing against the batch: append it."""


ACCEPTED: Final = Accepted()


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of a batch already in the log: answer NONE with `metadata`'s offsets."""

    metadata: BatchMetadata


SequenceCheck: TypeAlias = Accepted | Duplicate | ErrorCode


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker: data from `first_offset`, marker at `last_offset`."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing_txns: dict[int, int] = {}  # first offset -> producer id
        self._map_end_offset = 0
        self._snapshots = SnapshotFiles(directory)

    # -- state ----------------------------------------------------------------------------------

    @property
    def map_end_offset(self) -> int:
        """One past the last offset folded into the state."""
        return self._map_end_offset

    def update_map_end_offset(self, offset: int) -> None:
        """Advance past batches without producer state (non-idempotent ones), as Kafka's log does
        on every append, so that snapshot names keep up with the log."""
        self._map_end_offset = max(self._map_end_offset, offset)

    @property
    def active_producers(self) -> Mapping[int, ProducerStateEntry]:
        """A read-only view; the entries are the live ones and must not be changed."""
        return MappingProxyType(self._producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def first_unstable_offset(self) -> int | None:
        return min(self._ongoing_txns, default=None)

    # -- the leader's checks --------------------------------------------------------------------

    def check(
        self,
        producer_id: int,
        producer_epoch: int,
        first_seq: int,
        last_seq: int,
        *,
        is_transactional: bool,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> SequenceCheck:
        """The rules of the module docstring for one batch to append as leader. Changes
        nothing."""
        if producer_id < 0:
            return ACCEPTED
        entry = self._producers.get(producer_id)
        if entry is None:
            return ACCEPTED
        current_epoch = entry.producer_epoch
        client = origin is AppendOrigin.CLIENT
        if client and producer_epoch == current_epoch:
            duplicate = entry.find_duplicate(first_seq, last_seq)
            if duplicate is not None:
                return Duplicate(duplicate)
        if producer_epoch < current_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        # An entry without an epoch (never written by a real producer) fences nothing, as the
        # absent entry does.
        if client and current_epoch != NO_PRODUCER_EPOCH:
            if producer_epoch != current_epoch:
                if first_seq != 0:
                    return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            elif first_seq != increment_sequence(entry.last_seq, 1):
                # last_seq is -1 (NO_SEQUENCE) with no batch yet, so only 0 follows it.
                return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        if entry.current_txn_first_offset is not None and not is_transactional:
            return ErrorCode.INVALID_TXN_STATE
        return ACCEPTED

    def check_end_txn_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> ErrorCode | None:
        """The leader's checks of a COMMIT/ABORT marker (WriteTxnMarkers) before appending it."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return None
        if producer_epoch < entry.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if coordinator_epoch < entry.coordinator_epoch:
            return ErrorCode.TRANSACTION_COORDINATOR_FENCED
        return None

    # -- folding in appended batches ------------------------------------------------------------

    def update(
        self,
        producer_id: int,
        producer_epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp: int,
        *,
        is_transactional: bool,
    ) -> None:
        """Fold in one appended data batch (leader, follower or replay alike)."""
        self.update_map_end_offset(last_offset + 1)
        if producer_id < 0:
            return
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id, producer_epoch)
        entry.maybe_update_producer_epoch(producer_epoch)
        entry.batch_metadata.append(
            BatchMetadata(first_seq, last_seq, last_offset, last_offset - first_offset, timestamp)
        )
        entry.last_timestamp = timestamp
        if is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset
            self._ongoing_txns[first_offset] = producer_id

    def complete_txn(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        marker_offset: int,
        timestamp: int,
        *,
        is_aborted: bool,
    ) -> CompletedTxn | None:
        """Fold in an appended COMMIT/ABORT marker; the transaction it ended, if one was open."""
        self.update_map_end_offset(marker_offset + 1)
        entry = self._producers.get(producer_id)
        if entry is None:
            # A marker alone still fences: its epoch and coordinator epoch are remembered.
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id, producer_epoch)
        completed = None
        first_offset = entry.current_txn_first_offset
        if first_offset is not None:
            completed = CompletedTxn(producer_id, first_offset, marker_offset, is_aborted)
            del self._ongoing_txns[first_offset]
        entry.maybe_update_producer_epoch(producer_epoch)
        entry.current_txn_first_offset = None
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp
        return completed

    def update_from_batch(
        self,
        header: BatchHeader,
        control_type: int | None = None,
        coordinator_epoch: int | None = None,
    ) -> CompletedTxn | None:
        """Fold in one appended batch from its header (follower appends, replay).

        For a control batch the caller parses its record: `control_type` from the key (0 ABORT,
        1 COMMIT) and `coordinator_epoch` from the value; None for both when the batch holds no
        record (the cleaner emptied it), which changes nothing but the map end offset.
        """
        if header.producer_id < 0:
            self.update_map_end_offset(header.next_offset)
            return None
        if not header.is_control:
            self.update(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                increment_sequence(header.base_sequence, header.last_offset_delta),
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
                is_transactional=header.is_transactional,
            )
            return None
        if control_type is None:
            self.update_map_end_offset(header.next_offset)
            return None
        is_marker = control_type in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT)
        if not is_marker or coordinator_epoch is None:
            raise ValueError(
                f"control batch at {header.base_offset}: type {control_type} with coordinator "
                f"epoch {coordinator_epoch} is not a transaction marker"
            )
        completed = self.complete_txn(
            header.producer_id,
            header.producer_epoch,
            coordinator_epoch,
            header.base_offset,
            header.max_timestamp,
            is_aborted=control_type == CONTROL_TYPE_ABORT,
        )
        self.update_map_end_offset(header.next_offset)
        return completed

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms (Kafka's test: now - last
        timestamp >= the expiration) unless a transaction of theirs is ongoing."""
        expired = [
            producer_id
            for producer_id, entry in self._producers.items()
            if entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= expiration_ms
        ]
        for producer_id in expired:
            del self._producers[producer_id]
        return len(expired)

    # -- snapshots ------------------------------------------------------------------------------

    @property
    def snapshots(self) -> SnapshotFiles:
        return self._snapshots

    def latest_snapshot_offset(self) -> int | None:
        offsets = self._snapshots.offsets
        return offsets[-1] if offsets else None

    def oldest_snapshot_offset(self) -> int | None:
        offsets = self._snapshots.offsets
        return offsets[0] if offsets else None

    def take_snapshot(self) -> Path | None:
        """Write a snapshot at the map end offset unless one exists there. Blocking (fsync)."""
        offset = self._map_end_offset
        if offset in self._snapshots:
            return None
        entries = [_to_snapshot_entry(e) for _, e in sorted(self._producers.items())]
        return self._snapshots.write(offset, entries)

    def delete_snapshots_below(self, offset: int) -> int:
        """Retention: delete snapshots below `offset`, always keeping the latest. How many went."""
        doomed = [s for s in self._snapshots.offsets[:-1] if s < offset]
        for snapshot in doomed:
            self._snapshots.delete(snapshot)
        return len(doomed)

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int) -> int:
        """Rebuild from the newest valid snapshot in [log start, log end]; returns the offset from
        which the owner must replay the log's batches (`update_from_batch`) to finish.

        Snapshots outside the range are deleted; a corrupt one is deleted with a warning and the
        next older one tried. Loaded producers whose batches all lie below the log start are
        dropped (their data is gone); those with no batch (only markers) or an ongoing
        transaction are kept, as they still fence zombies or hold back the LSO, until they expire.
        """
        if log_start_offset > log_end_offset:
            raise ValueError(f"log start {log_start_offset} above log end {log_end_offset}")
        for snapshot in self._snapshots.offsets:
            if not log_start_offset <= snapshot <= log_end_offset:
                self._snapshots.delete(snapshot)
        self._clear()
        self._map_end_offset = log_start_offset
        for snapshot in reversed(self._snapshots.offsets):
            try:
                loaded = self._snapshots.read(snapshot)
            except (CorruptSnapshotError, FileNotFoundError) as exc:
                logger.warning("deleting unusable producer snapshot: %s", exc)
                self._snapshots.delete(snapshot)
                continue
            for item in loaded:
                entry = _from_snapshot_entry(item)
                if _is_retained(entry, log_start_offset):
                    self._load_entry(entry)
            self._map_end_offset = snapshot
            break
        return self._map_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything, delete every snapshot, and start empty at `offset`."""
        for snapshot in self._snapshots.offsets:
            self._snapshots.delete(snapshot)
        self._clear()
        self._map_end_offset = offset

    # -- internals ------------------------------------------------------------------------------

    def _clear(self) -> None:
        self._producers.clear()
        self._ongoing_txns.clear()

    def _load_entry(self, entry: ProducerStateEntry) -> None:
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            self._ongoing_txns[entry.current_txn_first_offset] = entry.producer_id


def _is_retained(entry: ProducerStateEntry, log_start_offset: int) -> bool:
    return (
        not entry.batch_metadata
        or entry.current_txn_first_offset is not None
        or entry.last_data_offset >= log_start_offset
    )


def _to_snapshot_entry(entry: ProducerStateEntry) -> SnapshotEntry:
    last = entry.batch_metadata[-1] if entry.batch_metadata else None
    txn = entry.current_txn_first_offset
    return SnapshotEntry(
        producer_id=entry.producer_id,
        producer_epoch=entry.producer_epoch,
        last_sequence=last.last_seq if last else NO_SEQUENCE,
        last_offset=last.last_offset if last else NO_OFFSET,
        offset_delta=last.offset_delta if last else 0,
        timestamp=entry.last_timestamp,
        coordinator_epoch=entry.coordinator_epoch,
        current_txn_first_offset=NO_OFFSET if txn is None else txn,
    )


def _from_snapshot_entry(item: SnapshotEntry) -> ProducerStateEntry:
    entry = ProducerStateEntry(
        item.producer_id,
        item.producer_epoch,
        coordinator_epoch=item.coordinator_epoch,
        current_txn_first_offset=(
            None if item.current_txn_first_offset == NO_OFFSET else item.current_txn_first_offset
        ),
        last_timestamp=item.timestamp,
    )
    if item.last_offset >= 0:
        # The file keeps no first sequence: it follows from the last one and the offset delta,
        # since a batch's records carry consecutive sequences.
        entry.batch_metadata.append(
            BatchMetadata(
                decrement_sequence(item.last_sequence, item.offset_delta),
                item.last_sequence,
                item.last_offset,
                item.offset_delta,
                item.timestamp,
            )
        )
    return entry
