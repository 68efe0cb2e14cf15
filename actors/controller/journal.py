"""The controller's write path: a `Change` collects the records one event decides, and the
`MetadataJournal` commits them — appended to the metadata log and fsync'd first, applied to the
model only then, so nothing is acted on that a restart could forget.

A `Change` reads its own pending partition records first, so several steps of one event (elect,
then shrink ISRs) compose, and it moves a partition's epochs once per event however many steps
touched it. Which changes start a new leader epoch is decided here, in one place
(`leader_epoch_moves`): a new leader or a lost replica does, an ISR change alone does not.
The journal also replays the log into the model at startup and cuts a snapshot (the few records
that rebuild the model) every `metadata_snapshot_records` records.

Owner: the controller actor (actors/controller/controller.py). A `Change` lives for one event's
handler; the journal, and the model it applies records to, belong to the actor and are used only
from its task, one message at a time, which is why no lock guards them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from actors.controller.model import ControllerModel
from runtime.actor import ActorFatalError
from wire.metadata_records import (
    PartitionRecord,
    Record,
    RemoveTopicRecord,
    decode_record,
    encode_record,
)


class MetadataStore(Protocol):
    """The durable log the controller writes (runtime/log/metadata_log.py)."""

    def load(self) -> tuple[list[dict[str, object]], int]: ...
    async def append(self, records: list[dict[str, object]]) -> int: ...
    async def snapshot(self, records: list[dict[str, object]], last_offset: int) -> None: ...


def leader_epoch_moves(before: PartitionRecord, after: PartitionRecord) -> bool:
    """Whether going from `before` to `after` starts a new leader epoch: when the leader changes
    (to another broker or to none) or the replica set loses a member. An ISR change alone, even
    one the controller makes on broker failure or controlled shutdown, does not (KRaft since
    metadata version 3.6, KAFKA-15021): the leader goes on leading, its followers go on fetching
    under the epoch they know, and writes waiting for acks=all are not failed for nothing. The
    one rule for every change the controller writes (DESIGN.md, Epochs)."""
    return after.leader != before.leader or not set(before.replicas) <= set(after.replicas)


class Change:
    """The records one event will commit; partition lookups see the pending ones first."""

    def __init__(self, model: ControllerModel) -> None:
        self._model = model
        self.records: list[Record] = []
        self._partitions: dict[tuple[bytes, int], PartitionRecord] = {}

    def add(self, record: Record) -> None:
        if isinstance(record, PartitionRecord):
            self._partitions[(record.topic_id, record.partition)] = record
        else:
            self.records.append(record)

    def partition(self, p: PartitionRecord) -> PartitionRecord:
        return self._partitions.get((p.topic_id, p.partition), p)

    def move(
        self,
        p: PartitionRecord,
        *,
        leader: int | None = None,
        isr: Sequence[int] | None = None,
    ) -> PartitionRecord:
        """A new state for the partition (leader and/or ISR changed), based on its pending state
        within this event. The partition epoch moves on; the leader epoch only as
        `leader_epoch_moves` says, judged against the committed state, so each epoch moves at
        most once per event however many steps touched the partition."""
        current = self.partition(p)
        base = self._model.partition(p.topic_id, p.partition)
        assert base is not None, p
        changed = replace(
            current,
            leader=current.leader if leader is None else leader,
            isr=tuple(current.isr if isr is None else isr),
        )
        changed = replace(
            changed,
            leader_epoch=base.leader_epoch + (1 if leader_epoch_moves(base, changed) else 0),
            partition_epoch=base.partition_epoch + 1,
        )
        self.add(changed)
        return changed

    def changed_partitions(self) -> list[PartitionRecord]:
        return list(self._partitions.values())

    def all_records(self) -> list[Record]:
        # Topic records before their partitions; removals and deletions after.
        firsts = [r for r in self.records if not isinstance(r, RemoveTopicRecord)]
        lasts = [r for r in self.records if isinstance(r, RemoveTopicRecord)]
        return [*firsts, *self._partitions.values(), *lasts]


class MetadataJournal:
    """Replays the metadata log into the model, and commits each event's `Change` to both."""

    def __init__(
        self,
        name: str,
        store: MetadataStore,
        model: ControllerModel,
        *,
        snapshot_records: int,
    ) -> None:
        self._name = name
        self._store = store
        self._model = model
        self._snapshot_records = snapshot_records
        self._records_since_snapshot = 0
        self._last_offset = -1

    def replay(self) -> int:
        """Rebuild the model from the log (its snapshot, then the records after it); returns
        how many records were read."""
        encoded, next_offset = self._store.load()
        for data in encoded:
            self._model.apply(decode_record(data))
        self._last_offset = next_offset - 1
        self._records_since_snapshot = len(encoded)
        return len(encoded)

    async def commit(self, change: Change) -> None:
        records = change.all_records()
        if not records:
            return
        try:
            self._last_offset = await self._store.append([encode_record(r) for r in records])
        except Exception as error:
            # Whether the write reached the disk is unknown; acting on it could contradict what a
            # restarted controller reads back. Stop, and let the node restart from the log.
            raise ActorFatalError(f"{self._name}: metadata log write failed: {error}") from error
        for record in records:
            self._model.apply(record)
        self._records_since_snapshot += len(records)
        if self._records_since_snapshot >= self._snapshot_records:
            snapshot = [encode_record(r) for r in self._model.snapshot()]
            await self._store.snapshot(snapshot, self._last_offset)
            self._records_since_snapshot = 0
