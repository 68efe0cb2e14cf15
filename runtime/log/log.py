"""`Log`: the segments of one partition, with offsets, reads, rolling, truncation and retention.

Long because `Log` is the one owner of a partition's segment list and of the offsets that move
with it (log start, recovery point, LEO, HW, the leader epoch cache): append, roll, truncation,
retention and flush each change several of them at once, and keeping every such change in this
class keeps their invariants in one place, as Kafka's UnifiedLog does. What needs none of that
state lives beside it: the leader's checks of produced batches (`runtime.log.produced_batches`),
loading and recovery (`runtime.log.recovery`), one segment (`runtime.log.segment`).

Ownership: a `Log` belongs to one actor at a time (the partition actor), so it has no locks and
its methods are synchronous. They are fast — an append is a validation pass, a patched 16-byte
prefix per batch and one ``pwritev`` — except for the long jobs. `Log.open` (loading and
recovery scans) blocks; the log manager runs it in worker threads, before the log has an owner.
`flush_async` (fsync of whole segments) and `delete_segment_files_async` (unlinking segments)
run their blocking part in a worker thread (`asyncio.to_thread`).

Offsets: the log end offset (LEO) is one past the last appended offset. The log start offset only
grows (retention, `maybe_increment_log_start_offset`, truncation below it). The recovery point is
the offset below which everything is fsynced; recovery after a crash starts there. The high
watermark is set by the owner (the partition actor); retention never deletes a segment holding
offsets at or above it, as in Kafka.

Two append paths, both storing batches byte-for-byte:

* `append_as_leader` validates each batch (structure, CRC-32C, size limit, record count; the
  rules are in `runtime.log.produced_batches`) and writes it with its base offset and partition
  leader epoch replaced (both outside the CRC) — no re-encoding, no copy.
* `append_as_follower` validates structure and CRC and checks that offsets start at or above the
  LEO and increase, then appends the bytes unchanged.

Segments leaving the log (retention, truncation, the live cleaner's swap of cleaned segments,
`replace_cleaned_segments`) are renamed ``*.deleted`` at once and their files
removed later by the owner or the log manager (`take_deleted_segments`), after
``file.delete.delay.ms``; a crash in between leaves ``.deleted`` files that loading removes.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import os
import random
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from runtime.clock import Clock
from runtime.log.checkpoints import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from runtime.log.config import LogConfig
from runtime.log.epoch_cache import LeaderEpochCache
from runtime.log.errors import (
    InvalidOffsetError,
    InvalidProducerStateError,
    InvalidRecordError,
    OffsetOutOfRangeError,
)
from runtime.log.index_file import INT32_MAX
from runtime.log.offsets import (
    FetchDataInfo,
    LogAppendInfo,
    LogOffsetMetadata,
    TimestampAndOffset,
)
from runtime.log.produced_batches import (
    PREFIX_SIZE,
    pack_prefix,
    patch_batches,
    reject_batch,
    require_keys,
)
from runtime.log.producer_replay import (
    end_txn_marker_batch,
    fold_batch,
    producer_fields,
    replay,
)
from runtime.log.producer_state import (
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    Duplicate,
    ProducerStateManager,
    increment_sequence,
)
from runtime.log.recovery import RecoveryReport, load_segments
from runtime.log.segment import DELETED_SUFFIX, LogSegment
from runtime.log.time_index import NO_TIMESTAMP
from runtime.log.transaction_index import AbortedTxn
from wire.errors import ErrorCode
from wire.messages.data import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from wire.records import (
    CONTROL_BIT,
    LOG_OVERHEAD,
    TRANSACTIONAL_BIT,
    iter_batches,
    validate_batch,
    validate_batch_for_append,
)

Records = bytes | bytearray | memoryview
# LogAppendInfo is a NamedTuple; tuple.__new__ skips its generated Python-level __new__ (the
# same object, built in a third of the time: one is built per produce request).
_new_info: Final = tuple.__new__


class Log:
    """One partition's log. Construct with `Log.open`."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        next_offset: int,
        epoch_cache: LeaderEpochCache,
        recovery_report: RecoveryReport,
        rng: random.Random,
        producer_state: ProducerStateManager,
    ) -> None:
        assert segments, "a log always has an active segment"
        self.directory = directory
        self.config = config
        self._clock = clock
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._leo = next_offset
        self._high_watermark = log_start_offset
        self.epoch_cache = epoch_cache
        self.recovery_report = recovery_report
        self._rng = rng
        self.producer_state = producer_state
        # Decided transactions whose markers are not yet below the HW, in marker order.
        self._unreplicated_txns: collections.deque[CompletedTxn] = collections.deque()
        self._last_flush_ms = clock.monotonic_ms()
        self._deleted: list[tuple[int, LogSegment]] = []  # (due monotonic ms, segment)
        self._closed = False

    # -- opening --------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        high_watermark: int | None = None,
        had_clean_shutdown: bool = False,
        rng: random.Random | None = None,
    ) -> Log:
        """Load (and after an unclean shutdown, recover) the log in `directory`. Blocking."""
        # Roll jitter is the only randomness here; a fixed seed keeps runs reproducible.
        rng = rng if rng is not None else random.Random(0)
        directory.mkdir(parents=True, exist_ok=True)
        epoch_cache = LeaderEpochCache(
            LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT)
        )
        loaded = load_segments(
            directory,
            config,
            clock,
            log_start_offset=log_start_offset,
            recovery_point=recovery_point,
            had_clean_shutdown=had_clean_shutdown,
            epoch_cache=epoch_cache,
            jitter=_jitter_source(config, rng),
        )
        log = cls(
            directory,
            config,
            clock,
            loaded.segments,
            log_start_offset=loaded.log_start_offset,
            recovery_point=loaded.recovery_point,
            next_offset=loaded.next_offset,
            epoch_cache=epoch_cache,
            recovery_report=loaded.report,
            rng=rng,
            producer_state=ProducerStateManager(directory),
        )
        # Loading emptied the transaction indexes of the segments it recovered: replay refills
        # them from the first of those.
        log._reload_producer_state(index_from=loaded.report.txn_index_reset_from)
        if high_watermark is not None:
            log.update_high_watermark(high_watermark)
        return log

    # -- state ----------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        active = self.active_segment
        return LogOffsetMetadata(self._leo, active.base_offset, active.size)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def closed(self) -> bool:
        """Closed or deleted: its segments serve nothing any more."""
        return self._closed

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self._leo - self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        """Monotonic time of the last flush (or of opening)."""
        return self._last_flush_ms

    @property
    def latest_epoch(self) -> int | None:
        return self.epoch_cache.latest_epoch

    def update_high_watermark(self, high_watermark: int) -> int:
        """Set the HW, clamped to [log start, LEO]; returns the value kept."""
        self._high_watermark = min(max(high_watermark, self._log_start_offset), self._leo)
        unreplicated = self._unreplicated_txns
        while unreplicated and unreplicated[0].last_offset < self._high_watermark:
            unreplicated.popleft()
        return self._high_watermark

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end offset)`` from the leader epoch cache."""
        return self.epoch_cache.end_offset_for(epoch, self._leo)

    # -- append ---------------------------------------------------------------------------------

    def append_as_leader(
        self, records: Records, leader_epoch: int, *, origin: AppendOrigin = AppendOrigin.CLIENT
    ) -> LogAppendInfo:
        """Validate, assign offsets from the LEO, stamp `leader_epoch`, append. `origin`: who
        wrote the batch, for the producer-state rules (`ProducerStateManager.check`).

        The stored bytes are the producer's with baseOffset and partitionLeaderEpoch (bytes 0-8
        and 12-16, outside the CRC) replaced. The replacement is written by vectored I/O — a
        16-byte patched prefix, then the rest of the caller's buffer — so the caller's buffer is
        neither copied nor modified. Raises CorruptRecordError, RecordTooLargeError or
        InvalidRecordError, appending nothing.
        """
        # Hot path: every produce request ends here, and the benchmark target (issue 3) leaves
        # about two microseconds of Python per 16 KB batch beyond the CRC and the write. Hence
        # the hand-inlined shape: `validate_batch_for_append` (a tuple, no BatchHeader), a
        # straight path for the usual one-batch request (more batches go to `patch_batches`),
        # the record count derived from the offsets, the roll check fused with the segment
        # append, and `_append_to_active` inlined. The readable checks run only when a batch
        # is rejected (`reject_batch` gets a BatchHeader from `validate_batch`).
        if not -1 <= leader_epoch <= INT32_MAX:
            raise ValueError(f"leader epoch {leader_epoch} outside int32")
        view = memoryview(records)
        end = len(view)
        first_offset = self._leo
        if "compact" in self.config.cleanup_policy:
            require_keys(view)
        if not end:
            return _new_info(
                LogAppendInfo, (first_offset, first_offset - 1, NO_TIMESTAMP, first_offset, 0, 0, 0)
            )
        length, _, _, attributes, last_delta, max_ts, count = validate_batch_for_append(view, 0)
        size = length + LOG_OVERHEAD
        if (
            size > self.config.max_message_bytes
            or count < 1
            or last_delta != count - 1
            or attributes & CONTROL_BIT
        ):
            reject_batch(0, validate_batch(view, 0), self.config.max_message_bytes)
        producer_id, producer_epoch, base_sequence = producer_fields(view, 0)
        if producer_id >= 0:
            if size != end:
                raise InvalidRecordError(
                    "an idempotent or transactional batch must be the only batch of its "
                    "partition in a produce request"
                )
            transactional = bool(attributes & TRANSACTIONAL_BIT)
            last_sequence = increment_sequence(base_sequence, count - 1)
            verdict = self.producer_state.check(
                producer_id,
                producer_epoch,
                base_sequence,
                last_sequence,
                is_transactional=transactional,
                origin=origin,
            )
            if type(verdict) is Duplicate:
                return self._duplicate_info(verdict.metadata)
            if isinstance(verdict, ErrorCode):
                raise InvalidProducerStateError(
                    verdict,
                    f"producer {producer_id} epoch {producer_epoch} sequence {base_sequence}",
                )
        offset = first_offset + count  # records are numbered 0..count-1, checked above
        if size == end:
            chunks: list[bytes | memoryview] = [
                pack_prefix(first_offset, length, leader_epoch),
                view[PREFIX_SIZE:end],
            ]
            if max_ts > NO_TIMESTAMP:
                offset_of_max_ts = offset - 1
            else:
                max_ts, offset_of_max_ts = NO_TIMESTAMP, first_offset
        else:
            chunks, offset, max_ts, offset_of_max_ts = patch_batches(
                view,
                leader_epoch,
                first_offset,
                (length, count, max_ts),
                self.config.max_message_bytes,
            )
            if any(h.producer_id >= 0 for _, h in iter_batches(view)):
                raise InvalidRecordError(
                    "an idempotent or transactional batch must be the only batch of its "
                    "partition in a produce request"
                )
        if leader_epoch >= 0 and leader_epoch != self.epoch_cache.latest_epoch:
            self.epoch_cache.assign(leader_epoch, first_offset)
        last_offset = offset - 1
        if not self._segments[-1].append_unless_roll(
            last_offset, max_ts, offset_of_max_ts, chunks, end
        ):
            self.roll(first_offset).append(last_offset, max_ts, offset_of_max_ts, chunks, end)
        self._leo = offset
        if producer_id >= 0:
            self.producer_state.update(
                producer_id,
                producer_epoch,
                base_sequence,
                last_sequence,
                first_offset,
                last_offset,
                max_ts,
                is_transactional=transactional,
            )
        if offset - self._recovery_point >= self.config.flush_messages:
            self.flush()
        return _new_info(
            LogAppendInfo,
            (
                first_offset,
                last_offset,
                max_ts,
                offset_of_max_ts,
                end,
                len(chunks) >> 1,
                offset - first_offset,
            ),
        )

    def append_as_follower(self, records: Records) -> LogAppendInfo:
        """Append batches replicated from the leader, unchanged.

        Raises CorruptRecordError, or InvalidOffsetError when the first batch starts below the
        LEO or offsets do not increase; nothing is appended then.
        """
        batches = list(iter_batches(records, validate=True))
        if not batches:
            return LogAppendInfo(self._leo, self._leo - 1, NO_TIMESTAMP, self._leo, 0, 0, 0)
        expected = self._leo
        max_ts, offset_of_max_ts = NO_TIMESTAMP, batches[0][1].base_offset
        record_count = 0
        for position, header in batches:
            if header.base_offset < expected or header.last_offset_delta < 0:
                raise InvalidOffsetError(
                    f"batch at byte {position} has offsets {header.base_offset}.."
                    f"{header.last_offset}, expected a base offset >= {expected}"
                )
            if header.max_timestamp > max_ts:
                max_ts, offset_of_max_ts = header.max_timestamp, header.last_offset
            record_count += header.records_count
            expected = header.next_offset
        first = batches[0][1].base_offset
        info = LogAppendInfo(
            first, expected - 1, max_ts, offset_of_max_ts, len(records), len(batches), record_count
        )
        for _, header in batches:
            epoch = header.partition_leader_epoch
            latest = self.epoch_cache.latest_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                self.epoch_cache.assign(epoch, header.base_offset)
        self._append_to_active(
            [records], len(records), first, expected - 1, max_ts, offset_of_max_ts
        )
        # Replicated batches are never refused for their producer state: the follower builds
        # the leader's, so that as the next leader it recognises retries of these writes.
        for position, header in batches:
            if header.producer_id >= 0:
                batch = (
                    records[position : position + header.size_bytes] if header.is_control else None
                )
                completed = fold_batch(self.producer_state, header, batch)
                if completed is not None:
                    self._transaction_completed(completed, index=True)
        return info

    def _append_to_active(
        self,
        chunks: Sequence[Records],
        size: int,
        first_offset: int,
        last_offset: int,
        max_ts: int,
        offset_of_max_ts: int,
    ) -> None:
        segment = self._segments[-1]
        # One call both checks for a roll and appends; it refuses (False) only when a roll is due.
        if not segment.append_unless_roll(last_offset, max_ts, offset_of_max_ts, chunks, size):
            segment = self.roll(first_offset)
            segment.append(last_offset, max_ts, offset_of_max_ts, chunks, size)
        self._leo = last_offset + 1
        if self._leo - self._recovery_point >= self.config.flush_messages:
            self.flush()

    # -- rolling --------------------------------------------------------------------------------

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, LEO)."""
        new_base = max(expected_next_offset or 0, self._leo)
        active = self.active_segment
        if active.base_offset == new_base and active.size == 0:
            return active
        assert new_base > active.base_offset, (new_base, active)
        self._snapshot_producer_state()
        active.on_become_inactive()
        segment = LogSegment(
            self.directory,
            new_base,
            self.config,
            self._clock,
            roll_jitter_ms=_jitter_source(self.config, self._rng)(),
        )
        if segment.size:
            # Stale files of a segment that is not part of the log (never expected): start over.
            segment.delete_files()
            segment = LogSegment(self.directory, new_base, self.config, self._clock)
        segment.make_active()
        self._segments.append(segment)
        self._bases.append(new_base)
        return segment

    # -- reads ----------------------------------------------------------------------------------

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one: bool = True,
    ) -> FetchDataInfo:
        """Whole batches from the one holding `start_offset`, at most `max_bytes` (but at least one
        batch when `min_one`), none holding offsets at or above `max_offset` (e.g. the HW).

        Raises OffsetOutOfRangeError below the log start offset or beyond the LEO.
        """
        if start_offset < self._log_start_offset or start_offset > self._leo:
            raise OffsetOutOfRangeError(start_offset, self._log_start_offset, self._leo)
        if start_offset == self._leo:
            return FetchDataInfo(self.log_end_offset_metadata, b"")
        limit_index, limit_position = self._position_bound(max_offset)
        index = self._segment_index_for(start_offset)
        while index < len(self._segments):
            segment = self._segments[index]
            if index > limit_index:
                break
            max_position = limit_position if index == limit_index else None
            info = segment.read(start_offset, max_bytes, max_position, min_one)
            if info is not None:
                return info
            index += 1
        # Everything from start_offset on was compacted away: nothing to return yet.
        return FetchDataInfo(self.log_end_offset_metadata, b"")

    def _position_bound(self, max_offset: int | None) -> tuple[int, int | None]:
        """(segment index, byte position) of the first batch a read must not return."""
        if max_offset is None or max_offset >= self._leo:
            return len(self._segments) - 1, None
        index = self._segment_index_for(max_offset)
        found = self._segments[index].translate_offset(max_offset)
        return index, (found[0] if found is not None else None)

    def offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Where `offset` lives (for HW and fetch positions); OffsetOutOfRangeError if absent."""
        return self.read(offset, 1, min_one=False).fetch_offset_metadata

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: the first record with timestamp >= `timestamp`, or by sentinel the log
        start (-2), the log end (-1) or the record with the largest timestamp (-3, KIP-734)."""
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, self._log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, self._leo)
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp_and_offset()
        for segment in self._segments:
            if segment.size == 0 or segment.largest_timestamp < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
            if found is not None:
                return found
        return None

    def _max_timestamp_and_offset(self) -> TimestampAndOffset | None:
        """The largest timestamp in the log and its offset: the earliest segment holding it,
        and there (as Kafka's segments track it) the last offset of the batch that carried it."""
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.size and (
                best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far
            ):
                best = segment
        if best is None:
            return None
        return TimestampAndOffset(best.max_timestamp_so_far, best.offset_of_max_timestamp_so_far)

    # -- truncation -------------------------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every batch holding an offset >= `target_offset`; False when nothing to do.

        Whole batches go, so the LEO becomes the end of the last batch kept: the target itself
        when it is a batch boundary (truncation points — leader epoch start offsets, high
        watermarks — always are). The caller should checkpoint recovery points afterwards (the
        log manager's `truncate_to` does).
        """
        if target_offset < 0:
            raise ValueError(f"negative truncation offset {target_offset}")
        if target_offset >= self._leo:
            return False
        if self._segments[0].base_offset > target_offset:
            self.truncate_fully_and_start_at(target_offset)
            return True
        keep = self._segment_index_for(target_offset)
        self._retire(self._segments[keep + 1 :])
        del self._segments[keep + 1 :]
        del self._bases[keep + 1 :]
        active = self.active_segment
        active.truncate_to(target_offset)
        active.make_active()
        end = min(target_offset, active.read_next_offset())
        if end < self._log_start_offset:
            # The batch holding the log start offset went too: nothing readable is left, so the
            # log restarts empty at the target rather than end below its own start.
            self.truncate_fully_and_start_at(target_offset)
            return True
        self._leo = end
        self.epoch_cache.truncate_from_end(self._leo)
        self._recovery_point = min(self._recovery_point, self._leo)
        self._high_watermark = min(self._high_watermark, self._leo)
        # The segments' transaction indexes were cut at the target already; the batches replayed
        # below it are indexed there.
        self._reload_producer_state(index_from=None)
        return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Drop every segment and restart the log, empty, at `new_offset`."""
        if new_offset < 0:
            raise ValueError(f"negative offset {new_offset}")
        self._retire(self._segments)
        segment = LogSegment(
            self.directory,
            new_offset,
            self.config,
            self._clock,
            roll_jitter_ms=_jitter_source(self.config, self._rng)(),
        )
        segment.make_active()
        self._segments = [segment]
        self._bases = [new_offset]
        self._leo = new_offset
        self._log_start_offset = new_offset
        self._recovery_point = new_offset
        self._high_watermark = new_offset
        self.epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(new_offset)

    def maybe_increment_log_start_offset(self, new_start_offset: int) -> bool:
        """Raise the log start offset (DeleteRecords, follower catch-up); must not pass the HW."""
        if new_start_offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                new_start_offset, self._log_start_offset, self._high_watermark
            )
        if new_start_offset <= self._log_start_offset:
            return False
        self._log_start_offset = new_start_offset
        self.epoch_cache.truncate_from_start(new_start_offset)
        self._recovery_point = max(self._recovery_point, new_start_offset)
        return True

    # -- retention ------------------------------------------------------------------------------

    def delete_old_segments(self) -> int:
        """Retention pass: segments below the log start offset, then (with cleanup.policy delete)
        by retention.ms and retention.bytes. Whole segments only, never the active one, never
        one reaching the HW. Returns how many segments were removed from the log."""
        deleted = self._delete_segments(
            lambda segment, next_base: next_base <= self._log_start_offset
        )
        if not self.config.delete_retention:
            return deleted
        if self.config.retention_ms >= 0:
            now_ms = self._clock.wall_ms()
            deleted += self._delete_segments(
                lambda segment, _: now_ms - segment.largest_timestamp > self.config.retention_ms
            )
        if self.config.retention_bytes >= 0:
            excess = self.size_bytes - self.config.retention_bytes

            def over_size(segment: LogSegment, _: int) -> bool:
                nonlocal excess
                if excess - segment.size < 0:
                    return False
                excess -= segment.size
                return True

            deleted += self._delete_segments(over_size)
        return deleted

    def _delete_segments(self, predicate: Callable[[LogSegment, int], bool]) -> int:
        count = 0
        for segment, successor in zip(self._segments, self._segments[1:], strict=False):
            upper = successor.base_offset
            if upper > self._high_watermark or not predicate(segment, upper):
                break
            count += 1
        if count == 0:
            return 0
        self._retire(self._segments[:count])
        del self._segments[:count]
        del self._bases[:count]
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self._recovery_point = max(self._recovery_point, self._log_start_offset)
        self.epoch_cache.truncate_from_start(self._log_start_offset)
        self.producer_state.delete_snapshots_below(self._log_start_offset)
        return count

    def _retire(self, segments: Sequence[LogSegment]) -> None:
        """Rename to .deleted now; the files go after file.delete.delay.ms."""
        due_ms = self._clock.monotonic_ms() + self.config.file_delete_delay_ms
        for segment in list(segments):
            segment.close_handles()
            segment.change_suffix(segment.suffix, DELETED_SUFFIX)
            self._deleted.append((due_ms, segment))

    def replace_cleaned_segments(
        self, old: Sequence[LogSegment], new: Sequence[LogSegment]
    ) -> None:
        """Swap in cleaned segments (the live cleaner, runtime/log/cleaner/swap.py, which checks
        and renames the files): `old` are the log's first segments, never the active one, and
        `new` cover the same offsets. The old ones are retired as retention retires segments:
        renamed ``.deleted`` now, unlinked after file.delete.delay.ms."""
        count = len(old)
        assert 0 < count < len(self._segments), (count, len(self._segments))
        assert all(a is b for a, b in zip(old, self._segments, strict=False)), old
        assert new, old
        assert new[0].base_offset == old[0].base_offset, (new, old)
        self._retire(old)
        self._segments[:count] = list(new)
        self._bases[:count] = [s.base_offset for s in new]

    def take_deleted_segments(self, *, due_only: bool = True) -> list[LogSegment]:
        """Hand over retired segments whose deletion delay has passed (all with due_only=False)."""
        now_ms = self._clock.monotonic_ms()
        due = [s for t, s in self._deleted if not due_only or t <= now_ms]
        self._deleted = [(t, s) for t, s in self._deleted if due_only and t > now_ms]
        return due

    @staticmethod
    def delete_segment_files(segments: Sequence[LogSegment]) -> None:
        for segment in segments:
            segment.delete_files()

    @staticmethod
    async def delete_segment_files_async(segments: Sequence[LogSegment]) -> None:
        """Unlink retired segments' files in a worker thread (large unlinks can block)."""
        if segments:
            await asyncio.to_thread(Log.delete_segment_files, list(segments))

    # -- durability -----------------------------------------------------------------------------

    def _segments_to_flush(self, offset: int) -> list[LogSegment]:
        first = self._segment_index_for(self._recovery_point)
        return [s for s in self._segments[first:] if s.base_offset < offset]

    def flush(self, offset: int | None = None) -> None:
        """fsync everything below `offset` (default: the LEO) and advance the recovery point."""
        offset = self._leo if offset is None else min(offset, self._leo)
        if offset > self._recovery_point:
            for segment in self._segments_to_flush(offset):
                segment.flush()
            self._recovery_point = offset
        self._last_flush_ms = self._clock.monotonic_ms()

    async def flush_async(self, offset: int | None = None) -> None:
        """`flush` with the fsyncs in a worker thread. Pending index entries are written on the
        caller's thread first, so the actor's state is never touched from the worker."""
        offset = self._leo if offset is None else min(offset, self._leo)
        if offset <= self._recovery_point:
            self._last_flush_ms = self._clock.monotonic_ms()
            return
        handles: list[int] = []
        for segment in self._segments_to_flush(offset):
            handles.extend(segment.prepare_flush())
        await asyncio.to_thread(_fsync_and_close, handles)
        self._recovery_point = max(self._recovery_point, offset)
        self._last_flush_ms = self._clock.monotonic_ms()

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close files (trimming the active indexes); retired segments are deleted now."""
        if self._closed:
            return
        self._closed = True
        # At the log end, so that the next open replays nothing.
        self._snapshot_producer_state()
        for segment in self._segments:
            segment.close()
        self.delete_segment_files(self.take_deleted_segments(due_only=False))

    # -- producer state ---------------------------------------------------------------------------

    def _duplicate_info(self, original: BatchMetadata) -> LogAppendInfo:
        """A retry of a batch this log already holds: nothing is appended and the producer is
        answered with the first copy's offsets (Kafka does the same, never DUPLICATE_SEQUENCE)."""
        return LogAppendInfo(
            original.first_offset,
            original.last_offset,
            original.timestamp,
            original.last_offset,
            0,
            0,
            0,
        )

    def _reload_producer_state(self, *, index_from: int | None) -> None:
        """Rebuild the producer state for the log as it now is (after loading, or a truncation
        that may have cut batches it had folded): the newest snapshot within the log, then the
        batches after it. Aborted transactions whose markers lie at or above `index_from` go
        into their segments' transaction indexes again (those a recovery reset); the snapshot
        used then lies at or below `index_from`, so that every such marker is replayed."""
        state = self.producer_state
        self._unreplicated_txns.clear()
        end = (
            self._leo
            if index_from is None
            else min(self._leo, max(index_from, self._log_start_offset))
        )
        replay_from = state.truncate_and_reload(self._log_start_offset, end)

        def completed(txn: CompletedTxn) -> None:
            self._transaction_completed(
                txn, index=index_from is not None and txn.last_offset >= index_from
            )

        replay(state, self._segments, replay_from, self._leo, on_completed=completed)

    # -- transactions -----------------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: below it every transaction is decided and its marker replicated; a
        read_committed consumer reads up to here. The HW when no transaction is open."""
        first = self._first_unstable_offset()
        return self._high_watermark if first is None else min(first, self._high_watermark)

    def _first_unstable_offset(self) -> int | None:
        ongoing = self.producer_state.first_unstable_offset()
        # A decided transaction stays unstable until its marker is below the HW: a new leader
        # elected before that may not have the marker.
        for txn in self._unreplicated_txns:
            if ongoing is None or txn.first_offset < ongoing:
                ongoing = txn.first_offset
        return ongoing

    def append_end_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        *,
        commit: bool,
        leader_epoch: int,
    ) -> LogAppendInfo:
        """Write a COMMIT or ABORT control batch for the producer's transaction (WriteTxnMarkers
        on the partition leader). Raises InvalidProducerStateError when the marker's producer
        epoch is older than the producer's (INVALID_PRODUCER_EPOCH) or its coordinator epoch
        older than the last marker's (TRANSACTION_COORDINATOR_FENCED)."""
        error = self.producer_state.check_end_txn_marker(
            producer_id, producer_epoch, coordinator_epoch
        )
        if error is not None:
            raise InvalidProducerStateError(
                error, f"marker for producer {producer_id} epoch {producer_epoch}"
            )
        batch = end_txn_marker_batch(
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit=commit,
            base_offset=self._leo,
            leader_epoch=leader_epoch,
            timestamp=self._clock.wall_ms(),
        )
        if leader_epoch >= 0 and leader_epoch != self.epoch_cache.latest_epoch:
            self.epoch_cache.assign(leader_epoch, self._leo)
        # The follower path appends a batch as it is and folds it (the marker completes the
        # transaction there, as it does on every replica).
        return self.append_as_follower(batch)

    def _transaction_completed(self, txn: CompletedTxn, *, index: bool) -> None:
        if txn.is_aborted and index:
            # Kafka's lastStableOffset(completedTxn): where the log is stable once this one is
            # decided, judged by the other open or unreplicated transactions.
            ongoing = self._first_unstable_offset()
            stable = txn.last_offset + 1 if ongoing is None else min(ongoing, txn.last_offset + 1)
            segment = self._segments[self._segment_index_for(txn.last_offset)]
            held = segment.txn_index.last_offset
            # Replay after a recovery re-adds what a reset index lost; an index that kept its
            # entries already has this one.
            if held is None or held < txn.last_offset:
                segment.txn_index.append(
                    AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, stable)
                )
        if txn.last_offset >= self._high_watermark:
            self._unreplicated_txns.append(txn)

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [start_offset, upper_bound) must
        name: those ending at or after the start and beginning before the bound (Kafka's
        collectAbortedTransactions), from the segment holding the start onwards."""
        found: list[AbortedTxn] = []
        for segment in self._segments[self._segment_index_for(start_offset) :]:
            entries, complete = segment.txn_index.collect_aborted(start_offset, upper_bound)
            found.extend(entries)
            if complete:
                break
        return found

    def _snapshot_producer_state(self) -> None:
        """Kafka's snapshot at each roll and at close: recovery replays only what follows it.
        Every batch below the LEO has been folded (both append paths fold as they go), so the
        snapshot is named by the LEO."""
        self.producer_state.update_map_end_offset(self._leo)
        self.producer_state.take_snapshot()

    def delete(self) -> None:
        """Close and remove the whole partition directory (after the manager renamed it)."""
        self._closed = True
        for segment in self._segments:
            segment.close_handles()
        self.delete_segment_files(self.take_deleted_segments(due_only=False))
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.directory)

    def rename_directory(self, new_directory: Path) -> None:
        """Move the partition directory (deletion by rename); files stay open across it."""
        os.replace(self.directory, new_directory)
        self.directory = new_directory


def _fsync_and_close(handles: list[int]) -> None:
    try:
        for handle in handles:
            os.fsync(handle)
    finally:
        for handle in handles:
            os.close(handle)


def _jitter_source(config: LogConfig, rng: random.Random) -> Callable[[], int]:
    """Kafka's segment.jitter.ms: a random amount below it, per segment (0 when unset)."""
    limit = min(config.segment_jitter_ms, config.segment_ms)
    return (lambda: rng.randrange(limit)) if limit > 0 else (lambda: 0)
