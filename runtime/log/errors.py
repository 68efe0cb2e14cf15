"""Typed storage errors.

Expected conditions a caller must handle (a fetch below the log start, a second broker on a locked
log dir, a batch over the size limit) are narrow exception types, so the partition actor can map
each to its wire error code. Broken invariants inside the engine are `assert`s, not these.
"""

from __future__ import annotations

from wire.errors import ErrorCode


class LogError(Exception):
    """Base class of the storage engine's expected errors."""


class OffsetOutOfRangeError(LogError):
    """A read asked for an offset below the log start offset or beyond the log end offset."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside the log's range [{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class LogDirLockedError(LogError):
    """Another process holds the `.lock` file of a log dir."""


class CorruptIndexError(LogError):
    """An offset or time index file failed its sanity check; the loader rebuilds it."""


class CorruptCheckpointError(LogError):
    """A checkpoint file does not parse (wrong version, count or line shape)."""


class InvalidOffsetError(LogError):
    """Offsets of appended batches do not increase, or a follower batch starts below the LEO."""


class RecordTooLargeError(LogError):
    """A batch is larger than max.message.bytes (answered MESSAGE_TOO_LARGE)."""


class OffsetOverflowError(LogError):
    """An offset does not fit the 32-bit relative offset of the segment's indexes."""


class LogDirError(LogError):
    """A log dir holds something the loader cannot make sense of (bad directory name...)."""


class InvalidRecordError(LogError):
    """A produced batch breaks a rule the leader enforces (answered INVALID_RECORD)."""


class InvalidProducerStateError(LogError):
    """A produced batch breaks its producer's sequence or epoch (idempotence, KIP-98): answered
    with `error` (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE)."""

    def __init__(self, error: ErrorCode, detail: str) -> None:
        super().__init__(f"{error.name}: {detail}")
        self.error = error


class InconsistentTopicIdError(LogError):
    """A partition directory's partition.metadata names another topic id than the caller's."""


class CorruptSnapshotError(LogError):
    """A producer state snapshot is unreadable (version, CRC, length); the loader deletes it."""
