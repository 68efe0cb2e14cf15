"""`ReplicaManager`: the broker's control plane for the partitions it hosts.

Kafka's ReplicaManager guards LeaderAndIsr, StopReplica and UpdateMetadata with
`replicaStateChangeLock`. Here the ReplicaManager is an actor: those three requests are messages,
handled one at a time to completion (awaits included), so no lock is needed. It owns

* the routing table `TopicPartition -> PartitionActor` (Kafka's allPartitions), published after
  every change as an immutable mapping (`routes`, actors/replication/routing.py) that the data
  path (actors/replication/request_path.py) and the replica fetchers read without asking;
* the `MetadataCache` (UpdateMetadata), the latest controller epoch, this broker's epoch;
* the partitions whose fetcher waits for the leader's endpoint (`pending_fetchers`);
* the replica fetchers, driven only through `FetcherControl` (synchronous add/remove, so a
  handler's fetcher changes happen in one step with the state change that caused them);
* two periodic tasks on the injected clock: ISR expiration every replica.lag.time.max.ms / 2
  (MaybeShrinkIsr to every partition, which only a leader acts on) and the high-watermark
  checkpoint every replica.high.watermark.checkpoint.interval.ms, started after the first
  LeaderAndIsr (seeds 000/003). Both only read published views and send messages;
* a watcher task on the LogManager's failure channel, which only sends messages.

LeaderAndIsr follows seed 002 (becomeLeaderOrFollower, makeLeaders, makeFollowers) with the fixes
of DESIGN.md: controller epoch and broker epoch fencing for the whole request; per partition,
UNKNOWN_TOPIC_OR_PARTITION when this broker is not a replica, STALE_CONTROLLER_EPOCH for older
(leader epoch, partition epoch), NONE without change for a repeat; a new follower takes its role
and epoch at once (so a deposed leader stops acknowledging writes) and truncates by leader epoch
in its fetcher (KIP-101), and its fetcher starts only once the leader's endpoint is known.
StopReplica stops a partition (and deletes its log when asked); without delete the stopped actor
stays routed while its log stays on disk, so clients get NOT_LEADER_OR_FOLLOWER rather than
UNKNOWN_TOPIC_OR_PARTITION (Kafka keeps such a partition hosted), and a later LeaderAndIsr hosts
it again with a new actor. UpdateMetadata refreshes the cache, stops the partitions of deleted
topics and starts the fetchers that waited for an endpoint.

A log failure fails its whole log dir (Kafka's LogDirFailureHandler, seeds 002/003): when a
partition actor stops on an I/O error, or a log cannot be created, the LogManager marks that dir
offline and every partition in it goes OFFLINE here (the actors are told `LogDirOffline`, stay
routed so requests get KAFKA_STORAGE_ERROR, leave the fetchers and are reported as no longer
led). A failure the LogManager finds in its own I/O (background work, checkpoints, the
high-watermark checkpoint written here, a deletion) it reports on its failure channel
(runtime/log/dir_failure.py): a watcher task of this actor takes each report and tells it to the
actor (waiting for mailbox room, so none is dropped), which takes the partitions OFFLINE the same
way. A LeaderAndIsr for a partition of an offline dir answers KAFKA_STORAGE_ERROR, and so does
one for a partition without a log here while any dir is offline, unless the controller marks it
new (its log may be in the failed dir); the broker's heartbeats report the dir
(node/broker/lifecycle.py) and the controller moves leadership away. When no log dir is left,
`on_all_log_dirs_offline` runs: the node stops the process (Kafka halts).

The leadership hook (`on_leadership_change`, seed 002's onLeadershipChange, consumed by the
group coordinator) hears of every partition that starts or stops being led here: LeaderAndIsr's
new leaders and followers, and also a leader stopped by StopReplica (with or without delete) or
as a stray, and a partition whose log failed (OFFLINE), each reported as no longer led.

Beside it: its messages (actors/replication/replica_manager_messages.py), its settings
(`ReplicaManagerConfig`, actors/replication/config.py), the per-partition epoch fence it shares
with the partition actor (actors/replication/leadership.py), and what is computed from the
routes — the gauges and which leader each follower fetches from (actors/replication/routing.py).
Why this module still runs over ~500 lines: it is one actor's state (partitions, routes, epochs,
pending fetchers, topic overrides) and the three control handlers that change it together;
splitting the handlers apart would scatter that one owner's state over files.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final

from actors.metadata_cache import MetadataCache, MetadataSnapshot, StaleControllerEpochError
from actors.replication.alter_partition import AlterPartitionSink
from actors.replication.config import ReplicaManagerConfig
from actors.replication.delayed import DelayedOperations
from actors.replication.fetcher_manager import FetcherControl
from actors.replication.leadership import leader_and_isr_fence
from actors.replication.partition import IsrChangeListener, PartitionActor
from actors.replication.partition_messages import (
    BecomeFollower,
    BecomeLeader,
    LeadershipResult,
    LogDirOffline,
    MaybeShrinkIsr,
    PartitionState,
    ReplicasIneligible,
)
from actors.replication.replica_manager_messages import (
    HandleLeaderAndIsr,
    HandleStopReplica,
    HandleUpdateMetadata,
    SetBrokerEpoch,
)
from actors.replication.request_path import ask_partition
from actors.replication.routing import (
    EMPTY_ROUTES,
    PartitionCounts,
    Routes,
    partition_counts,
    route_followers,
    tp_order,
)
from actors.views import PartitionView, Role
from runtime.actor import Actor, MailboxClosed, MailboxFull, handles
from runtime.clock import Clock
from runtime.log.dir_failure import LogDirFailure
from runtime.log.errors import InconsistentTopicIdError
from runtime.log.manager import LogDirOfflineError, LogManager
from wire.errors import ErrorCode
from wire.messages import (
    LEADER_AND_ISR_FULL,
    LeaderAndIsrPartitionError,
    LeaderAndIsrResponse,
    StopReplicaPartitionError,
    StopReplicaResponse,
    TopicConfigs,
    UpdateMetadataResponse,
)
from wire.topic import TopicPartition, topic_id_text

log = logging.getLogger(__name__)

NO_BROKER_EPOCH: Final = -1
# StopReplica's leader_epoch sentinels: stop whatever the epoch (-1), the topic is being deleted
# (-2). Any other value must not be older than the replica's epoch.
_STOP_ANY_EPOCH: Final = (-1, -2)


# -- messages ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _PartitionFailed:
    """A partition actor stopped on a log failure (its supervisor callback sent this)."""

    actor: PartitionActor


@dataclass(frozen=True, slots=True)
class _LogDirFailed:
    """The LogManager took a dir offline after an I/O error of its own (the watcher sent this)."""

    failure: LogDirFailure


# (partitions now led here, partitions no longer led here): the second holds new followers and
# partitions stopped or gone offline; it may name one that was not led (the consumer ignores
# what it does not hold).
LeadershipHook = Callable[[Sequence[TopicPartition], Sequence[TopicPartition]], None]
DeletionHook = Callable[[Sequence[TopicPartition]], None]


# -- the actor -----------------------------------------------------------------------------------


class ReplicaManager(Actor):
    def __init__(
        self,
        config: ReplicaManagerConfig,
        log_manager: LogManager,
        fetchers: FetcherControl,
        delayed: DelayedOperations,
        alter_partition_sink: AlterPartitionSink,
        *,
        metadata_cache: MetadataCache | None = None,
        on_leadership_change: LeadershipHook | None = None,
        on_partitions_deleted: DeletionHook | None = None,
        isr_change_listener: IsrChangeListener | None = None,
        on_all_log_dirs_offline: Callable[[], None] | None = None,
        on_metadata_updated: Callable[[], None] | None = None,
        clock: Clock | None = None,
        capacity: int | None = None,
    ) -> None:
        super().__init__(f"replica-manager@{config.broker_id}", clock=clock, capacity=capacity)
        self.config = config
        self.broker_id = config.broker_id
        self._log_manager = log_manager
        self._fetchers = fetchers
        self._delayed = delayed
        self._sink = alter_partition_sink
        self._metadata = metadata_cache if metadata_cache is not None else MetadataCache()
        self._on_leadership_change = on_leadership_change
        # Partitions an UpdateMetadata deleted (the group coordinator drops their offsets).
        self._on_partitions_deleted = on_partitions_deleted
        # Handed to every partition actor: the broker's ISR shrink/expand meters.
        self._isr_change_listener = isr_change_listener
        # Every log dir failed: this broker can serve nothing (the node stops the process).
        self._on_all_log_dirs_offline = on_all_log_dirs_offline
        # Each UpdateMetadata applied (the node opens its Kafka listener on the first).
        self._on_metadata_updated = on_metadata_updated
        self._partitions: dict[TopicPartition, PartitionActor] = {}
        self._aborting = False
        self._routes: Routes = EMPTY_ROUTES
        self._controller_epoch = -1
        self._broker_epoch = NO_BROKER_EPOCH
        self._pending_fetchers: set[TopicPartition] = set()
        self._checkpointing = False
        self._dir_failure_watcher: asyncio.Task[None] | None = None
        # Per-topic min.insync.replicas overrides, replaced whole on change (the data path
        # reads it without asking the actor).
        self._min_insync: Mapping[str, int] = MappingProxyType({})

    # -- published state ----------------------------------------------------------------------

    @property
    def routes(self) -> Routes:
        """The routing table as of the last change; immutable, so any task may keep it."""
        return self._routes

    def partition(self, tp: TopicPartition) -> PartitionActor | None:
        """The data path's lookup: the hosted partition's actor, if any."""
        return self._routes.get(tp)

    @property
    def metadata(self) -> MetadataSnapshot:
        return self._metadata.snapshot

    @property
    def controller_epoch(self) -> int:
        return self._controller_epoch

    def min_insync_replicas(self, topic: str) -> int:
        """The topic's min.insync.replicas (its override, else the broker's)."""
        return self._min_insync.get(topic, self.config.min_insync_replicas)

    @property
    def pending_fetchers(self) -> frozenset[TopicPartition]:
        """Followers whose fetcher waits for the leader's endpoint (for tests and diagnostics)."""
        return frozenset(self._pending_fetchers)

    def partition_counts(self) -> PartitionCounts:
        """Kafka's ReplicaManager gauges, from the published routes and views (no message):
        any task may call it, and what it reads is immutable."""
        return partition_counts(self._routes, self.min_insync_replicas)

    def _publish_routes(self) -> None:
        self._routes = MappingProxyType(dict(self._partitions))

    def _report_leadership(
        self, leaders: Sequence[TopicPartition], not_led: Sequence[TopicPartition]
    ) -> None:
        """Run the leadership hook, synchronously, in the handler that made the change (so its
        consumer hears of the moves in the order they were made)."""
        if self._on_leadership_change is not None and (leaders or not_led):
            self._on_leadership_change(leaders, not_led)

    # -- lifecycle ----------------------------------------------------------------------------

    async def abort(self) -> None:
        """Stop as a killed process would: queued requests are rejected and no last
        high-watermark checkpoint is written (for crash tests and simulations)."""
        self._aborting = True
        await self.stop(drain=False)

    async def on_start(self) -> None:
        self.every(self.config.replica_lag_time_max_ms // 2, self._expire_isr)
        self._dir_failure_watcher = asyncio.get_running_loop().create_task(
            self._watch_log_dir_failures(), name=f"{self.name}-log-dir-failures"
        )

    async def _watch_log_dir_failures(self) -> None:
        """Seed 002's LogDirFailureHandler: each dir the LogManager failed goes to the actor."""
        channel = self._log_manager.failure_channel
        with contextlib.suppress(MailboxClosed):
            while True:
                await self.tell(_LogDirFailed(await channel.take()))

    async def on_stop(self) -> None:
        watcher, self._dir_failure_watcher = self._dir_failure_watcher, None
        if watcher is not None:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        self._fetchers.remove_partitions(list(self._partitions))
        self._pending_fetchers.clear()
        actors = list(self._partitions.values())
        await asyncio.gather(*(actor.stop() for actor in actors))
        # The last HW checkpoint, as Kafka's shutdown writes one (a clean restart keeps its HWs);
        # not when aborting, which stands for a killed process.
        if self._checkpointing and not self._aborting:
            self._checkpoint_high_watermarks()
        self._partitions.clear()
        self._publish_routes()

    def _expire_isr(self) -> None:
        """Seed 000's maybeShrinkIsr round: every hosted partition gets the tick (followers
        ignore it). Told, not asked: the round must not wait on a busy partition."""
        for actor in self._routes.values():
            if actor.view.role is Role.LEADER:
                with contextlib.suppress(MailboxFull, MailboxClosed):
                    actor.try_tell(MaybeShrinkIsr())

    def _checkpoint_high_watermarks(self) -> None:
        """Write replication-offset-checkpoint from the published views (a stopped actor's view
        is its last). Logs no actor owns any more (strays, partitions of deleted topics) are read
        directly: nothing else touches them."""
        high_watermarks: dict[TopicPartition, int] = {}
        for tp, partition_log in self._log_manager.logs.items():
            actor = self._partitions.get(tp)
            if actor is None:
                high_watermarks[tp] = partition_log.high_watermark
            else:
                high_watermarks[tp] = actor.view.high_watermark.message_offset
        self._log_manager.write_high_watermarks(high_watermarks)

    # -- fencing ------------------------------------------------------------------------------

    @handles(SetBrokerEpoch)
    def _set_broker_epoch(self, message: SetBrokerEpoch) -> None:
        self._broker_epoch = message.broker_epoch

    def _fence(self, controller_epoch: int, broker_epoch: int) -> ErrorCode | None:
        """The whole-request checks: a request meant for an earlier incarnation of this broker,
        or from an older controller, changes nothing."""
        if (
            broker_epoch != NO_BROKER_EPOCH
            and self._broker_epoch != NO_BROKER_EPOCH
            and broker_epoch < self._broker_epoch
        ):
            return ErrorCode.STALE_BROKER_EPOCH
        if controller_epoch < self._controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        return None

    # -- LeaderAndIsr -------------------------------------------------------------------------

    @handles(HandleLeaderAndIsr)
    async def _leader_and_isr(self, message: HandleLeaderAndIsr) -> LeaderAndIsrResponse:
        request = message.request
        tps = [TopicPartition(s.topic_name, s.partition_index) for s in request.partition_states]
        fenced = self._fence(request.controller_epoch, request.broker_epoch)
        if fenced is not None:
            log.info("%s: LeaderAndIsr refused: %s", self.name, fenced.name)
            return LeaderAndIsrResponse(
                error_code=fenced, partition_errors=_leader_and_isr_errors(tps, fenced)
            )
        self._controller_epoch = request.controller_epoch
        if request.type == LEADER_AND_ISR_FULL:
            await self._stop_strays(set(tps))
        # Before any log is created: a new log takes its topic's settings.
        self._apply_topic_configs(request.topic_configs)
        errors: dict[TopicPartition, ErrorCode] = {}
        to_lead: dict[TopicPartition, tuple[PartitionActor, PartitionState]] = {}
        to_follow: dict[TopicPartition, tuple[PartitionActor, PartitionState]] = {}
        for tp, wire_state in zip(tps, request.partition_states, strict=True):
            state = PartitionState.from_wire(wire_state)
            if self.broker_id not in state.replicas:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            actor = self._partitions.get(tp)
            if actor is not None and actor.view.role is Role.STOPPED:
                # Stopped by StopReplica and kept routed: a stopped actor's state is final, so
                # the partition is hosted again by a new actor, as when it was first hosted.
                actor = None
            if actor is not None:
                verdict = _epoch_verdict(actor.view, state.epochs)
                if verdict is not None:
                    errors[tp] = verdict
                    continue
            else:
                created = await self._create_partition(tp, wire_state.topic_id, wire_state.is_new)
                if isinstance(created, ErrorCode):
                    errors[tp] = created
                    continue
                actor = created
            (to_lead if state.leader == self.broker_id else to_follow)[tp] = (actor, state)
        leaders = await self._make_leaders(to_lead, errors)
        followers = await self._make_followers(to_follow, errors)
        if not self._checkpointing:
            # Seed 000: checkpointing starts with the first LeaderAndIsr, once the HWs in memory
            # come from a controller's decision rather than only from the last checkpoint.
            self._checkpointing = True
            self.every(
                self.config.high_watermark_checkpoint_interval_ms,
                self._checkpoint_high_watermarks,
            )
        await self._fetchers.shutdown_idle()
        self._report_leadership(leaders, followers)
        return LeaderAndIsrResponse(
            partition_errors=[
                LeaderAndIsrPartitionError(
                    topic_name=tp.topic, partition_index=tp.partition, error_code=errors[tp]
                )
                for tp in tps
            ]
        )

    def _apply_topic_configs(self, entries: Iterable[TopicConfigs]) -> None:
        """Each entry replaces its topic's overrides: log settings go to the log manager
        (which applies them to the topic's open logs too), min.insync.replicas to the data path.
        The controller validated them at CreateTopics; one that fails here anyway (a newer
        controller with a setting this broker does not know) keeps the topic's old settings."""
        min_insync = dict(self._min_insync)
        for entry in entries:
            overrides = {config.name: config.value for config in entry.configs}
            try:
                value = overrides.get("min.insync.replicas")
                topic_min_insync = None if value is None else int(value)
                if topic_min_insync is not None and topic_min_insync < 1:
                    raise ValueError(f"min.insync.replicas must be >= 1: {value}")
                self._log_manager.set_topic_config(entry.topic_name, overrides)
            except ValueError as error:
                log.warning("%s: configs of %s refused: %s", self.name, entry.topic_name, error)
                continue
            if topic_min_insync is None:
                min_insync.pop(entry.topic_name, None)
            else:
                min_insync[entry.topic_name] = topic_min_insync
        self._min_insync = MappingProxyType(min_insync)

    async def _stop_strays(self, listed: set[TopicPartition]) -> None:
        """A FULL request lists every partition this broker should host (KIP-516); the others
        are strays (e.g. reassigned away or deleted while this broker was down). They stop
        serving, but their logs stay on disk: deleting data on the strength of one request is
        the controller's call, made explicitly with StopReplica (delete) — Kafka's brokers
        likewise only log stray partitions found this way."""
        for tp in sorted(set(self._partitions) - listed, key=tp_order):
            log.warning("%s: %s is not in a FULL LeaderAndIsr: stray, stopped", self.name, tp)
            await self._stop_partition(tp)

    async def _create_partition(
        self, tp: TopicPartition, topic_id: bytes, is_new: bool
    ) -> PartitionActor | ErrorCode:
        try:
            partition_log = self._log_manager.get_or_create_log(
                tp, topic_id=topic_id_text(topic_id), is_new=is_new
            )
        except InconsistentTopicIdError:
            log.warning("%s: %s belongs to another topic id", self.name, tp)
            return ErrorCode.INCONSISTENT_TOPIC_ID
        except LogDirOfflineError as error:
            log.error("%s: cannot open the log of %s: %s", self.name, tp, error)
            if error.directory is not None:
                await self._fail_log_dir(error.directory)
            return ErrorCode.KAFKA_STORAGE_ERROR
        actor = PartitionActor(
            tp,
            self.broker_id,
            partition_log,
            alter_partition_sink=self._sink,
            config=self.config.partition_config,
            listener=self._delayed,
            # KIP-841: only brokers the controller lists as alive and not in controlled
            # shutdown may join the ISR or hold back the HW from outside it; nor may a replica
            # the controller lists offline (its log dir failed there).
            is_replica_eligible=functools.partial(self._replica_eligible, tp),
            isr_change_listener=self._isr_change_listener,
            clock=self.clock,
            supervisor=self._partition_failed,
        )
        await actor.start()
        self._partitions[tp] = actor
        self._publish_routes()
        return actor

    def _partition_failed(self, actor: Actor, error: BaseException) -> None:
        assert isinstance(actor, PartitionActor), actor
        with contextlib.suppress(MailboxFull, MailboxClosed):
            self.try_tell(_PartitionFailed(actor))

    @handles(_PartitionFailed)
    async def _on_partition_failed(self, message: _PartitionFailed) -> None:
        # Kafka's offline partition: it stays in the routing table, so requests for it get
        # KAFKA_STORAGE_ERROR (its mailbox is closed) until a StopReplica or a restart. Its log's
        # dir fails with it, every partition of the dir going offline; no dir means an earlier
        # failure of the same dir took this partition offline already.
        tp = message.actor.topic_partition
        directory = self._log_manager.log_dir_of(tp)
        if self._partitions.get(tp) is message.actor and directory is not None:
            await self._fail_log_dir(directory)

    def _take_offline(self, tps: Sequence[TopicPartition]) -> None:
        self._fetchers.remove_partitions(tps)
        self._pending_fetchers.difference_update(tps)
        for tp in tps:
            self._delayed.partition_changed(tp)
        # Whatever they were, they lead nothing now (their roles before the failure are gone).
        self._report_leadership((), tps)

    @handles(_LogDirFailed)
    async def _on_log_dir_failed(self, message: _LogDirFailed) -> None:
        failure = message.failure
        log.error("%s: I/O error in log dir %s: %s", self.name, failure.directory, failure.error)
        await self._take_dir_offline(failure.directory, failure.partitions)

    async def _fail_log_dir(self, directory: Path) -> None:
        """Kafka's handleLogDirFailure: every partition of the dir goes offline here."""
        await self._take_dir_offline(directory, self._log_manager.mark_dir_offline(directory))

    async def _take_dir_offline(self, directory: Path, lost: Sequence[TopicPartition]) -> None:
        """`lost`: the partitions whose logs were in the dir, now offline in the LogManager."""
        hosted = [tp for tp in lost if tp in self._partitions]
        log.error("%s: log dir %s failed: %d partitions offline", self.name, directory, len(hosted))
        for tp in hosted:
            actor = self._partitions[tp]
            # Told, not dropped: each must go OFFLINE (its supervisor callback follows, and
            # finds its dir already offline).
            with contextlib.suppress(MailboxClosed):
                await actor.tell(LogDirOffline(str(directory)))
        self._take_offline(hosted)
        if not self._log_manager.live_log_dirs:
            log.critical("%s: every log dir is offline: the broker must stop", self.name)
            if self._on_all_log_dirs_offline is not None:
                self._on_all_log_dirs_offline()

    async def _make_leaders(
        self,
        to_lead: Mapping[TopicPartition, tuple[PartitionActor, PartitionState]],
        errors: dict[TopicPartition, ErrorCode],
    ) -> list[TopicPartition]:
        """Seed 002's makeLeaders: stop fetching first, then take leadership. Returns the
        partitions whose leadership changed."""
        if not to_lead:
            return []
        self._fetchers.remove_partitions(list(to_lead))
        self._pending_fetchers.difference_update(to_lead)
        results = await self._ask_all(
            {tp: (actor, BecomeLeader(state)) for tp, (actor, state) in to_lead.items()}
        )
        changed = []
        for tp, result in results.items():
            errors[tp] = result.error
            if result.changed:
                changed.append(tp)
        return changed

    async def _make_followers(
        self,
        to_follow: Mapping[TopicPartition, tuple[PartitionActor, PartitionState]],
        errors: dict[TopicPartition, ErrorCode],
    ) -> list[TopicPartition]:
        """Seed 002's makeFollowers with DESIGN.md's fixes: every replica takes the new role and
        epoch now; the ones whose leadership changed stop fetching, release their waiting
        produces and fetches, and fetch from the new leader once its endpoint is known."""
        if not to_follow:
            return []
        results = await self._ask_all(
            {tp: (actor, BecomeFollower(state)) for tp, (actor, state) in to_follow.items()}
        )
        changed = []
        for tp, result in results.items():
            errors[tp] = result.error
            if result.changed:
                changed.append(tp)
        self._fetchers.remove_partitions(changed)
        for tp in changed:
            self._delayed.partition_changed(tp)
        self._start_fetchers(changed)
        return changed

    async def _ask_all(
        self, asks: Mapping[TopicPartition, tuple[PartitionActor, BecomeLeader | BecomeFollower]]
    ) -> dict[TopicPartition, LeadershipResult]:
        tps = list(asks)
        answers = await asyncio.gather(*(_ask_leadership(*asks[tp]) for tp in tps))
        return {
            tp: LeadershipResult(answer) if isinstance(answer, ErrorCode) else answer
            for tp, answer in zip(tps, answers, strict=True)
        }

    def _start_fetchers(self, tps: Iterable[TopicPartition]) -> None:
        """Add each follower to the fetcher of its leader if the leader's endpoint is known;
        keep the rest pending until an UpdateMetadata (or a newer LeaderAndIsr) brings it."""
        hosted = self._partitions
        views = [(tp, None if (a := hosted.get(tp)) is None else a.view) for tp in tps]
        routed = route_followers(views, self._metadata.snapshot, self.config.inter_broker_listener)
        self._pending_fetchers.difference_update(tp for tp, _ in views)
        self._pending_fetchers.update(routed.waiting)
        for leader, partitions in routed.by_leader.items():
            self._fetchers.add_partitions(leader, partitions)

    # -- StopReplica --------------------------------------------------------------------------

    @handles(HandleStopReplica)
    async def _stop_replica(self, message: HandleStopReplica) -> StopReplicaResponse:
        request = message.request
        tps = [TopicPartition(s.topic_name, s.partition_index) for s in request.partition_states]
        fenced = self._fence(request.controller_epoch, request.broker_epoch)
        if fenced is not None:
            return StopReplicaResponse(
                error_code=fenced,
                partition_errors=[
                    StopReplicaPartitionError(
                        topic_name=tp.topic, partition_index=tp.partition, error_code=fenced
                    )
                    for tp in tps
                ],
            )
        self._controller_epoch = request.controller_epoch
        answers = []
        for tp, state in zip(tps, request.partition_states, strict=True):
            error = await self._stop_partition(
                tp,
                leader_epoch=state.leader_epoch,
                delete=state.delete_partition,
                keep_routed=not state.delete_partition,
            )
            answers.append(
                StopReplicaPartitionError(
                    topic_name=tp.topic, partition_index=tp.partition, error_code=error
                )
            )
        await self._fetchers.shutdown_idle()
        return StopReplicaResponse(partition_errors=answers)

    async def _stop_partition(
        self,
        tp: TopicPartition,
        *,
        leader_epoch: int = -1,
        delete: bool = False,
        keep_routed: bool = False,
    ) -> ErrorCode:
        """Stop serving `tp`: off the fetchers, its actor stopped, its log deleted if asked.
        With `keep_routed` the stopped actor stays in the routes (StopReplica without delete),
        so the data path answers NOT_LEADER_OR_FOLLOWER; otherwise the partition is no longer
        hosted (UNKNOWN_TOPIC_OR_PARTITION)."""
        actor = self._partitions.get(tp)
        if (
            actor is not None
            and leader_epoch not in _STOP_ANY_EPOCH
            and leader_epoch < actor.view.leader_epoch
        ):
            return ErrorCode.FENCED_LEADER_EPOCH
        self._fetchers.remove_partitions([tp])
        self._pending_fetchers.discard(tp)
        if actor is not None:
            was_leader = actor.view.role is Role.LEADER
            if not keep_routed:
                del self._partitions[tp]
                self._publish_routes()
            await actor.stop()
            # Waiting produces and fetches see the partition stopped or gone and answer now.
            self._delayed.partition_changed(tp)
            if was_leader:
                self._report_leadership((), (tp,))
        if delete:
            try:
                self._log_manager.delete_log(tp)
            except OSError:
                log.exception("%s: cannot delete the log of %s", self.name, tp)
                return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.NONE

    def _replica_eligible(self, tp: TopicPartition, broker_id: int) -> bool:
        snapshot = self._metadata.snapshot
        if not snapshot.is_replica_eligible(broker_id):
            return False
        state = snapshot.partition_state(tp)
        return state is None or broker_id not in state.offline_replicas

    def _eligibility_lost(self, before: MetadataSnapshot) -> None:
        """After an UpdateMetadata: tell each partition led here whose followers it made
        ineligible (`ReplicasIneligible`), so a HW held back by one moves on now."""
        after = self._metadata.snapshot
        lost = {b for b in before.brokers if before.is_replica_eligible(b)} - {
            b for b in after.brokers if after.is_replica_eligible(b)
        }
        for tp, actor in self._partitions.items():
            view = actor.view
            if view.role is not Role.LEADER:
                continue
            followers = set(view.replicas) - {self.broker_id}
            state, old = after.partition_state(tp), before.partition_state(tp)
            newly_offline = set() if state is None else set(state.offline_replicas)
            if old is not None:
                newly_offline -= set(old.offline_replicas)
            if followers & (lost | newly_offline):
                with contextlib.suppress(MailboxFull, MailboxClosed):
                    # Dropped only when the mailbox is full, which means work is queued there
                    # anyway: each append or fetch it holds recomputes the HW too.
                    actor.try_tell(ReplicasIneligible())

    # -- UpdateMetadata -----------------------------------------------------------------------

    @handles(HandleUpdateMetadata)
    async def _update_metadata(self, message: HandleUpdateMetadata) -> UpdateMetadataResponse:
        request = message.request
        fenced = self._fence(request.controller_epoch, request.broker_epoch)
        if fenced is ErrorCode.STALE_BROKER_EPOCH:
            return UpdateMetadataResponse.error_response(fenced)
        before = self._metadata.snapshot
        try:
            deleted = self._metadata.update(request)
        except StaleControllerEpochError as error:
            log.info("%s: %s", self.name, error)
            return UpdateMetadataResponse.error_response(ErrorCode.STALE_CONTROLLER_EPOCH)
        self._controller_epoch = max(self._controller_epoch, request.controller_epoch)
        self._apply_topic_configs(request.topic_configs)
        # A deleted topic's partitions stop serving now; their logs go with the StopReplica
        # (delete) the controller sends them.
        for tp in deleted:
            if tp in self._partitions:
                await self._stop_partition(tp)
        if deleted and self._on_partitions_deleted is not None:
            self._on_partitions_deleted(deleted)
        if self._pending_fetchers:
            self._start_fetchers(sorted(self._pending_fetchers, key=tp_order))
        self._eligibility_lost(before)
        if self._on_metadata_updated is not None:
            self._on_metadata_updated()
        return UpdateMetadataResponse()


async def _ask_leadership(
    actor: PartitionActor, message: BecomeLeader | BecomeFollower
) -> LeadershipResult | ErrorCode:
    if isinstance(message, BecomeLeader):
        return await ask_partition(actor, message)
    return await ask_partition(actor, message)


def _epoch_verdict(view: PartitionView, proposed: tuple[int, int]) -> ErrorCode | None:
    """The LeaderAndIsr fence (actors/replication/leadership.py) on the published view. The
    actor checks again (authoritatively); checking here first keeps a stale or repeated request
    from touching fetchers at all."""
    applied = None
    if view.role is not Role.NONE and view.role is not Role.OFFLINE:
        applied = (view.leader_epoch, view.partition_epoch)
    return leader_and_isr_fence(applied, proposed)


def _leader_and_isr_errors(
    tps: Iterable[TopicPartition], error: ErrorCode
) -> list[LeaderAndIsrPartitionError]:
    return [
        LeaderAndIsrPartitionError(
            topic_name=tp.topic, partition_index=tp.partition, error_code=error
        )
        for tp in tps
    ]
