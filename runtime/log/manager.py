"""`LogManager`: the log dirs of one broker, the logs in them, and their background work.

Per log dir (layouts in `runtime.log.checkpoints`):

* ``.lock`` — held with ``flock(LOCK_EX | LOCK_NB)`` while a process uses the dir, so a second
  broker on the same dir refuses to start (`LogDirLockedError`). The lock dies with the process.
* ``meta.properties`` — the dir's identity (`runtime.log.meta_properties`): the node it belongs to
  and a directory id, created when a broker first opens the dir (a manager built without a node
  id, as the offline tools build one, only reads it). A dir of another node is refused.
* ``.kafka_cleanshutdown`` — an empty marker written after every log was flushed and closed and
  every checkpoint written; present at startup means no recovery scan. It is removed once the dir's
  logs are loaded, so a crash from then on is seen as unclean.
* ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` — written by this class;
  ``replication-offset-checkpoint`` (high watermarks) — written through `write_high_watermarks` by
  the replica manager, read here to seed each log's HW.
  A checkpoint that does not parse is ignored with a warning, since each fallback is safe
  (recovery from offset 0, log start from the first segment, HW at the log start).
* ``<topic>-<partition>/`` — one `Log` each; deleted partitions are renamed
  ``<topic>-<partition>.<uuid>-delete`` at once and removed in the background.

Background work (`run()`, all timed by the injected clock): retention every
``log.retention.check.interval.ms``; flushing logs older than their ``flush.ms`` every
``log.flush.scheduler.interval.ms``; fsync of rolled segments plus the recovery point checkpoint
every ``log.flush.offset.checkpoint.interval.ms``; the log start offset checkpoint every
``log.flush.start.offset.checkpoint.interval.ms``; removal of retired segments and deleted
directories every second. Long steps (fsyncs, unlinks, recursive deletes) run in worker threads.

A failed dir (Kafka's LogDirFailureChannel and handleLogDirFailure): the replica manager calls
`mark_dir_offline` after an I/O error in one of its logs. From then on the dir is out of service
for this process: its logs leave the manager's tables (no retention, flush or checkpoint touches
them, and no clean-shutdown marker is written there), no new log is created in it, and asking for
one of its partitions raises `LogDirOfflineError` (KAFKA_STORAGE_ERROR) rather than creating an
empty replacement elsewhere. Only a restart brings the dir back. `offline_directory_ids` is what the
broker's heartbeats report.

(Over ~500 lines on purpose: the dir tables, the failed dirs and the background work are one
owner's state, and each of its methods reads the same tables.)

Ownership: the manager runs on the broker's event loop. It calls a log's synchronous methods
between awaits only, so each call is atomic with respect to the log's owner, as a message would be;
`Log.flush_async` is written to tolerate appends while its fsyncs run.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import random
import shutil
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import anyio

from runtime.clock import Clock
from runtime.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    fsync_dir,
)
from runtime.log.config import LONG_MAX, LogConfig, LogManagerConfig
from runtime.log.errors import (
    CorruptCheckpointError,
    InconsistentTopicIdError,
    LogDirError,
    LogDirLockedError,
)
from runtime.log.log import Log
from runtime.log.meta_properties import (
    MetaProperties,
    NewDirectoryId,
    directory_id_text,
    ensure,
    random_directory_id,
    read_if_present,
)
from runtime.log.partition_dir import delete_dir_name, is_delete_dir, is_ignored_dir
from runtime.log.recovery import RecoveryReport
from runtime.log.segment import LogSegment
from wire.topic import TopicPartition

LOCK_FILE: Final = ".lock"
CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"
DELETER_INTERVAL_MS: Final = 1000

logger = logging.getLogger(__name__)


class LogDirOfflineError(OSError):
    """A log cannot be opened or created because its dir failed (or failed just now: the
    OSError is the cause). `directory`: the dir that failed, None when no dir is live."""

    def __init__(self, message: str, directory: Path | None) -> None:
        super().__init__(message)
        self.directory = directory


@dataclass(frozen=True, slots=True)
class LoadedDir:
    directory: Path
    clean_shutdown: bool
    reports: dict[TopicPartition, RecoveryReport]
    directory_id: bytes | None = None  # from meta.properties (None: a reader without a node id)


@dataclass(slots=True)
class _DirContents:
    """One log dir as its loader thread read it, before it joins the manager's tables."""

    directory: Path
    clean_shutdown: bool
    logs: dict[TopicPartition, Log] = field(default_factory=dict)
    doomed: list[tuple[int, Path]] = field(default_factory=list)  # (due monotonic ms, dir)


class LogManager:
    def __init__(
        self,
        config: LogManagerConfig,
        clock: Clock,
        *,
        rng: random.Random | None = None,
        node_id: int | None = None,
        cluster_id: str | None = None,
        new_directory_id: NewDirectoryId = random_directory_id,
    ) -> None:
        """`node_id`: the broker that owns the dirs; their meta.properties are created or checked
        against it on open. None for a reader that owns no dir."""
        if not config.log_dirs:
            raise ValueError("log.dirs is empty")
        self.config = config
        self._clock = clock
        self._rng = rng if rng is not None else random.Random(0)
        self._dirs = [Path(d).resolve() for d in config.log_dirs]
        if len(set(self._dirs)) != len(self._dirs):
            raise ValueError(f"duplicate entries in log.dirs: {config.log_dirs}")
        self._node_id = node_id
        self._cluster_id = cluster_id
        self._new_directory_id = new_directory_id
        self._meta: dict[Path, MetaProperties] = {}
        self._lock_fds: dict[Path, int] = {}
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._topic_overrides: dict[str, Mapping[str, object]] = {}
        self._retired_segments: list[LogSegment] = []
        self._doomed_dirs: list[tuple[int, Path]] = []  # (due monotonic ms, renamed directory)
        # Failed dirs, and the partitions whose logs were in them (kept so that a partition of a
        # failed dir is refused, never recreated empty in another dir).
        self._offline_dirs: set[Path] = set()
        self._offline_logs: dict[TopicPartition, Path] = {}

    # -- startup --------------------------------------------------------------------------------

    def _lock(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirLockedError(f"{directory} is in use by another process") from None
        self._lock_fds[directory] = fd

    def _unlock_all(self) -> None:
        for fd in self._lock_fds.values():
            os.close(fd)  # closing the descriptor releases the flock
        self._lock_fds.clear()

    def open(self) -> list[LoadedDir]:
        """Lock every log dir and load its logs (recovering after an unclean shutdown). Blocking;
        `open_async` runs it off the event loop.

        Each dir is read in its own worker thread (dirs are separate disks, and a recovery scan
        reads every unflushed byte); the logs join the manager's tables on this thread, in dir
        order, so the loaders share nothing. If another process holds any dir, nothing stays
        locked and LogDirLockedError is raised.
        """
        try:
            for directory in self._dirs:
                self._lock(directory)
                self._identify(directory)
            # One seed per dir, drawn here in dir order: the loaders finish in any order.
            seeds = [self._rng.random() for _ in self._dirs]
            with ThreadPoolExecutor(len(self._dirs), thread_name_prefix="log-dir-load") as pool:
                read = list(pool.map(self._read_dir, self._dirs, seeds))
            return [self._adopt(contents) for contents in read]
        except BaseException:
            self._unlock_all()
            raise

    def _identify(self, directory: Path) -> None:
        """Read (or, for a dir without one, create) the locked dir's meta.properties."""
        if self._node_id is None:
            meta = read_if_present(directory)
            if meta is not None:
                self._meta[directory] = meta
            return
        meta, created = ensure(
            directory,
            node_id=self._node_id,
            cluster_id=self._cluster_id,
            wall_ms=self._clock.wall_ms(),
            new_directory_id=self._new_directory_id,
        )
        if created:
            logger.info(
                "log dir %s: new directory id %s", directory, directory_id_text(meta.directory_id)
            )
        self._meta[directory] = meta

    def directory_ids(self) -> tuple[bytes, ...]:
        """The open dirs' ids in log.dirs order (what the broker registers with)."""
        return tuple(self._meta[d].directory_id for d in self._dirs if d in self._meta)

    async def open_async(self) -> list[LoadedDir]:
        """`open` in a worker thread, so the event loop runs on while the logs load."""
        return await asyncio.to_thread(self.open)

    def _read_dir(self, directory: Path, seed: float) -> _DirContents:
        """Load every log of one dir (a loader thread: it touches nothing of the manager's)."""
        clean = (directory / CLEAN_SHUTDOWN_FILE).exists()
        recovery_points = _read_or_empty(directory / RECOVERY_POINT_CHECKPOINT)
        start_offsets = _read_or_empty(directory / LOG_START_OFFSET_CHECKPOINT)
        high_watermarks = _read_or_empty(directory / REPLICATION_OFFSET_CHECKPOINT)
        rng = random.Random(seed)
        contents = _DirContents(directory, clean)
        due_ms = self._clock.monotonic_ms()
        for child in sorted(directory.iterdir()):
            if not child.is_dir() or is_ignored_dir(child.name):
                continue
            if is_delete_dir(child.name):
                contents.doomed.append((due_ms, child))
                continue
            try:
                tp = TopicPartition.from_dir_name(child.name)
            except ValueError:
                raise LogDirError(f"{child} is not a partition directory") from None
            contents.logs[tp] = Log.open(
                child,
                self.config_for(tp.topic),
                self._clock,
                log_start_offset=start_offsets.get(tp, 0),
                recovery_point=recovery_points.get(tp, 0),
                high_watermark=high_watermarks.get(tp),
                had_clean_shutdown=clean,
                rng=random.Random(rng.random()),
            )
        return contents

    def _adopt(self, contents: _DirContents) -> LoadedDir:
        """Enter one loaded dir's logs in the manager's tables, then remove its clean-shutdown
        marker: from here on a crash must be seen as unclean."""
        directory = contents.directory
        for tp, log in contents.logs.items():
            if tp in self._logs:
                raise LogDirError(f"{tp} is in both {self._dir_of[tp]} and {directory}")
            self._logs[tp] = log
            self._dir_of[tp] = directory
        self._doomed_dirs.extend(contents.doomed)
        if contents.clean_shutdown:
            (directory / CLEAN_SHUTDOWN_FILE).unlink()
            fsync_dir(directory)
        reports = {tp: log.recovery_report for tp, log in contents.logs.items()}
        meta = self._meta.get(directory)
        return LoadedDir(
            directory, contents.clean_shutdown, reports, None if meta is None else meta.directory_id
        )

    # -- logs ---------------------------------------------------------------------------------

    @property
    def log_dirs(self) -> tuple[Path, ...]:
        return tuple(self._dirs)

    @property
    def live_log_dirs(self) -> tuple[Path, ...]:
        return tuple(d for d in self._dirs if d not in self._offline_dirs)

    def offline_directory_ids(self) -> tuple[bytes, ...]:
        """The failed dirs' ids in log.dirs order (what the broker's heartbeats report)."""
        return tuple(
            self._meta[d].directory_id
            for d in self._dirs
            if d in self._offline_dirs and d in self._meta
        )

    def mark_dir_offline(self, directory: Path) -> list[TopicPartition]:
        """Take a failed dir out of service; returns the partitions whose logs were in it
        (empty if it was already offline). Their `Log` objects are not closed here: their
        partition actors own them and stop on their own (a close under them would turn their
        next append into a bug rather than a storage error)."""
        if directory in self._offline_dirs:
            return []
        assert directory in self._dirs, directory
        self._offline_dirs.add(directory)
        lost = sorted((tp for tp, d in self._dir_of.items() if d == directory), key=str)
        for tp in lost:
            del self._logs[tp]
            del self._dir_of[tp]
            self._offline_logs[tp] = directory
        self._doomed_dirs = [(t, d) for t, d in self._doomed_dirs if d.parent != directory]
        logger.error("log dir %s is offline (%d partitions)", directory, len(lost))
        return lost

    @property
    def logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    def log_dir_of(self, tp: TopicPartition) -> Path | None:
        return self._dir_of.get(tp)

    def config_for(self, topic: str) -> LogConfig:
        return self.config.default.with_overrides(self._topic_overrides.get(topic, {}))

    def topic_overrides(self, topic: str) -> Mapping[str, object]:
        """The topic's config overrides as the controller last sent them (empty: none)."""
        return self._topic_overrides.get(topic, {})

    def set_topic_config(self, topic: str, overrides: Mapping[str, object]) -> None:
        """Per-topic overrides (Kafka topic config names); applied to the topic's open logs."""
        config = self.config.default.with_overrides(overrides)  # validates before storing
        self._topic_overrides[topic] = dict(overrides)
        for tp, log in self._logs.items():
            if tp.topic == topic:
                log.config = config

    def _next_log_dir(self) -> Path:
        live = self.live_log_dirs
        if not live:
            raise LogDirOfflineError("no log dir is online", None)
        counts = dict.fromkeys(live, 0)
        for directory in self._dir_of.values():
            counts[directory] += 1
        return min(live, key=lambda d: (counts[d], self._dirs.index(d)))

    def get_or_create_log(self, tp: TopicPartition, *, topic_id: str | None = None) -> Log:
        """The partition's log, created empty in the least loaded log dir if absent.

        With `topic_id`, partition.metadata is written (or checked: InconsistentTopicIdError).
        A partition of a failed dir, or an I/O error here, raises `LogDirOfflineError` naming
        the dir (the caller decides to fail it).
        """
        offline_dir = self._offline_logs.get(tp)
        if offline_dir is not None:
            raise LogDirOfflineError(f"{tp}: its log dir {offline_dir} is offline", offline_dir)
        log = self._logs.get(tp)
        directory = self._dir_of.get(tp) if log is not None else self._next_log_dir()
        assert directory is not None, tp
        try:
            if log is None:
                log = Log.open(
                    directory / tp.dir_name,
                    self.config_for(tp.topic),
                    self._clock,
                    rng=random.Random(self._rng.random()),
                )
                self._logs[tp] = log
                self._dir_of[tp] = directory
            existing: str | None = None
            if topic_id is not None:
                metadata = PartitionMetadataFile(log.directory / PARTITION_METADATA)
                existing = metadata.read()
                if existing is None:
                    metadata.write(topic_id)
        except OSError as error:
            raise LogDirOfflineError(f"{tp}: I/O error in {directory}: {error}", directory) from (
                error
            )
        if existing is not None and existing != topic_id:
            raise InconsistentTopicIdError(f"{tp} belongs to topic id {existing}, not {topic_id}")
        return log

    def topic_id_of(self, tp: TopicPartition) -> str | None:
        log = self._logs.get(tp)
        if log is None:
            return None
        return PartitionMetadataFile(log.directory / PARTITION_METADATA).read()

    def delete_log(self, tp: TopicPartition) -> Path | None:
        """Take the log out of service: rename its directory to ``...-delete`` now, remove the
        files in the background. Returns the new directory name, None if there was no log."""
        log = self._logs.pop(tp, None)
        directory = self._dir_of.pop(tp, None)
        if log is None or directory is None:
            return None
        log.close()
        doomed = directory / delete_dir_name(tp)
        log.rename_directory(doomed)
        fsync_dir(directory)
        self._doomed_dirs.append((self._clock.monotonic_ms(), doomed))
        self.checkpoint_recovery_points(directory)
        self.checkpoint_log_start_offsets(directory)
        return doomed

    def truncate_to(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Truncate logs (follower becoming in sync with a new leader) and checkpoint recovery
        points at once, so a crash cannot resurrect a recovery point above the truncation."""
        for tp, offset in offsets.items():
            log = self._logs.get(tp)
            if log is not None:
                log.truncate_to(offset)
        for directory in self.live_log_dirs:
            self.checkpoint_recovery_points(directory)

    # -- checkpoints ----------------------------------------------------------------------------

    def _logs_in(self, directory: Path) -> dict[TopicPartition, Log]:
        return {tp: log for tp, log in self._logs.items() if self._dir_of[tp] == directory}

    def checkpoint_recovery_points(self, directory: Path | None = None) -> None:
        for d in [directory] if directory is not None else self.live_log_dirs:
            offsets = {tp: log.recovery_point for tp, log in self._logs_in(d).items()}
            OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT).write(offsets)

    def checkpoint_log_start_offsets(self, directory: Path | None = None) -> None:
        for d in [directory] if directory is not None else self.live_log_dirs:
            offsets = {tp: log.log_start_offset for tp, log in self._logs_in(d).items()}
            OffsetCheckpointFile(d / LOG_START_OFFSET_CHECKPOINT).write(offsets)

    def write_high_watermarks(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """Write each log dir's replication-offset-checkpoint with its partitions' HWs."""
        for d in self.live_log_dirs:
            local = {tp: hw for tp, hw in high_watermarks.items() if self._dir_of.get(tp) == d}
            OffsetCheckpointFile(d / REPLICATION_OFFSET_CHECKPOINT).write(local)

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        merged: dict[TopicPartition, int] = {}
        for d in self._dirs:
            merged.update(OffsetCheckpointFile(d / REPLICATION_OFFSET_CHECKPOINT).read())
        return merged

    # -- background work ------------------------------------------------------------------------

    def cleanup_logs(self) -> int:
        """One retention pass over every log; returns the number of segments retired."""
        retired = 0
        for log in list(self._logs.values()):
            retired += log.delete_old_segments()
        if retired:
            self.checkpoint_log_start_offsets()
        return retired

    async def flush_dirty_logs(self) -> None:
        now_ms = self._clock.monotonic_ms()
        for log in list(self._logs.values()):
            if now_ms - log.last_flush_ms >= log.config.flush_ms:
                await log.flush_async()

    async def checkpoint_recovery_points_async(self) -> None:
        """fsync segments that were rolled since the last flush, then checkpoint."""
        for log in list(self._logs.values()):
            rolled_up_to = log.active_segment.base_offset
            if rolled_up_to > log.recovery_point:
                await log.flush_async(rolled_up_to)
        self.checkpoint_recovery_points()

    async def delete_retired_files(self) -> None:
        """Remove segments and directories whose deletion delay has passed (worker thread)."""
        for log in list(self._logs.values()):
            self._retired_segments.extend(log.take_deleted_segments())
        segments, self._retired_segments = self._retired_segments, []
        now_ms = self._clock.monotonic_ms()
        delay_ms = self.config.default.file_delete_delay_ms
        dirs = [d for t, d in self._doomed_dirs if t + delay_ms <= now_ms]
        self._doomed_dirs = [(t, d) for t, d in self._doomed_dirs if t + delay_ms > now_ms]
        if segments:
            await Log.delete_segment_files_async(segments)
        for directory in dirs:
            await asyncio.to_thread(shutil.rmtree, directory, True)

    async def _every(self, interval_ms: int, action: Callable[[], Awaitable[None]]) -> None:
        if interval_ms >= LONG_MAX:
            return  # Kafka's "never"
        while True:
            await self._clock.sleep(interval_ms / 1000)
            await action()

    async def run(self) -> None:
        """Run the background tasks until cancelled (the node owns this task)."""

        async def retention() -> None:
            self.cleanup_logs()

        async def log_start_checkpoint() -> None:
            self.checkpoint_log_start_offsets()

        config = self.config
        async with anyio.create_task_group() as group:
            group.start_soon(self._every, config.retention_check_interval_ms, retention)
            group.start_soon(self._every, config.flush_scheduler_interval_ms, self.flush_dirty_logs)
            group.start_soon(
                self._every,
                config.flush_offset_checkpoint_interval_ms,
                self.checkpoint_recovery_points_async,
            )
            group.start_soon(
                self._every,
                config.flush_start_offset_checkpoint_interval_ms,
                log_start_checkpoint,
            )
            group.start_soon(self._every, DELETER_INTERVAL_MS, self.delete_retired_files)

    # -- shutdown -------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown marker, unlock.

        The marker is written only when everything before it succeeded.
        """
        try:
            for log in self._logs.values():
                log.flush()
                log.close()
            for directory in self.live_log_dirs:
                self.checkpoint_recovery_points(directory)
                self.checkpoint_log_start_offsets(directory)
            for directory in self.live_log_dirs:
                (directory / CLEAN_SHUTDOWN_FILE).touch()
                fsync_dir(directory)
        finally:
            self._logs.clear()
            self._dir_of.clear()
            self._unlock_all()

    async def shutdown_async(self) -> None:
        """`shutdown` with the final fsyncs in worker threads first."""
        for log in list(self._logs.values()):
            await log.flush_async()
        await asyncio.to_thread(self.shutdown)

    def abandon(self) -> None:
        """Release the dirs without flushing or marking a clean shutdown (tests: a crash)."""
        for log in self._logs.values():
            for segment in log.segments:
                segment.close_handles()
        self._logs.clear()
        self._dir_of.clear()
        self._unlock_all()


def _read_or_empty(path: Path) -> dict[TopicPartition, int]:
    """A checkpoint, or nothing if it does not parse. Every fallback is conservative: recovery
    from offset 0 (a full scan), log start from the first segment, HW at the log start."""
    try:
        return OffsetCheckpointFile(path).read()
    except CorruptCheckpointError as exc:
        logger.warning("ignoring unreadable checkpoint: %s", exc)
        return {}
