"""The controller as one actor (seed 004): broker liveness, leader election, ISR changes,
controlled shutdown and topics, with every decision written to the metadata log first.

Every event is a message (actors/controller/messages.py) and the actor handles one at a time,
which is what Kafka's controllerLock and event queue provided. An event's handler

1. decides, from the model (actors/controller/model.py, the durable state) and the liveness it
   keeps in memory, which records to write: a `_Change` collects them, reading its own pending
   records first, so several steps of one event (elect, then shrink ISRs) compose;
2. commits them to the metadata log (appended and fsync'd) and only then applies them to the
   model — nothing is acted on that a restart could forget;
3. moves the partition and replica state machines (actors/controller/states.py), and
4. sends LeaderAndIsr / UpdateMetadata / StopReplica through the per-broker request channels,
   built from the model as it now is (an `_Outbox` per event, sent in Kafka's order).

Producer ids (KIP-730): a broker asks for a block of ids with AllocateProducerIds; the block's
end is committed to the log before the answer, so a restarted controller continues after it and
no id is handed out twice.

ZooKeeper's part is played by registration and heartbeats: a registered broker is live until it
misses heartbeats for broker.session.timeout.ms (then it is fenced: onBrokerFailure) or asks to
be fenced at the end of its controlled shutdown. A registration from a new process of a live
broker id is refused (DUPLICATE_BROKER_REGISTRATION) until the old one's session ends.

Epochs (DESIGN.md): the leader epoch grows whenever the controller changes a partition's leader
or itself removes replicas from its ISR; the partition epoch with every change of the partition;
each registration gets a new broker epoch, which the requests to that broker carry. A restarted
controller replays the log and writes a higher controller epoch, so brokers fence the requests
of its predecessor.

Ownership and why no lock: the model, the state machines, the liveness table and the request
channels' membership are touched only by this actor's handlers, one message at a time. The
timers only `tell` it ticks; the channels report StopReplica answers back as messages.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from actors.controller.channel import applied_code
from actors.controller.election import (
    ElectionResult,
    controlled_shutdown_election,
    offline_election,
    preferred_election,
    remove_from_isr,
)
from actors.controller.messages import (
    AllocateProducerIds,
    AlterPartition,
    BrokerStatus,
    ClusterStatus,
    ControlledShutdown,
    ControllerConfig,
    CreateTopics,
    DeleteTopics,
    DescribeCluster,
    Heartbeat,
    RebalanceTick,
    RegisterBroker,
    SessionTick,
    StopReplicaDone,
)
from actors.controller.model import (
    MAX_PRODUCER_ID,
    PRODUCER_ID_BLOCK_SIZE,
    ControllerModel,
)
from actors.controller.requests import (
    leader_and_isr_state,
    live_broker_entries,
    live_leaders,
    native_address,
    topic_configs,
    update_metadata_state,
)
from actors.controller.states import (
    PartitionState,
    PartitionStates,
    ReplicaKey,
    ReplicaState,
    ReplicaStates,
)
from actors.controller.topics import TopicRefusal, plan_topic, unclean_election_enabled
from actors.views import NO_LEADER
from runtime.actor import (
    Actor,
    ActorFatalError,
    MailboxClosed,
    MailboxFull,
    Supervisor,
    handles,
)
from runtime.clock import Clock
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    LEADER_AND_ISR_FULL,
    LEADER_AND_ISR_INCREMENTAL,
    AllocateProducerIdsResponse,
    AlterPartitionPartitionResult,
    AlterPartitionResponse,
    AlterPartitionTopicResult,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    ControlledShutdownResponse,
    CreatableTopicResult,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsResponse,
    LeaderAndIsrRequest,
    RemainingPartition,
    Request,
    Response,
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
)
from wire.metadata_records import (
    ControllerEpochRecord,
    Endpoint,
    FenceBrokerRecord,
    PartitionRecord,
    ProducerIdsRecord,
    Record,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicDeletionRecord,
    TopicRecord,
    decode_record,
    encode_record,
)
from wire.topic import TopicPartition

log = logging.getLogger("ketch.controller")

STOP_REPLICA_DELETING_EPOCH = -2  # StopReplica's leader epoch for a topic being deleted


class MetadataStore(Protocol):
    """The durable log the controller writes (runtime/log/metadata_log.py)."""

    def load(self) -> tuple[list[dict[str, object]], int]: ...
    async def append(self, records: list[dict[str, object]]) -> int: ...
    async def snapshot(self, records: list[dict[str, object]], last_offset: int) -> None: ...


ResponseCallback = Callable[[Response | None, int], None]


class RequestChannels(Protocol):
    """One ordered, retrying request channel per broker (actors/controller/channel.py)."""

    def add_broker(self, broker_id: int, address: Address) -> None: ...
    def remove_broker(self, broker_id: int) -> None: ...
    def send(
        self, broker_id: int, request: Request, callback: ResponseCallback | None = None
    ) -> None: ...


# -- one event's pending records -------------------------------------------------------------------


class _Change:
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
        bump_leader_epoch: bool = True,
    ) -> PartitionRecord:
        """A new state for the partition (leader/ISR changed by the controller), based on its
        pending state within this event: both epochs move on."""
        current = self.partition(p)
        base = self._model.partition(p.topic_id, p.partition)
        assert base is not None, p
        changed = replace(
            current,
            leader=current.leader if leader is None else leader,
            isr=tuple(current.isr if isr is None else isr),
            # One bump per event, however many steps touched the partition.
            leader_epoch=base.leader_epoch + 1 if bump_leader_epoch else current.leader_epoch,
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


# -- one event's outgoing requests -----------------------------------------------------------------


@dataclass
class _Outbox:
    """Kafka's ControllerBrokerRequestBatch: what one event sends, per broker and kind, built
    from the model when the event's records are committed, sent LeaderAndIsr first, then
    UpdateMetadata, then StopReplica (Kafka's order)."""

    leader_and_isr: dict[int, dict[TopicPartition, bool]] = field(default_factory=dict)
    full_leader_and_isr: set[int] = field(default_factory=set)
    metadata: set[TopicPartition] = field(default_factory=set)
    metadata_everything: bool = False
    stop_replica: dict[int, dict[TopicPartition, bool]] = field(default_factory=dict)

    def lead_or_follow(
        self, brokers: Iterable[int], tp: TopicPartition, *, is_new: bool = False
    ) -> None:
        for broker in brokers:
            self.leader_and_isr.setdefault(broker, {})[tp] = is_new
        self.metadata.add(tp)

    def stop(self, broker: int, tp: TopicPartition, *, delete: bool) -> None:
        self.stop_replica.setdefault(broker, {})[tp] = delete


# -- the actor -------------------------------------------------------------------------------------


class ControllerActor(Actor):
    def __init__(
        self,
        config: ControllerConfig,
        store: MetadataStore,
        channels: RequestChannels,
        *,
        clock: Clock,
        rng: random.Random | None = None,
        capacity: int | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        super().__init__(
            f"controller@{config.controller_id}",
            clock=clock,
            capacity=capacity,
            supervisor=supervisor,
        )
        self.config = config
        self._store = store
        self._channels = channels
        self._rng = rng if rng is not None else random.Random()
        self.model = ControllerModel()
        self.partition_states = PartitionStates()
        self.replica_states = ReplicaStates()
        # Live (registered, unfenced) brokers -> monotonic ms of their last heartbeat.
        self._last_heartbeat: dict[int, int] = {}
        self._shutting_down: set[int] = set()
        self._records_since_snapshot = 0
        self._last_offset = -1
        self.unclean_elections = 0

    # -- lifecycle --------------------------------------------------------------------------------

    async def on_start(self) -> None:
        encoded, next_offset = self._store.load()
        for data in encoded:
            self.model.apply(decode_record(data))
        self._last_offset = next_offset - 1
        self._records_since_snapshot = len(encoded)
        change = _Change(self.model)
        change.add(ControllerEpochRecord(self.model.controller_epoch + 1))
        await self._commit(change)
        log.info(
            "%s: active with epoch %d (%d records replayed)",
            self.name,
            self.model.controller_epoch,
            len(encoded),
        )
        await self._resume()
        self.every(
            self.config.session_check_interval_ms, functools.partial(self._tick, SessionTick())
        )
        if self.config.auto_leader_rebalance_enable:
            self.every(
                self.config.leader_imbalance_check_interval_seconds * 1000,
                functools.partial(self._tick, RebalanceTick()),
            )

    def _tick(self, tick: SessionTick | RebalanceTick) -> None:
        with contextlib.suppress(MailboxFull, MailboxClosed):
            # A full mailbox skips a tick; the next one comes soon enough.
            self.try_tell(tick)

    async def _resume(self) -> None:
        """After a (re)start: the brokers the log says are live get a grace session from now,
        a channel, and the whole state (FULL LeaderAndIsr, UpdateMetadata) under the new epoch;
        then elections and deletions pick up where the previous controller left them."""
        now = self.clock.monotonic_ms()
        live = self.model.unfenced_broker_ids()
        for broker_id in live:
            self._last_heartbeat[broker_id] = now
            self._add_channel(broker_id)
        self._initialize_states()
        outbox = _Outbox()
        for broker_id in live:
            self._send_full_state(outbox, broker_id)
        outbox.metadata_everything = True
        change = _Change(self.model)
        self._elect_offline(change)
        await self._commit(change)
        self._announce(change, outbox)
        self._flush(outbox)
        await self._resume_deletions(live)

    def _initialize_states(self) -> None:
        live = self._live()
        partitions: dict[TopicPartition, PartitionState] = {}
        replicas: dict[ReplicaKey, ReplicaState] = {}
        for p in self.model.all_partitions():
            tp = self.model.topic_partition(p)
            deleting = self.model.is_queued_for_deletion(p.topic_id)
            online = not deleting and p.leader != NO_LEADER and p.leader in live
            partitions[tp] = PartitionState.ONLINE if online else PartitionState.OFFLINE
            for r in p.replicas:
                if deleting:
                    state = ReplicaState.REPLICA_DELETION_INELIGIBLE
                else:
                    state = ReplicaState.ONLINE if r in live else ReplicaState.OFFLINE
                replicas[ReplicaKey(tp, r)] = state
        self.partition_states.initialize(partitions)
        self.replica_states.initialize(replicas)

    # -- committing -------------------------------------------------------------------------------

    async def _commit(self, change: _Change) -> None:
        records = change.all_records()
        if not records:
            return
        try:
            self._last_offset = await self._store.append([encode_record(r) for r in records])
        except Exception as error:
            # Whether the write reached the disk is unknown; acting on it could contradict what a
            # restarted controller reads back. Stop, and let the node restart from the log.
            raise ActorFatalError(f"{self.name}: metadata log write failed: {error}") from error
        for record in records:
            self.model.apply(record)
        self._records_since_snapshot += len(records)
        if self._records_since_snapshot >= self.config.metadata_snapshot_records:
            snapshot = [encode_record(r) for r in self.model.snapshot()]
            await self._store.snapshot(snapshot, self._last_offset)
            self._records_since_snapshot = 0

    # -- liveness ---------------------------------------------------------------------------------

    def _live(self) -> set[int]:
        return set(self._last_heartbeat)

    def _eligible(self) -> set[int]:
        """Brokers that may lead or join an ISR: live and not shutting down (KIP-841)."""
        return self._live() - self._shutting_down

    def _add_channel(self, broker_id: int) -> None:
        address = native_address(self.model, broker_id)
        if address is None:
            log.warning("%s: broker %d has no native listener", self.name, broker_id)
            return
        self._channels.add_broker(broker_id, Address(*address))

    @handles(RegisterBroker)
    async def _register(self, message: RegisterBroker) -> BrokerRegistrationResponse:
        request = message.request
        broker_id = request.broker_id
        if self.config.cluster_id is not None and request.cluster_id != self.config.cluster_id:
            return BrokerRegistrationResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
        if broker_id < 0:
            return BrokerRegistrationResponse(error_code=ErrorCode.INVALID_REQUEST)
        existing = self.model.broker(broker_id)
        live = broker_id in self._last_heartbeat
        if existing is not None and live:
            if existing.incarnation_id == request.incarnation_id:
                # A retried registration of the same process: the same answer.
                self._last_heartbeat[broker_id] = self.clock.monotonic_ms()
                return BrokerRegistrationResponse(broker_epoch=existing.broker_epoch)
            if broker_id not in self._shutting_down:
                log.warning(
                    "%s: broker %d registering again while its session is alive: refused",
                    self.name,
                    broker_id,
                )
                return BrokerRegistrationResponse(
                    error_code=ErrorCode.DUPLICATE_BROKER_REGISTRATION
                )
            # It shut down in a controlled way and restarted before its session ended.
            await self._fence([broker_id])
        epoch = self.model.next_broker_epoch()
        endpoints = tuple(Endpoint(lst.name, lst.host, lst.port) for lst in request.listeners)
        change = _Change(self.model)
        change.add(
            RegisterBrokerRecord(
                broker_id, request.incarnation_id, epoch, endpoints, request.rack, fenced=False
            )
        )
        await self._commit(change)
        log.info("%s: broker %d registered with epoch %d", self.name, broker_id, epoch)
        await self._on_broker_startup([broker_id])
        return BrokerRegistrationResponse(broker_epoch=epoch)

    @handles(Heartbeat)
    async def _heartbeat(self, message: Heartbeat) -> BrokerHeartbeatResponse:
        request = message.request
        broker = self.model.broker(request.broker_id)
        if (
            broker is None
            or broker.broker_epoch != request.broker_epoch
            or request.broker_id not in self._last_heartbeat
        ):
            # Unknown, a previous incarnation, or fenced: the broker registers again.
            return BrokerHeartbeatResponse(error_code=ErrorCode.STALE_BROKER_EPOCH, is_fenced=True)
        self._last_heartbeat[request.broker_id] = self.clock.monotonic_ms()
        done_shutting_down = request.broker_id in self._shutting_down and not self._still_led_by(
            request.broker_id
        )
        if request.want_fence or (request.want_shut_down and done_shutting_down):
            await self._fence([request.broker_id])
            return BrokerHeartbeatResponse(is_fenced=True, should_shut_down=True)
        return BrokerHeartbeatResponse(is_caught_up=True, is_fenced=False)

    @handles(SessionTick)
    async def _session_tick(self, message: SessionTick) -> None:
        now = self.clock.monotonic_ms()
        timeout = self.config.broker_session_timeout_ms
        expired = sorted(b for b, seen in self._last_heartbeat.items() if now - seen > timeout)
        if expired:
            log.warning("%s: brokers %s missed heartbeats for %d ms", self.name, expired, timeout)
            await self._fence(expired)

    async def _fence(self, dead: list[int]) -> None:
        """Fence the brokers (written first), then onBrokerFailure."""
        change = _Change(self.model)
        for broker_id in dead:
            broker = self.model.broker(broker_id)
            assert broker is not None, broker_id
            change.add(FenceBrokerRecord(broker_id, broker.broker_epoch))
            self._last_heartbeat.pop(broker_id, None)
            self._shutting_down.discard(broker_id)
            self._channels.remove_broker(broker_id)
        await self._on_broker_failure(dead, change)

    # -- broker startup and failure (seed 004) ----------------------------------------------------

    async def _on_broker_startup(self, new: list[int]) -> None:
        now = self.clock.monotonic_ms()
        for broker_id in new:
            self._last_heartbeat[broker_id] = now
            self._shutting_down.discard(broker_id)
            self._channels.remove_broker(broker_id)  # a previous incarnation's channel
            self._add_channel(broker_id)
        outbox = _Outbox(metadata_everything=True)
        change = _Change(self.model)
        for broker_id in new:
            keys = [
                ReplicaKey(self.model.topic_partition(p), broker_id)
                for p in self.model.partitions_hosted_on(broker_id)
                if not self.model.is_queued_for_deletion(p.topic_id)
            ]
            self.replica_states.transition(keys, ReplicaState.ONLINE)
        self._elect_offline(change)
        await self._commit(change)
        self._announce(change, outbox)
        for broker_id in new:
            self._send_full_state(outbox, broker_id)
        self._flush(outbox)
        await self._resume_deletions(new)

    async def _on_broker_failure(self, dead: list[int], change: _Change) -> None:
        gone = set(dead)
        outbox = _Outbox(metadata_everything=True)
        eligible = self._eligible()
        # Partitions led by the dead brokers go offline, then get a leader where they can.
        led = [
            p
            for p in self.model.all_partitions()
            if p.leader in gone and not self.model.is_queued_for_deletion(p.topic_id)
        ]
        self.partition_states.transition(
            [self.model.topic_partition(p) for p in led], PartitionState.OFFLINE
        )
        elected = [
            self.model.topic_partition(p)
            for p in led
            if self._elect(
                change,
                p,
                offline_election(p.replicas, p.isr, eligible, self._unclean_allowed(p)),
                gone,
            )
        ]
        self.partition_states.transition(elected, PartitionState.ONLINE)
        # Followers on the dead brokers leave the ISRs (never emptying one).
        for p in self.model.all_partitions():
            if (
                p.leader not in gone
                and gone & set(p.isr)
                and not self.model.is_queued_for_deletion(p.topic_id)
            ):
                isr = p.isr
                for broker_id in sorted(gone):
                    isr = remove_from_isr(isr, broker_id)
                change.move(p, isr=isr)
        replicas = [
            ReplicaKey(self.model.topic_partition(p), b)
            for b in dead
            for p in self.model.partitions_hosted_on(b)
        ]
        deleting = {
            k for k in replicas if self.model.is_queued_for_deletion(self._topic_id(k.partition))
        }
        self.replica_states.transition(
            [k for k in replicas if k not in deleting], ReplicaState.OFFLINE
        )
        self.replica_states.transition(list(deleting), ReplicaState.REPLICA_DELETION_INELIGIBLE)
        await self._commit(change)
        self._announce(change, outbox)
        self._flush(outbox)

    def _elect(
        self,
        change: _Change,
        p: PartitionRecord,
        result: ElectionResult,
        gone: set[int] = frozenset(),  # type: ignore[assignment]
    ) -> bool:
        """Write an election's outcome; no electable leader leaves the partition leaderless
        with its ISR kept (minus the brokers that just died, never emptied)."""
        if result.leader is None:
            isr = p.isr
            for broker_id in sorted(gone):
                isr = remove_from_isr(isr, broker_id)
            if p.leader != NO_LEADER or isr != p.isr:
                change.move(p, leader=NO_LEADER, isr=isr)
            return False
        if result.unclean:
            self.unclean_elections += 1
            log.warning(
                "%s: UNCLEAN election of broker %d for %s (ISR was %s): acknowledged records "
                "may be lost",
                self.name,
                result.leader,
                self.model.topic_partition(p),
                list(p.isr),
            )
        change.move(p, leader=result.leader, isr=result.isr)
        return True

    def _elect_offline(self, change: _Change) -> None:
        """triggerOnlinePartitionStateChange: elect leaders for New and Offline partitions."""
        eligible = self._eligible()
        elected: list[TopicPartition] = []
        for p in self.model.all_partitions():
            tp = self.model.topic_partition(p)
            if self.model.is_queued_for_deletion(p.topic_id) or self.partition_states.state(
                tp
            ) not in (PartitionState.NEW, PartitionState.OFFLINE):
                continue
            current = change.partition(p)
            result = offline_election(
                current.replicas, current.isr, eligible, self._unclean_allowed(p)
            )
            if self._elect(change, current, result):
                elected.append(tp)
        self.partition_states.transition(elected, PartitionState.ONLINE)

    def _unclean_allowed(self, p: PartitionRecord) -> bool:
        topic = self.model.topic_by_id(p.topic_id)
        assert topic is not None, p
        return unclean_election_enabled(topic.configs, self.config.unclean_leader_election_enable)

    def _topic_id(self, tp: TopicPartition) -> bytes:
        topic = self.model.topic_by_name(tp.topic)
        assert topic is not None, tp
        return topic.topic_id

    def _announce(self, change: _Change, outbox: _Outbox) -> None:
        """LeaderAndIsr for every changed partition to its live replicas."""
        live = self._live()
        for p in change.changed_partitions():
            tp = self.model.topic_partition(p)
            outbox.lead_or_follow([r for r in p.replicas if r in live], tp)

    def _send_full_state(self, outbox: _Outbox, broker_id: int) -> None:
        """Everything `broker_id` hosts, as a FULL LeaderAndIsr (it drops what is not listed)."""
        outbox.full_leader_and_isr.add(broker_id)
        outbox.leader_and_isr.setdefault(broker_id, {})
        for p in self.model.partitions_hosted_on(broker_id):
            if not self.model.is_queued_for_deletion(p.topic_id):
                outbox.leader_and_isr[broker_id][self.model.topic_partition(p)] = False

    # -- AlterPartition (KIP-497, KIP-841) --------------------------------------------------------

    @handles(AlterPartition)
    async def _alter_partition(self, message: AlterPartition) -> AlterPartitionResponse:
        request = message.request
        broker = self.model.broker(request.broker_id)
        if broker is None or broker.broker_epoch != request.broker_epoch:
            return AlterPartitionResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        change = _Change(self.model)
        answers: list[tuple[str, bytes, list[AlterPartitionPartitionResult]]] = []
        for topic_data in request.topics:
            topic = self.model.topic_by_name(topic_data.topic_name)
            results = []
            for data in topic_data.partitions:
                p = (
                    None
                    if topic is None or self.model.is_queued_for_deletion(topic.topic_id)
                    else self.model.partition(topic.topic_id, data.partition_index)
                )
                if p is None:
                    results.append(
                        _refused(data.partition_index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    )
                    continue
                error = self._check_alter(
                    request.broker_id,
                    p,
                    data.leader_epoch,
                    data.partition_epoch,
                    list(data.new_isr),
                )
                if error is not None:
                    results.append(_refused(data.partition_index, error))
                    continue
                if tuple(data.new_isr) != p.isr:
                    p = change.move(p, isr=list(data.new_isr), bump_leader_epoch=False)
                results.append(
                    AlterPartitionPartitionResult(
                        partition_index=p.partition,
                        leader_id=p.leader,
                        leader_epoch=p.leader_epoch,
                        isr=list(p.isr),
                        partition_epoch=p.partition_epoch,
                    )
                )
            answers.append(
                (topic_data.topic_name, topic.topic_id if topic else topic_data.topic_id, results)
            )
        await self._commit(change)
        # The leader learns the result from the answer; the other brokers from UpdateMetadata.
        outbox = _Outbox()
        for p in change.changed_partitions():
            outbox.metadata.add(self.model.topic_partition(p))
        self._flush(outbox)
        return AlterPartitionResponse(
            topics=[
                AlterPartitionTopicResult(topic_name=name, topic_id=topic_id, partitions=results)
                for name, topic_id, results in answers
            ]
        )

    def _check_alter(
        self,
        sender: int,
        p: PartitionRecord,
        leader_epoch: int,
        partition_epoch: int,
        new_isr: list[int],
    ) -> ErrorCode | None:
        if p.leader != sender:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if leader_epoch != p.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if partition_epoch != p.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        if (
            not new_isr
            or len(set(new_isr)) != len(new_isr)
            or not set(new_isr) <= set(p.replicas)
            or sender not in new_isr
        ):
            return ErrorCode.INVALID_REQUEST
        joining = set(new_isr) - set(p.isr)
        if not joining <= self._eligible():
            return ErrorCode.INELIGIBLE_REPLICA
        return None

    # -- producer ids (KIP-730) -------------------------------------------------------------------

    @handles(AllocateProducerIds)
    async def _allocate_producer_ids(
        self, message: AllocateProducerIds
    ) -> AllocateProducerIdsResponse:
        request = message.request
        broker = self.model.broker(request.broker_id)
        if broker is None or broker.broker_epoch != request.broker_epoch:
            # As Kafka: an unknown broker or an earlier incarnation registers (again) first.
            return AllocateProducerIdsResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        start = self.model.next_producer_id()
        if start + PRODUCER_ID_BLOCK_SIZE - 1 > MAX_PRODUCER_ID:
            log.error("%s: producer ids exhausted (next would be %d)", self.name, start)
            return AllocateProducerIdsResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
        change = _Change(self.model)
        end = start + PRODUCER_ID_BLOCK_SIZE
        change.add(ProducerIdsRecord(request.broker_id, request.broker_epoch, end))
        # Written before the answer: a block the broker may hand out is never handed out again.
        await self._commit(change)
        log.info(
            "%s: producer ids %d..%d to broker %d",
            self.name,
            start,
            end - 1,
            request.broker_id,
        )
        return AllocateProducerIdsResponse(
            producer_id_start=start, producer_id_len=PRODUCER_ID_BLOCK_SIZE
        )

    # -- controlled shutdown (seed 004 shutdownBroker) --------------------------------------------

    @handles(ControlledShutdown)
    async def _controlled_shutdown(self, message: ControlledShutdown) -> ControlledShutdownResponse:
        request = message.request
        broker_id = request.broker_id
        broker = self.model.broker(broker_id)
        if broker is None or broker_id not in self._last_heartbeat:
            return ControlledShutdownResponse(error_code=ErrorCode.BROKER_NOT_AVAILABLE)
        if request.broker_epoch != broker.broker_epoch:
            return ControlledShutdownResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        self._shutting_down.add(broker_id)
        log.info("%s: controlled shutdown of broker %d", self.name, broker_id)
        eligible = self._eligible()
        change = _Change(self.model)
        outbox = _Outbox(metadata_everything=True)
        followed: list[ReplicaKey] = []
        for p in self.model.partitions_hosted_on(broker_id):
            if len(p.replicas) < 2 or self.model.is_queued_for_deletion(p.topic_id):
                continue
            tp = self.model.topic_partition(p)
            if p.leader == broker_id:
                result = controlled_shutdown_election(
                    p.replicas, p.isr, eligible, self._shutting_down
                )
                if result.leader is not None:
                    change.move(p, leader=result.leader, isr=result.isr)
            else:
                followed.append(ReplicaKey(tp, broker_id))
                outbox.stop(broker_id, tp, delete=False)
                if broker_id in p.isr:
                    change.move(p, isr=remove_from_isr(p.isr, broker_id))
        await self._commit(change)
        self.replica_states.transition(followed, ReplicaState.OFFLINE)
        self._announce(change, outbox)
        self._flush(outbox)
        remaining = [
            RemainingPartition(topic_name=tp.topic, partition_index=tp.partition)
            for tp in self._still_led_by(broker_id)
        ]
        return ControlledShutdownResponse(remaining_partitions=remaining)

    def _still_led_by(self, broker_id: int) -> list[TopicPartition]:
        """Partitions the broker still leads that another replica could take over, now or
        once it has caught up and joined the ISR: one that is live and not shutting down.
        Kafka counts every partition with more than one replica, so the last broker of a
        cluster retries controlled shutdown in vain (controlled.shutdown.max.retries times the
        backoff) when no other replica is left at all; counting only partitions with a live
        peer lets it go at once, while a lagging live peer still earns the retries."""
        eligible = self._eligible()
        return [
            self.model.topic_partition(p)
            for p in self.model.partitions_led_by(broker_id)
            if len(p.replicas) > 1
            and not self.model.is_queued_for_deletion(p.topic_id)
            and any(r in eligible for r in p.replicas if r != broker_id)
        ]

    # -- preferred leaders (auto.leader.rebalance.enable) -----------------------------------------

    @handles(RebalanceTick)
    async def _rebalance(self, message: RebalanceTick) -> None:
        eligible = self._eligible()
        threshold = self.config.leader_imbalance_per_broker_percentage / 100
        preferred_of: dict[int, list[PartitionRecord]] = {}
        for p in self.model.all_partitions():
            if not self.model.is_queued_for_deletion(p.topic_id):
                preferred_of.setdefault(p.replicas[0], []).append(p)
        change = _Change(self.model)
        for broker_id, partitions in sorted(preferred_of.items()):
            if broker_id not in eligible:
                continue
            led_elsewhere = [p for p in partitions if p.leader != broker_id]
            if not led_elsewhere or len(led_elsewhere) / len(partitions) <= threshold:
                continue
            for p in led_elsewhere:
                result = preferred_election(p.replicas, p.isr, eligible)
                if result.leader is not None:
                    change.move(p, leader=result.leader)
        if change.changed_partitions():
            log.info(
                "%s: preferred leaders back for %d partitions",
                self.name,
                len(change.changed_partitions()),
            )
            await self._commit(change)
            outbox = _Outbox()
            self._announce(change, outbox)
            self._flush(outbox)

    # -- topics ----------------------------------------------------------------------------------

    @handles(CreateTopics)
    async def _create_topics(self, message: CreateTopics) -> CreateTopicsResponse:
        request = message.request
        live = self._live()
        eligible = self._eligible()
        change = _Change(self.model)
        results: list[CreatableTopicResult] = []
        created: list[tuple[TopicRecord, list[PartitionRecord]]] = []
        planned_names: set[str] = set()
        for topic in request.topics:
            plan = plan_topic(
                topic,
                registered_brokers=[b.broker_id for b in self.model.brokers()],
                live_brokers=sorted(eligible),
                existing_topics=_Names(self.model, planned_names),
                default_partitions=self.config.num_partitions,
                default_replication_factor=self.config.default_replication_factor,
                rng=self._rng,
            )
            collides = self.model.colliding_topic(topic.name)
            if collides is not None and collides != topic.name:
                plan = TopicRefusal(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"{topic.name!r} collides with {collides!r} ('.' and '_' are alike in metrics)",
                )
            if isinstance(plan, TopicRefusal):
                results.append(
                    CreatableTopicResult(
                        name=topic.name, error_code=plan.error, error_message=plan.message
                    )
                )
                continue
            topic_id = self.model.new_topic_id(self._rng)
            record = TopicRecord(plan.name, topic_id, plan.configs)
            partitions = []
            for index, replicas in enumerate(plan.assignment):
                alive = [r for r in replicas if r in eligible]
                partitions.append(
                    PartitionRecord(
                        topic_id,
                        index,
                        tuple(replicas),
                        tuple(alive) if alive else tuple(replicas),
                        alive[0] if alive else NO_LEADER,
                        0,
                        0,
                    )
                )
            planned_names.add(plan.name)
            results.append(
                CreatableTopicResult(
                    name=plan.name,
                    topic_id=topic_id,
                    num_partitions=len(plan.assignment),
                    replication_factor=len(plan.assignment[0]),
                )
            )
            created.append((record, partitions))
        if request.validate_only:
            return CreateTopicsResponse(topics=[replace(r, topic_id=bytes(16)) for r in results])
        for record, partitions in created:
            change.add(record)
            for p in partitions:
                change.add(p)
        if not created:
            return CreateTopicsResponse(topics=results)
        await self._commit(change)
        outbox = _Outbox(metadata_everything=True)
        for record, partitions in created:
            log.info(
                "%s: created topic %s with %d partitions", self.name, record.name, len(partitions)
            )
            for p in partitions:
                tp = TopicPartition(record.name, p.partition)
                keys = [ReplicaKey(tp, r) for r in p.replicas]
                self.partition_states.transition([tp], PartitionState.NEW)
                self.replica_states.transition(keys, ReplicaState.NEW)
                if p.leader != NO_LEADER:
                    self.partition_states.transition([tp], PartitionState.ONLINE)
                self.replica_states.transition(
                    [k for k in keys if k.broker_id in live], ReplicaState.ONLINE
                )
                outbox.lead_or_follow([r for r in p.replicas if r in live], tp, is_new=True)
        self._flush(outbox)
        return CreateTopicsResponse(topics=results)

    @handles(DeleteTopics)
    async def _delete_topics(self, message: DeleteTopics) -> DeleteTopicsResponse:
        change = _Change(self.model)
        results = []
        queued: list[TopicRecord] = []
        for name in message.request.topic_names:
            topic = self.model.topic_by_name(name)
            if topic is None or any(t.topic_id == topic.topic_id for t in queued):
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if topic is None else ErrorCode.NONE
                results.append(DeletableTopicResult(name=name, error_code=error))
                continue
            results.append(DeletableTopicResult(name=name, topic_id=topic.topic_id))
            if not self.model.is_queued_for_deletion(topic.topic_id):
                change.add(TopicDeletionRecord(topic.topic_id))
                queued.append(topic)
        await self._commit(change)
        if queued:
            # Brokers stop serving the topics now (leader -2), before their replicas go.
            outbox = _Outbox(metadata_everything=True)
            for topic in queued:
                log.info("%s: deleting topic %s", self.name, topic.name)
                tps = [
                    self.model.topic_partition(p) for p in self.model.partitions_of(topic.topic_id)
                ]
                self.partition_states.transition(tps, PartitionState.OFFLINE)
                self._start_replica_deletion(topic, outbox)
            self._flush(outbox)
        return DeleteTopicsResponse(responses=results)

    def _start_replica_deletion(
        self, topic: TopicRecord, outbox: _Outbox, only: Iterable[int] | None = None
    ) -> None:
        """StopReplica(delete) to the live replicas of the topic (all, or those on `only`);
        replicas on dead brokers wait as ReplicaDeletionIneligible."""
        live = self._live()
        brokers = None if only is None else set(only)
        for p in self.model.partitions_of(topic.topic_id):
            tp = self.model.topic_partition(p)
            for r in p.replicas:
                if brokers is not None and r not in brokers:
                    continue
                key = ReplicaKey(tp, r)
                if r in live:
                    self.replica_states.transition([key], ReplicaState.OFFLINE)
                    if self.replica_states.transition([key], ReplicaState.REPLICA_DELETION_STARTED):
                        outbox.stop(r, tp, delete=True)
                else:
                    self.replica_states.transition([key], ReplicaState.OFFLINE)
                    self.replica_states.transition([key], ReplicaState.REPLICA_DELETION_INELIGIBLE)

    async def _resume_deletions(self, brokers: Iterable[int]) -> None:
        outbox = _Outbox()
        for topic in self.model.topics_queued_for_deletion():
            self._start_replica_deletion(topic, outbox, only=brokers)
        self._flush(outbox)
        await self._complete_deletions()

    @handles(StopReplicaDone)
    async def _stop_replica_done(self, message: StopReplicaDone) -> None:
        broker = self.model.broker(message.broker_id)
        if broker is None or broker.broker_epoch != message.broker_epoch:
            return  # answered by an earlier incarnation; the new one gets its own request
        response = message.response
        outcomes: dict[ReplicaKey, bool] = {}
        if response is None:
            return  # the channel gave up (broker removed): the replicas stay as they are
        if not isinstance(response, StopReplicaResponse):
            return
        for entry in response.partition_errors:
            key = ReplicaKey(
                TopicPartition(entry.topic_name, entry.partition_index), message.broker_id
            )
            # A resent request fenced as stale was applied by its earlier copy.
            outcomes[key] = applied_code(entry.error_code, message.attempts)
        for key, ok in outcomes.items():
            if self.replica_states.state(key) is not ReplicaState.REPLICA_DELETION_STARTED:
                continue
            target = (
                ReplicaState.REPLICA_DELETION_SUCCESSFUL
                if ok
                else ReplicaState.REPLICA_DELETION_INELIGIBLE
            )
            self.replica_states.transition([key], target)
        await self._complete_deletions()

    async def _complete_deletions(self) -> None:
        """A topic whose every replica confirmed deletion is forgotten."""
        change = _Change(self.model)
        done = []
        for topic in self.model.topics_queued_for_deletion():
            if self.replica_states.all_replicas_in_state(
                topic.name, ReplicaState.REPLICA_DELETION_SUCCESSFUL
            ):
                change.add(RemoveTopicRecord(topic.topic_id))
                done.append(topic)
        if not done:
            return
        tps = [
            self.model.topic_partition(p)
            for t in done
            for p in self.model.partitions_of(t.topic_id)
        ]
        keys = [k for t in done for k in self.replica_states.replicas_of_topic(t.name)]
        await self._commit(change)
        self.replica_states.transition(keys, ReplicaState.NON_EXISTENT)
        self.partition_states.transition(tps, PartitionState.NON_EXISTENT)
        for topic in done:
            log.info("%s: topic %s deleted", self.name, topic.name)

    # -- status -----------------------------------------------------------------------------------

    @handles(DescribeCluster)
    def _describe(self, message: DescribeCluster) -> ClusterStatus:
        brokers = []
        for broker in self.model.brokers():
            address = native_address(self.model, broker.broker_id) or ("", -1)
            if broker.broker_id not in self._last_heartbeat:
                state = "fenced"
            elif broker.broker_id in self._shutting_down:
                state = "shutting_down"
            else:
                state = "running"
            brokers.append(
                BrokerStatus(broker.broker_id, broker.broker_epoch, address[0], address[1], state)
            )
        return ClusterStatus(
            controller_id=self.config.controller_id,
            controller_epoch=self.model.controller_epoch,
            brokers=tuple(brokers),
            offline_partitions=len(
                [p for p in self.model.all_partitions() if p.leader == NO_LEADER]
            ),
            topics_being_deleted=tuple(t.name for t in self.model.topics_queued_for_deletion()),
            unclean_elections=self.unclean_elections,
        )

    # -- sending ----------------------------------------------------------------------------------

    def _flush(self, outbox: _Outbox) -> None:
        live = self._live()
        epoch = self.model.controller_epoch
        controller_id = self.config.controller_id
        for broker_id, tps in sorted(outbox.leader_and_isr.items()):
            if broker_id not in live:
                continue
            partitions = [p for tp in tps if (p := self.model.partition_by_name(tp)) is not None]
            broker = self.model.broker(broker_id)
            assert broker is not None, broker_id
            full = broker_id in outbox.full_leader_and_isr
            self._channels.send(
                broker_id,
                LeaderAndIsrRequest(
                    controller_id=controller_id,
                    controller_epoch=epoch,
                    broker_epoch=broker.broker_epoch,
                    type=LEADER_AND_ISR_FULL if full else LEADER_AND_ISR_INCREMENTAL,
                    partition_states=[
                        leader_and_isr_state(
                            self.model, p, is_new=tps[self.model.topic_partition(p)]
                        )
                        for p in partitions
                    ],
                    live_leaders=live_leaders(self.model, partitions, live),
                    topic_configs=topic_configs(self.model, (tp.topic for tp in tps)),
                ),
            )
        if outbox.metadata_everything or outbox.metadata:
            if outbox.metadata_everything:
                partitions = self.model.all_partitions()
            else:
                partitions = [
                    p
                    for tp in outbox.metadata
                    if (p := self.model.partition_by_name(tp)) is not None
                ]
            states = [update_metadata_state(self.model, p, live) for p in partitions]
            brokers = live_broker_entries(self.model, live)
            configs = topic_configs(self.model, (s.topic_name for s in states))
            for broker_id in sorted(live):
                broker = self.model.broker(broker_id)
                assert broker is not None, broker_id
                self._channels.send(
                    broker_id,
                    UpdateMetadataRequest(
                        controller_id=controller_id,
                        controller_epoch=epoch,
                        broker_epoch=broker.broker_epoch,
                        partition_states=states,
                        live_brokers=brokers,
                        topic_configs=configs,
                    ),
                )
        for broker_id, stops in sorted(outbox.stop_replica.items()):
            broker = self.model.broker(broker_id)
            if broker_id not in live or broker is None:
                continue
            deleting = any(stops.values())
            self._channels.send(
                broker_id,
                StopReplicaRequest(
                    controller_id=controller_id,
                    controller_epoch=epoch,
                    broker_epoch=broker.broker_epoch,
                    partition_states=[
                        StopReplicaPartitionState(
                            topic_name=tp.topic,
                            partition_index=tp.partition,
                            leader_epoch=STOP_REPLICA_DELETING_EPOCH if delete else -1,
                            delete_partition=delete,
                        )
                        for tp, delete in sorted(stops.items())
                    ],
                ),
                self._deletion_callback(broker_id, broker.broker_epoch) if deleting else None,
            )

    def _deletion_callback(self, broker_id: int, broker_epoch: int) -> ResponseCallback:
        def done(response: Response | None, attempts: int) -> None:
            with contextlib.suppress(Exception):
                self.try_tell(StopReplicaDone(broker_id, broker_epoch, response, attempts))

        return done


class _Names:
    """Existing topic names plus those planned earlier in the same request, for `plan_topic`."""

    def __init__(self, model: ControllerModel, planned: set[str]) -> None:
        self._model = model
        self._planned = planned

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (
            name in self._planned or self._model.topic_by_name(name) is not None
        )


def _refused(partition: int, error: ErrorCode) -> AlterPartitionPartitionResult:
    return AlterPartitionPartitionResult(partition_index=partition, error_code=error)
