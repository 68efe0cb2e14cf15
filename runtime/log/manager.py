"""`LogManager`: the log dirs of one broker, the logs in them, and their background work.

Per log dir (layouts in `runtime.log.checkpoints`):

* ``.lock`` — held while a process uses the dir, so a second broker on the same dir refuses to
  start (`LogDirLockedError`; the lock and the loading of a dir are in runtime/log/dir_loader.py).
* ``meta.properties`` — the dir's identity (`runtime.log.meta_properties`): the node it belongs to
  and a directory id, created when a broker first opens the dir (a manager built without a node
  id, as the offline tools build one, only reads it). A dir of another node is refused. Its
  cluster id (`cluster_id`) is cluster.id when configured, else the one a dir names (every dir
  must name the same, or none), else the one the controller tells the broker at registration,
  which `store_cluster_id` writes into each dir.
* ``.kafka_cleanshutdown`` — an empty marker written after every log of the dir was flushed and
  closed and its checkpoints written; present at startup means no recovery scan. It is removed
  once the dir's logs are loaded, so a crash from then on is seen as unclean.
* ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` — written by this class;
  ``replication-offset-checkpoint`` (high watermarks) — written through `write_high_watermarks` by
  the replica manager, read at startup to seed each log's HW.
* ``<topic>-<partition>/`` — one `Log` each; deleted partitions are renamed
  ``<topic>-<partition>.<uuid>-delete`` at once and removed in the background.

Background work (`run()`): retention, flushes, the recovery point and log start offset
checkpoints, removal of retired segments and deleted directories, each on its interval of the
injected clock (runtime/log/background.py).

A failed dir (Kafka's LogDirFailureChannel, handleLogDirFailure and loadLogs): an I/O error in a
log dir fails the whole dir. From then on the dir is out of service for this process: its logs
leave the manager's tables (no retention, flush or checkpoint touches them, and no clean-shutdown
marker is written there), no new log is created in it, and asking for one of its partitions raises
`LogDirOfflineError` (KAFKA_STORAGE_ERROR) rather than creating an empty replacement elsewhere;
while any dir is offline, a log that is not new (LeaderAndIsr's is_new) is not created either,
since it may be in that dir. Only a restart brings the dir back. Three ways in:

* the replica manager calls `mark_dir_offline` after an I/O error in a partition actor or when a
  log cannot be created (it takes the dir's partitions offline in the same handler);
* an OSError in the manager's own steps (the background work, a checkpoint, the high watermarks
  the replica manager has it write, a deletion) calls `fail_dir`, which marks the dir offline and
  reports it on `failure_channel` for the replica manager (runtime/log/dir_failure.py); the other
  dirs are served on;
* at `open`, a dir that cannot be created, locked, identified, listed or whose logs cannot be
  opened starts offline (with no logs) and the broker starts with the others; only when none is
  left does `open` fail. Configuration errors stay fatal (another process's lock, another node's
  meta.properties, a directory that is not a partition's). A manager without a node id (an
  offline tool) sees every dir or fails: a partial view would pass for the whole.

`offline_directory_ids` is what the broker's heartbeats report: the ids of the failed dirs whose
meta.properties could be read. A dir whose meta.properties could not be read has no id to report;
the controller learns of it from the registration, which lacks the id the broker registered
before, and from the KAFKA_STORAGE_ERROR answers for the partitions it can no longer create.

(Over ~500 lines on purpose: the dir tables and the failed dirs are one owner's state, and each
of its methods reads the same tables; the background work and the reading of a dir at startup
are apart, in runtime/log/background.py and runtime/log/dir_loader.py.)

Ownership: the manager runs on the broker's event loop. It calls a log's synchronous methods
between awaits only, so each call is atomic with respect to the log's owner, as a message would be;
`Log.flush_async` is written to tolerate appends while its fsyncs run.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from runtime.clock import Clock
from runtime.log.background import LogBackgroundWork
from runtime.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    fsync_dir,
)
from runtime.log.config import LogConfig, LogManagerConfig
from runtime.log.dir_failure import LogDirFailure, LogDirFailureChannel
from runtime.log.dir_loader import CLEAN_SHUTDOWN_FILE as CLEAN_SHUTDOWN_FILE
from runtime.log.dir_loader import LOCK_FILE as LOCK_FILE
from runtime.log.dir_loader import DirContents, lock_dir, read_dirs, release
from runtime.log.errors import InconsistentTopicIdError, LogDirError
from runtime.log.log import Log
from runtime.log.meta_properties import (
    MetaProperties,
    NewDirectoryId,
    directory_id_text,
    ensure,
    random_directory_id,
    read_if_present,
)
from runtime.log.partition_dir import delete_dir_name
from runtime.log.recovery import RecoveryReport
from wire.topic import TopicPartition

logger = logging.getLogger(__name__)


class LogDirOfflineError(OSError):
    """A log cannot be opened or created because its dir failed (or failed just now: the
    OSError is the cause). `directory`: the dir that failed; None when no single dir is to
    blame (none is live, or the log may be in any of the failed ones)."""

    def __init__(self, message: str, directory: Path | None) -> None:
        super().__init__(message)
        self.directory = directory


@dataclass(frozen=True, slots=True)
class LoadedDir:
    directory: Path
    clean_shutdown: bool
    reports: dict[TopicPartition, RecoveryReport]
    directory_id: bytes | None = None  # from meta.properties (None: a reader without a node id)


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
        self._doomed_dirs: list[tuple[int, Path]] = []  # (due monotonic ms, renamed directory)
        # Failed dirs, and the partitions whose logs were in them (kept so that a partition of a
        # failed dir is refused, never recreated empty in another dir).
        self._offline_dirs: set[Path] = set()
        self._offline_logs: dict[TopicPartition, Path] = {}
        # The failures found in the manager's own steps, for the replica manager to take.
        self.failure_channel = LogDirFailureChannel(len(self._dirs))

    # -- startup --------------------------------------------------------------------------------

    def _unlock_all(self) -> None:
        for fd in self._lock_fds.values():
            os.close(fd)  # closing the descriptor releases the flock
        self._lock_fds.clear()

    def open(self) -> list[LoadedDir]:
        """Lock every log dir and load its logs (recovering after an unclean shutdown); returns
        the dirs that loaded. Blocking; `open_async` runs it off the event loop.

        Each dir is read in its own worker thread (runtime/log/dir_loader.py); the logs join the
        manager's tables on this thread, in dir order, so the loaders share nothing. A dir that
        fails with an OSError on the way starts offline (the module's docstring says which errors
        stay fatal); LogDirOfflineError when no dir is left. If anything is raised, nothing stays
        locked.
        """
        try:
            for directory in self._dirs:
                try:
                    self._lock_fds[directory] = lock_dir(directory)
                    self._identify(directory)
                except OSError as error:
                    self._fail_at_open(directory, error)
            # One seed per configured dir, drawn here in dir order: the loaders finish in any
            # order, and a dir that failed does not shift the seeds of the others.
            seeds = {directory: self._rng.random() for directory in self._dirs}
            live = self.live_log_dirs
            read = read_dirs(live, [seeds[d] for d in live], self.config_for, self._clock)
            loaded = [self._adopt(contents) for contents in read]
            if not self.live_log_dirs:
                dirs = ", ".join(str(d) for d in self._dirs)
                raise LogDirOfflineError(f"no log dir could be opened (log.dirs: {dirs})", None)
            return [d for d in loaded if d is not None]
        except BaseException:
            self._unlock_all()
            raise

    def _fail_at_open(self, directory: Path, error: OSError) -> None:
        """A dir that cannot be brought into service starts offline, as Kafka's loadLogs leaves
        it; a reader (no node id) fails instead: it must see every dir or none."""
        if self._node_id is None:
            raise error
        logger.error("log dir %s is offline from the start: %s", directory, error)
        self._offline_dirs.add(directory)

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
        if self._cluster_id is None and meta.cluster_id is not None:
            # The first dir naming a cluster decides; `ensure` holds the later ones to it.
            self._cluster_id = meta.cluster_id

    @property
    def cluster_id(self) -> str | None:
        """The cluster these dirs belong to (module docstring); None while none is known."""
        return self._cluster_id

    def store_cluster_id(self, cluster_id: str) -> None:
        """The cluster the controller named: from now on `cluster_id`, and written into the
        meta.properties of every live dir that lacks it. LogDirError when the dirs belong to
        another cluster (the broker must not join it); an I/O error fails that dir alone."""
        assert self._node_id is not None, "a reader owns no dir to write"
        if self._cluster_id is not None and self._cluster_id != cluster_id:
            raise LogDirError(
                f"the log dirs belong to cluster {self._cluster_id}, not {cluster_id}"
            )
        self._cluster_id = cluster_id
        for directory in self.live_log_dirs:
            meta = self._meta.get(directory)
            if meta is None or meta.cluster_id == cluster_id:
                continue
            try:
                # Should the file have vanished, it is written again with the dir's same id.
                self._meta[directory], _ = ensure(
                    directory,
                    node_id=meta.node_id,
                    cluster_id=cluster_id,
                    wall_ms=self._clock.wall_ms(),
                    new_directory_id=functools.partial(bytes, meta.directory_id),
                )
            except OSError as error:
                self.fail_dir(directory, error)

    def directory_ids(self) -> tuple[bytes, ...]:
        """The ids of the dirs whose meta.properties was read, in log.dirs order: what the
        broker registers with. A dir that failed since, or at startup after its meta.properties
        was read, is among them: it is offline, not gone (the controller takes a registered
        dir missing from a later registration for one wiped, and forgets every replica)."""
        return tuple(self._meta[d].directory_id for d in self._dirs if d in self._meta)

    async def open_async(self) -> list[LoadedDir]:
        """`open` in a worker thread, so the event loop runs on while the logs load."""
        return await asyncio.to_thread(self.open)

    def _adopt(self, contents: DirContents) -> LoadedDir | None:
        """Remove one loaded dir's clean-shutdown marker (from here on a crash must be seen as
        unclean), then enter its logs in the manager's tables. None when the dir failed."""
        directory = contents.directory
        for tp in contents.logs:
            if tp in self._logs:
                raise LogDirError(f"{tp} is in both {self._dir_of[tp]} and {directory}")
        if contents.error is None and contents.clean_shutdown:
            try:
                (directory / CLEAN_SHUTDOWN_FILE).unlink()
                fsync_dir(directory)
            except OSError as error:
                release(contents.logs.values())
                contents.error = error
        if contents.error is not None:
            self._fail_at_open(directory, contents.error)
            return None
        for tp, log in contents.logs.items():
            self._logs[tp] = log
            self._dir_of[tp] = directory
        self._doomed_dirs.extend(contents.doomed)
        reports = {tp: log.recovery_report for tp, log in contents.logs.items()}
        meta = self._meta.get(directory)
        return LoadedDir(
            directory, contents.clean_shutdown, reports, None if meta is None else meta.directory_id
        )

    # -- failed dirs ----------------------------------------------------------------------------

    @property
    def log_dirs(self) -> tuple[Path, ...]:
        return tuple(self._dirs)

    @property
    def live_log_dirs(self) -> tuple[Path, ...]:
        return tuple(d for d in self._dirs if d not in self._offline_dirs)

    def is_live(self, directory: Path) -> bool:
        return directory in self._dirs and directory not in self._offline_dirs

    def offline_directory_ids(self) -> tuple[bytes, ...]:
        """The failed dirs' ids in log.dirs order (what the broker's heartbeats report); a dir
        whose meta.properties could not be read has none."""
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

    def fail_dir(self, directory: Path, error: OSError) -> None:
        """An I/O error in one of the manager's own steps: the dir goes offline at once (as
        `mark_dir_offline`, so no later step touches it) and is reported on `failure_channel`
        with its partitions. Nothing happens for a dir already offline: its failure was handled
        by whoever found it first."""
        if directory in self._offline_dirs:
            return
        logger.error("I/O error in log dir %s: %s", directory, error)
        lost = self.mark_dir_offline(directory)
        self.failure_channel.report(LogDirFailure(directory, tuple(lost), str(error)))

    # -- logs ---------------------------------------------------------------------------------

    @property
    def logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    def logs_by_dir(self) -> dict[Path, dict[TopicPartition, Log]]:
        """The live dirs' logs, dir by dir in log.dirs order (a snapshot)."""
        by_dir: dict[Path, dict[TopicPartition, Log]] = {d: {} for d in self.live_log_dirs}
        for tp, log in self._logs.items():
            by_dir[self._dir_of[tp]][tp] = log
        return by_dir

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

    def get_or_create_log(
        self, tp: TopicPartition, *, topic_id: str | None = None, is_new: bool = False
    ) -> Log:
        """The partition's log, created empty in the least loaded log dir if absent.

        With `topic_id`, partition.metadata is written (or checked: InconsistentTopicIdError).
        A partition of a failed dir, or an I/O error here, raises `LogDirOfflineError` naming
        the dir (the caller decides to fail it). While a dir is offline, an absent log is created
        only if `is_new` (the controller's LeaderAndIsr says the partition was just created):
        another may be in the failed dir, and an empty one elsewhere would stand in for its data
        (Kafka's getOrCreateLog); that refusal names no dir.
        """
        offline_dir = self._offline_logs.get(tp)
        if offline_dir is not None:
            raise LogDirOfflineError(f"{tp}: its log dir {offline_dir} is offline", offline_dir)
        log = self._logs.get(tp)
        if log is None and not is_new and self._offline_dirs:
            offline = ", ".join(str(d) for d in self._dirs if d in self._offline_dirs)
            raise LogDirOfflineError(f"{tp}: no log here; it may be in offline {offline}", None)
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
        files in the background. Returns the new directory name, None if there was no log. An
        I/O error fails the log's dir (`fail_dir`) and raises LogDirOfflineError."""
        log = self._logs.get(tp)
        directory = self._dir_of.get(tp)
        if log is None or directory is None:
            return None
        doomed = directory / delete_dir_name(tp)
        try:
            log.close()
            log.rename_directory(doomed)
            fsync_dir(directory)
        except OSError as error:
            self.fail_dir(directory, error)
            raise LogDirOfflineError(f"{tp}: I/O error deleting its log: {error}", directory) from (
                error
            )
        del self._logs[tp]
        del self._dir_of[tp]
        self._doomed_dirs.append((self._clock.monotonic_ms(), doomed))
        self.checkpoint_recovery_points(directory)
        self.checkpoint_log_start_offsets(directory)
        return doomed

    def take_due_deleted_dirs(self) -> list[Path]:
        """The deleted partition directories whose file.delete.delay.ms has passed, for the
        background work to remove."""
        now_ms = self._clock.monotonic_ms()
        delay_ms = self.config.default.file_delete_delay_ms
        due = [d for t, d in self._doomed_dirs if t + delay_ms <= now_ms]
        self._doomed_dirs = [(t, d) for t, d in self._doomed_dirs if t + delay_ms > now_ms]
        return due

    def truncate_to(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Truncate logs (follower becoming in sync with a new leader) and checkpoint recovery
        points at once, so a crash cannot resurrect a recovery point above the truncation."""
        for tp, offset in offsets.items():
            log = self._logs.get(tp)
            if log is not None:
                log.truncate_to(offset)
        self.checkpoint_recovery_points()

    # -- checkpoints (an I/O error fails the dir: `fail_dir`) -----------------------------------

    def _logs_in(self, directory: Path) -> dict[TopicPartition, Log]:
        return {tp: log for tp, log in self._logs.items() if self._dir_of[tp] == directory}

    def _checkpointed_dirs(self, directory: Path | None) -> Iterable[Path]:
        if directory is None:
            return self.live_log_dirs
        return (directory,) if self.is_live(directory) else ()

    def _write_checkpoint(self, path: Path, offsets: Mapping[TopicPartition, int]) -> None:
        try:
            OffsetCheckpointFile(path).write(offsets)
        except OSError as error:
            self.fail_dir(path.parent, error)

    def checkpoint_recovery_points(self, directory: Path | None = None) -> None:
        for d in self._checkpointed_dirs(directory):
            offsets = {tp: log.recovery_point for tp, log in self._logs_in(d).items()}
            self._write_checkpoint(d / RECOVERY_POINT_CHECKPOINT, offsets)

    def checkpoint_log_start_offsets(self, directory: Path | None = None) -> None:
        for d in self._checkpointed_dirs(directory):
            offsets = {tp: log.log_start_offset for tp, log in self._logs_in(d).items()}
            self._write_checkpoint(d / LOG_START_OFFSET_CHECKPOINT, offsets)

    def write_high_watermarks(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """Write each live log dir's replication-offset-checkpoint with its partitions' HWs."""
        for d in self.live_log_dirs:
            local = {tp: hw for tp, hw in high_watermarks.items() if self._dir_of.get(tp) == d}
            self._write_checkpoint(d / REPLICATION_OFFSET_CHECKPOINT, local)

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        merged: dict[TopicPartition, int] = {}
        for d in self._dirs:
            merged.update(OffsetCheckpointFile(d / REPLICATION_OFFSET_CHECKPOINT).read())
        return merged

    # -- background work and shutdown -----------------------------------------------------------

    async def run(self) -> None:
        """Run the background work until cancelled (the node owns this task)."""
        await LogBackgroundWork(self, self._clock).run()

    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown marker, unlock.

        Dir by dir: a dir's marker is written only when everything before it succeeded there;
        an I/O error fails that dir (no marker, so its next start recovers) and the other dirs
        still shut down cleanly.
        """
        try:
            for directory, logs in self.logs_by_dir().items():
                try:
                    for log in logs.values():
                        log.flush()
                        log.close()
                except OSError as error:
                    release(logs.values())
                    self.fail_dir(directory, error)
                    continue
                self.checkpoint_recovery_points(directory)
                self.checkpoint_log_start_offsets(directory)
                if self.is_live(directory):
                    try:
                        (directory / CLEAN_SHUTDOWN_FILE).touch()
                        fsync_dir(directory)
                    except OSError as error:
                        self.fail_dir(directory, error)
        finally:
            self._logs.clear()
            self._dir_of.clear()
            self._unlock_all()

    async def shutdown_async(self) -> None:
        """`shutdown` with the final fsyncs in worker threads first."""
        for directory, logs in self.logs_by_dir().items():
            try:
                for log in logs.values():
                    await log.flush_async()
            except OSError as error:
                self.fail_dir(directory, error)
        await asyncio.to_thread(self.shutdown)

    def abandon(self) -> None:
        """Release the dirs without flushing or marking a clean shutdown (tests: a crash)."""
        release(self._logs.values())
        self._logs.clear()
        self._dir_of.clear()
        self._unlock_all()
