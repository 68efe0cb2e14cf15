"""The leader epoch cache: which leader epoch began at which offset, for one partition.

Backed by the partition's ``leader-epoch-checkpoint`` (layout in `runtime.log.checkpoints`),
rewritten atomically on every change. Entries are strictly increasing in both epoch and start
offset. Semantics follow Kafka's LeaderEpochFileCache:

* `assign(epoch, start_offset)` records that `epoch` began at `start_offset`. It is a no-op when
  the epoch is already the latest (with a start offset not lower), and it first removes latest
  entries that would break monotonicity (epoch >= new epoch or start offset >= new start offset).
* `end_offset_for(epoch, log_end_offset)` is the OffsetForLeaderEpoch answer: for the latest
  epoch, the log end offset; otherwise the start offset of the first epoch above the requested
  one, paired with the largest known epoch <= the requested one (the requested epoch itself when
  every known epoch is above it); ``(-1, -1)`` when nothing above is known or epoch is -1.
* `truncate_from_end(end_offset)` drops entries starting at or after `end_offset` (log
  truncation); `truncate_from_start(start_offset)` drops entries wholly below the new log start
  and moves the last of them up to it (retention, DeleteRecords).

Owned by the partition's log, hence by one actor: no locks.
"""

from __future__ import annotations

import bisect
from typing import Final

from runtime.log.checkpoints import EpochEntry, LeaderEpochCheckpointFile

UNDEFINED_EPOCH: Final = -1
UNDEFINED_EPOCH_OFFSET: Final = -1


class LeaderEpochCache:
    def __init__(self, checkpoint: LeaderEpochCheckpointFile | None) -> None:
        self._checkpoint = checkpoint
        self._entries: list[EpochEntry] = []
        if checkpoint is not None:
            loaded = checkpoint.read()
            for entry in loaded:
                self._assign(entry)
            if self._entries != loaded:
                self._flush()

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> None:
        if self._assign(EpochEntry(epoch, start_offset)):
            self._flush()

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {entry}")
        latest = self.latest_entry
        if (
            latest is not None
            and entry.epoch == latest.epoch
            and entry.start_offset >= latest.start_offset
        ):
            return False
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch
            or self._entries[-1].start_offset >= entry.start_offset
        ):
            self._entries.pop()
        self._entries.append(entry)
        return True

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds `offset` (None when before the first known epoch)."""
        starts = [e.start_offset for e in self._entries]
        slot = bisect.bisect_right(starts, offset) - 1
        return self._entries[slot].epoch if slot >= 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._entries[-1].epoch:
            return requested_epoch, log_end_offset
        epochs = [e.epoch for e in self._entries]
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            # Older than anything kept: the data was deleted; answer the first epoch's start so a
            # follower replicates from the leader's log start.
            return requested_epoch, self._entries[0].start_offset
        return self._entries[higher - 1].epoch, self._entries[higher].start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        removed: EpochEntry | None = None
        while self._entries and self._entries[0].start_offset <= start_offset:
            removed = self._entries.pop(0)
        if removed is not None:
            self._entries.insert(0, EpochEntry(removed.epoch, start_offset))
            self._flush()

    def clear(self) -> None:
        self._entries.clear()
        self._flush()

    def _flush(self) -> None:
        if self._checkpoint is not None:
            self._checkpoint.write(self._entries)
