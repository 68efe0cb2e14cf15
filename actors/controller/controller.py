"""The controller as one actor (seed 004): broker liveness, leader election, ISR changes,
controlled shutdown, topics and producer ids, with every decision written to the metadata log
first.

Every event is a message (actors/controller/messages.py) and the actor handles one at a time,
which is what Kafka's controllerLock and event queue provided. An event's handler

1. decides, from the model (actors/controller/model.py, the durable state) and the liveness it
   keeps in memory (actors/controller/sessions.py), which records to write: a `Change`
   (actors/controller/journal.py) collects them, reading its own pending records first, so
   several steps of one event (elect, then shrink ISRs) compose;
2. commits them to the metadata log (appended and fsync'd) and only then applies them to the
   model — nothing is acted on that a restart could forget;
3. moves the partition and replica state machines (actors/controller/states.py), and
4. sends LeaderAndIsr / UpdateMetadata / StopReplica through the per-broker request channels,
   built from the model as it now is (an `Outbox` per event, actors/controller/outbox.py, sent
   in Kafka's order).

The handlers here only route: what each event does lives with its concern, as KRaft's control
managers split its controller —

    liveness.py        registration, heartbeats, session expiry, fencing, broker startup and
                       failure, and this controller's own restart (`resume`)
    elections.py       leaders for New/Offline partitions, preferred-leader rebalance, and
                       preferred leaders back soon after their replicas rejoin the ISR
                       (the pure rules: election.py; when: preferred_leaders.py)
    replica_failure.py replicas in failed log dirs (offline dirs in heartbeats, LeaderAndIsr
                       answers with KAFKA_STORAGE_ERROR)
    alter_partition.py AlterPartition and its checks (KIP-497, KIP-841)
    shutdown.py        controlled shutdown
    topic_creation.py  CreateTopics (the pure rules: topics.py)
    topic_deletion.py  DeleteTopics, replica deletion, StopReplica answers, and retrying
                       a live broker's failed deletion (when: deletion_retries.py)
    partition_creation.py  CreatePartitions: more partitions for a topic
    alter_configs.py   IncrementalAlterConfigs: a topic's config overrides changed in place
    producer_ids.py    AllocateProducerIds (KIP-730)
    acls.py            CreateAcls / DeleteAcls: the ACLs in the metadata log
    client_quotas.py   AlterClientQuotas: the client quotas in the metadata log
    scram_credentials.py  AlterUserScramCredentials: SCRAM credentials in the metadata log
    outbox.py          request sending (requests.py builds the per-partition states)

They are functions of the actor's state, gathered in one `ControllerContext`
(actors/controller/context.py), not actors of their own.

Epochs (DESIGN.md): the leader epoch grows whenever a partition's leader changes or its replica
set loses a member, never for an ISR change alone (KAFKA-15021; the rule is `leader_epoch_moves`
in actors/controller/journal.py); the partition epoch with every change of the partition;
each registration gets a new broker epoch, which the requests to that broker carry. A restarted
controller replays the log and writes a higher controller epoch, so brokers fence the requests
of its predecessor.

The cluster id: the first start writes one (cluster.id when configured, else a new Uuid as
Kafka's `kafka-storage format` makes) in the same commit as the first controller epoch, and every
later start reads it back; registrations from brokers of another cluster are refused
(liveness.py), and Metadata and DescribeCluster carry it.

Ownership and why no lock: the model, the state machines, the liveness table and the request
channels' membership are touched only by this actor's handlers, one message at a time. The
timers only `tell` it ticks; the channels report StopReplica answers (and LeaderAndIsr answers
with storage errors) back as messages, and the deletion retries' alarms tell it when to resend
and the preferred-leader alarm when to elect, never dropped (`_tell_soon`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random

from actors.controller import (
    acls,
    alter_configs,
    alter_partition,
    client_quotas,
    elections,
    liveness,
    partition_creation,
    producer_ids,
    replica_failure,
    scram_credentials,
    shutdown,
    topic_creation,
    topic_deletion,
)
from actors.controller.context import ControllerContext
from actors.controller.deletion_retries import DeletionRetries
from actors.controller.journal import Change, MetadataJournal, MetadataStore
from actors.controller.messages import (
    ELECTION_DELAY_DISABLED,
    AllocateProducerIds,
    AlterPartition,
    BrokerStatus,
    ClusterStatus,
    ControlledShutdown,
    ControllerConfig,
    CreatePartitions,
    CreateTopics,
    DeleteTopics,
    DescribeCluster,
    ElectPreferredLeaders,
    Heartbeat,
    IncrementalAlterConfigs,
    LeaderAndIsrDone,
    RebalanceTick,
    RegisterBroker,
    RetryReplicaDeletion,
    SessionTick,
    StopReplicaDone,
)
from actors.controller.model import ControllerModel, new_cluster_id
from actors.controller.outbox import RequestChannels, RequestSender, ResponseCallback
from actors.controller.preferred_leaders import PreferredLeaderSchedule
from actors.controller.requests import native_address
from actors.controller.sessions import BrokerSessions
from actors.controller.states import PartitionStates, ReplicaStates
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
from wire.messages import (
    AllocateProducerIdsResponse,
    AlterClientQuotasResponse,
    AlterPartitionResponse,
    AlterUserScramCredentialsResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    ControlledShutdownResponse,
    CreateAclsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteAclsResponse,
    DeleteTopicsResponse,
    IncrementalAlterConfigsResponse,
)
from wire.metadata_records import ClusterIdRecord, ControllerEpochRecord

# MetadataStore, RequestChannels and ResponseCallback are what a composition root or a test
# hands the actor; they stay importable from here, where the actor is.
__all__ = ["ControllerActor", "MetadataStore", "RequestChannels", "ResponseCallback"]

log = logging.getLogger("ketch.controller")


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
        self.model = ControllerModel()
        self.partition_states = PartitionStates()
        self.replica_states = ReplicaStates()
        sessions = BrokerSessions()
        rng = rng if rng is not None else random.Random()
        # Answers and alarms that tell this actor from outside its task; see `_tell_soon`.
        self._telling: set[asyncio.Task[None]] = set()
        self._ctx = ControllerContext(
            name=self.name,
            config=config,
            clock=self.clock,
            rng=rng,
            model=self.model,
            journal=MetadataJournal(
                self.name, store, self.model, snapshot_records=config.metadata_snapshot_records
            ),
            partition_states=self.partition_states,
            replica_states=self.replica_states,
            sessions=sessions,
            sender=RequestSender(
                self.name, config.controller_id, self.model, sessions, channels, self._tell_soon
            ),
            deletion_retries=DeletionRetries(self.clock, rng, self._tell_soon),
            preferred_leaders=PreferredLeaderSchedule(
                self.clock, _preferred_election_delay_ms(config), self._tell_soon
            ),
        )

    @property
    def unclean_elections(self) -> int:
        """Unclean leader elections since this controller started."""
        return self._ctx.unclean_elections

    # -- lifecycle --------------------------------------------------------------------------------

    async def on_start(self) -> None:
        replayed = self._ctx.journal.replay()
        change = Change(self.model)
        cluster_id = self._cluster_id()
        if cluster_id != self.model.cluster_id:
            change.add(ClusterIdRecord(cluster_id))
        change.add(ControllerEpochRecord(self.model.controller_epoch + 1))
        await self._ctx.journal.commit(change)
        log.info(
            "%s: active with epoch %d in cluster %s (%d records replayed)",
            self.name,
            self.model.controller_epoch,
            self.model.cluster_id,
            replayed,
        )
        await liveness.resume(self._ctx)
        self.every(
            self.config.session_check_interval_ms, functools.partial(self._tick, SessionTick())
        )
        if self.config.auto_leader_rebalance_enable:
            self.every(
                self.config.leader_imbalance_check_interval_seconds * 1000,
                functools.partial(self._tick, RebalanceTick()),
            )

    def _cluster_id(self) -> str:
        """The id the metadata log holds; on the first start (or a log written before ketch had
        cluster ids) cluster.id when configured, else a new one, as `kafka-storage format`
        would make. A configured cluster.id that is not the log's is fatal: this metadata
        belongs to another cluster, as Kafka refuses a meta.properties of another cluster."""
        stored, configured = self.model.cluster_id, self.config.cluster_id
        if stored is None:
            return configured or new_cluster_id(self._ctx.rng)
        if configured and configured != stored:
            raise ActorFatalError(
                f"{self.name}: the metadata log belongs to cluster {stored}, "
                f"but cluster.id is {configured}"
            )
        return stored

    async def on_stop(self) -> None:
        self._ctx.deletion_retries.close()
        self._ctx.preferred_leaders.close()
        for task in list(self._telling):
            task.cancel()

    def _tick(self, tick: SessionTick | RebalanceTick) -> None:
        with contextlib.suppress(MailboxFull, MailboxClosed):
            # A full mailbox skips a tick; the next one comes soon enough.
            self.try_tell(tick)

    def _tell_soon(
        self,
        message: StopReplicaDone | RetryReplicaDeletion | LeaderAndIsrDone | ElectPreferredLeaders,
    ) -> None:
        """Tell this actor an event from outside its task (a channel's answer, an alarm)
        without blocking the caller and without dropping it: unlike a tick, no later message
        repeats it, and losing it would stall a topic's deletion. A full mailbox gets it from
        a task that waits for room; a closed one (stopping) does not need it."""
        try:
            self.try_tell(message)
        except MailboxClosed:
            return
        except MailboxFull:
            task = asyncio.get_running_loop().create_task(self._tell_later(message))
            self._telling.add(task)
            task.add_done_callback(self._telling.discard)

    async def _tell_later(
        self,
        message: StopReplicaDone | RetryReplicaDeletion | LeaderAndIsrDone | ElectPreferredLeaders,
    ) -> None:
        with contextlib.suppress(MailboxClosed):
            await self.tell(message)

    # -- broker liveness (liveness.py) ------------------------------------------------------------

    @handles(RegisterBroker)
    async def _register(self, message: RegisterBroker) -> BrokerRegistrationResponse:
        return await liveness.register(self._ctx, message.request)

    @handles(Heartbeat)
    async def _heartbeat(self, message: Heartbeat) -> BrokerHeartbeatResponse:
        return await liveness.heartbeat(self._ctx, message.request)

    @handles(SessionTick)
    async def _session_tick(self, message: SessionTick) -> None:
        await liveness.session_tick(self._ctx)

    @handles(LeaderAndIsrDone)
    async def _leader_and_isr_done(self, message: LeaderAndIsrDone) -> None:
        await replica_failure.leader_and_isr_done(self._ctx, message)

    # -- AlterPartition (alter_partition.py) ------------------------------------------------------

    @handles(AlterPartition)
    async def _alter_partition(self, message: AlterPartition) -> AlterPartitionResponse:
        return await alter_partition.alter_partition(self._ctx, message.request)

    # -- producer ids (producer_ids.py) -----------------------------------------------------------

    @handles(AllocateProducerIds)
    async def _allocate_producer_ids(
        self, message: AllocateProducerIds
    ) -> AllocateProducerIdsResponse:
        return await producer_ids.allocate_producer_ids(self._ctx, message.request)

    # -- controlled shutdown (shutdown.py) --------------------------------------------------------

    @handles(ControlledShutdown)
    async def _controlled_shutdown(self, message: ControlledShutdown) -> ControlledShutdownResponse:
        return await shutdown.controlled_shutdown(self._ctx, message.request)

    # -- preferred leaders (elections.py) ---------------------------------------------------------

    @handles(RebalanceTick)
    async def _rebalance(self, message: RebalanceTick) -> None:
        await elections.rebalance(self._ctx)

    @handles(ElectPreferredLeaders)
    async def _elect_preferred_leaders(self, message: ElectPreferredLeaders) -> None:
        await elections.elect_rejoined(self._ctx)

    # -- topics (topic_creation.py, topic_deletion.py, partition_creation.py, alter_configs.py) --

    @handles(CreateTopics)
    async def _create_topics(self, message: CreateTopics) -> CreateTopicsResponse:
        return await topic_creation.create_topics(self._ctx, message.request)

    @handles(DeleteTopics)
    async def _delete_topics(self, message: DeleteTopics) -> DeleteTopicsResponse:
        return await topic_deletion.delete_topics(self._ctx, message.request)

    @handles(CreatePartitions)
    async def _create_partitions(self, message: CreatePartitions) -> CreatePartitionsResponse:
        return await partition_creation.create_partitions(self._ctx, message.request)

    @handles(IncrementalAlterConfigs)
    async def _incremental_alter_configs(
        self, message: IncrementalAlterConfigs
    ) -> IncrementalAlterConfigsResponse:
        return await alter_configs.incremental_alter_configs(self._ctx, message.request)

    @handles(StopReplicaDone)
    async def _stop_replica_done(self, message: StopReplicaDone) -> None:
        await topic_deletion.stop_replica_done(self._ctx, message)

    @handles(RetryReplicaDeletion)
    async def _retry_replica_deletion(self, message: RetryReplicaDeletion) -> None:
        await topic_deletion.retry_replica_deletion(self._ctx, message)

    # -- ACLs (acls.py) ---------------------------------------------------------------------------

    @handles(acls.CreateAcls)
    async def _create_acls(self, message: acls.CreateAcls) -> CreateAclsResponse:
        return await acls.create_acls(self._ctx, message.request)

    @handles(acls.DeleteAcls)
    async def _delete_acls(self, message: acls.DeleteAcls) -> DeleteAclsResponse:
        return await acls.delete_acls(self._ctx, message.request)

    # -- SCRAM credentials (scram_credentials.py) -------------------------------------------------

    @handles(scram_credentials.AlterUserScramCredentials)
    async def _alter_user_scram_credentials(
        self, message: scram_credentials.AlterUserScramCredentials
    ) -> AlterUserScramCredentialsResponse:
        return await scram_credentials.alter_user_scram_credentials(self._ctx, message.request)

    # -- client quotas (client_quotas.py) --------------------------------------------------------

    @handles(client_quotas.AlterClientQuotas)
    async def _alter_client_quotas(
        self, message: client_quotas.AlterClientQuotas
    ) -> AlterClientQuotasResponse:
        return await client_quotas.alter_client_quotas(self._ctx, message.request)

    # -- status -----------------------------------------------------------------------------------

    @handles(DescribeCluster)
    def _describe(self, message: DescribeCluster) -> ClusterStatus:
        brokers = []
        for broker in self.model.brokers():
            address = native_address(self.model, broker.broker_id) or ("", -1)
            brokers.append(
                BrokerStatus(
                    broker.broker_id,
                    broker.broker_epoch,
                    address[0],
                    address[1],
                    self._ctx.sessions.state(broker.broker_id),
                    tuple(sorted(self._ctx.sessions.offline_dirs(broker.broker_id))),
                )
            )
        assert self.model.cluster_id is not None, "written by on_start"
        return ClusterStatus(
            cluster_id=self.model.cluster_id,
            controller_id=self.config.controller_id,
            controller_epoch=self.model.controller_epoch,
            brokers=tuple(brokers),
            offline_partitions=len(
                [p for p in self.model.all_partitions() if p.leader == NO_LEADER]
            ),
            topics_being_deleted=tuple(t.name for t in self.model.topics_queued_for_deletion()),
            unclean_elections=self.unclean_elections,
        )


def _preferred_election_delay_ms(config: ControllerConfig) -> int | None:
    """leader.imbalance.election.delay.ms, or None when preferred leaders wait for the periodic
    check alone (auto.leader.rebalance.enable false, or the delay -1)."""
    delay_ms = config.leader_imbalance_election_delay_ms
    if not config.auto_leader_rebalance_enable or delay_ms == ELECTION_DELAY_DISABLED:
        return None
    return delay_ms
