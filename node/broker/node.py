"""`BrokerNode`: the composition root of one broker process.

(Long, ~670 lines, on purpose: the build steps, the start order and the two stop orders must be
read side by side, since each depends on the others; every handler lives in node/broker/apis.py.)

It builds and wires the broker's parts and owns their lifetimes:

    LogManager              the log dirs (open: lock, load, recover; background run() task);
                            a dir that fails to open starts offline and the broker starts on
                            the others (with none, `start()` raises LogDirOfflineError)
    LogCleaner              live compaction of the compacted logs (its run() task); passes in
                            a worker thread, swaps by a message to the partition actor
    DelayedOperations       the produce and fetch purgatories
    ReplicaFetcherManager   follower fetchers, one Client per fetcher over the node's transport
                            (Fetch is data-plane: no credential, unless the native listener
                            is SASL or has ACLs: node/broker/native_security.py)
    AlterPartitionManager   ISR proposals to the controller, over the control client (a Client
                            holding the cluster credential: AlterPartition is control-plane)
    BrokerLifecycle         registration, heartbeats and controlled shutdown, over the same
                            control client (node/broker/lifecycle.py); optional, for tests
                            that drive a broker's control plane by hand
    ControllerForwarder     CreateTopics / DeleteTopics / DescribeCluster from clients, to the
                            controller over the control client (KIP-590)
    AutoTopicCreationManager
                            topics a client's Metadata asks for, created through the
                            forwarder (auto.create.topics.enable, node/broker/auto_topics.py)
    ReplicaManager          the actor for LeaderAndIsr / StopReplica / UpdateMetadata; it is the
                            supervisor of the partition actors (a fatal log error, or one in
                            the LogManager's own I/O, takes its whole log dir offline, the
                            broker keeps serving the other dirs; with none left, `failed` is
                            set)
    RequestPath             Produce / Fetch / ListOffsets / OffsetForLeaderEpoch
    GroupCoordinator        consumer groups and committed offsets on __consumer_offsets, one
                            actor per led offsets partition, moved by the ReplicaManager's
                            leadership hook (node/broker/groups.py has the handlers)
    BrokerApis              every API's handler, one table for both listeners
                            (node/broker/apis.py, Kafka's KafkaApis)
    Server                  the native listener, serving that table; control-plane requests
                            are served only on connections that proved the cluster secret;
                            users log in and ACLs apply as on the Kafka listener
                            (node/broker/native_security.py)
    Server (kafka)          with a `kafka` entry in `listeners`: the Kafka wire protocol for
                            Kafka clients, on the same table (runtime/net/kafka_dialect.py),
                            each request held until the first UpdateMetadata
                            and until the cluster id is known (node/broker/serving_gate.py);
                            no control-plane API is reachable
    FetchSessionCache       the broker's incremental fetch sessions (KIP-227,
                            runtime/net/fetch_session.py): followers' on the native listener,
                            Kafka clients' on the Kafka listener
    BrokerMetrics           Prometheus metrics (runtime/metrics/), always collected in
                            memory; with metrics.port set, request latencies are observed and
                            a MetricsHttpServer serves them on the node's loop

Start order is bottom-up (logs, then what appends to them, then the listener), so no request
can reach a part that is not running; registration starts last, in the background, so the broker
serves (with whatever leadership the controller gives it) before the controller has answered.
Clean shutdown (`stop()`) first runs the controlled shutdown while everything still serves (the
controller moves leadership away and sends this broker LeaderAndIsr / StopReplica, which it must
still answer), stops heartbeating, then goes the reverse way, as in Kafka's
KafkaServer.shutdown: stop accepting requests, stop the fetchers (no more follower appends),
stop the ReplicaManager (its partition actors stop and it writes the last high-watermark
checkpoint), close the purgatories, stop the AlterPartitionManager, then the LogManager flushes
every log, writes the recovery points and log start offsets, and writes the clean-shutdown
marker. `crash()` is the test double of a killed process: it stops every task (heartbeats
included, so the controller notices only through the session timeout) without any of those
steps and leaves the on-disk checkpoints as they were at the moment of the crash.

Ownership and why no lock: every part runs on the event loop thread; the node only starts and
stops them (in `start()`, `stop()` and `crash()`, which the owner calls one at a time) and
forwards requests. It keeps no mutable broker state of its own beyond the lifecycle state and the
broker epoch, which only `set_broker_epoch` changes. No task outlives `stop()` or `crash()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Final

from actors.acl.authorizer import Authorizer
from actors.group.coordinator import GroupCoordinator
from actors.quota.manager import ClientQuotaManager
from actors.replication.alter_partition_manager import AlterPartitionManager
from actors.replication.cleaner_swap import partition_swap_sink
from actors.replication.delayed import DelayedOperations
from actors.replication.fetch_state import BrokerEndpoint
from actors.replication.fetcher import FetcherClient
from actors.replication.fetcher_manager import ReplicaFetcherManager
from actors.replication.replica_manager import ReplicaManager
from actors.replication.replica_manager_messages import SetBrokerEpoch
from actors.replication.request_path import RequestPath
from actors.transactions.coordinator import TransactionCoordinator
from client.client import Client
from node.broker.acls import BrokerAcls
from node.broker.apis import BrokerApis
from node.broker.authorization import Authorization
from node.broker.auto_topics import AutoTopicCreationManager
from node.broker.config import KAFKA_LISTENER, BrokerConfig
from node.broker.describe_configs import BrokerConfigSource, TopicConfigSource
from node.broker.forwarder import ControllerForwarder
from node.broker.groups import BrokerGroups
from node.broker.lifecycle import BrokerLifecycle
from node.broker.native_security import fetcher_credential, native_handlers, native_sasl
from node.broker.offsets_log import RequestPathOffsetsLog
from node.broker.producer_ids import ProducerIdManager, ProducerIdsUnavailableError
from node.broker.quotas import QuotaApis, with_quotas
from node.broker.scram_credentials import BrokerScramCredentials, kafka_sasl
from node.broker.serving_gate import MetadataGate
from node.broker.txn_markers import TxnMarkerSender
from runtime.actor import ActorStatistics
from runtime.clock import Clock
from runtime.log.cleaner.cleaner import LogCleaner
from runtime.log.manager import LoadedDir, LogManager
from runtime.log.producer_state import AppendOrigin
from runtime.metrics.broker import BrokerMetrics, fetch_session_metrics
from runtime.metrics.cleaner import log_cleaner_metrics
from runtime.metrics.endpoint import MetricsHttpServer
from runtime.metrics.registry import METRICS_DISABLED
from runtime.net.fetch_session import FetchSessionCache
from runtime.net.kafka_dialect import KafkaProtocol
from runtime.net.native_dialect import native_dialect
from runtime.net.request_pool import RequestMemoryPool
from runtime.net.sasl import ScramCredentialCache
from runtime.net.server import Server
from runtime.net.tls import CONTROLLER_LISTENER
from runtime.net.transport import Address, Transport
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC
from wire.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    ApiKey,
    BrokerRegistrationListener,
    Request,
    Response,
)
from wire.topic import TopicPartition
from wire.transaction_log import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

NO_BROKER_EPOCH: Final = -1


class NodeState(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPED = "stopped"


# The lifecycle as a table: start once, stop (cleanly or by crash) once. A stopped node is not
# restarted: a restart builds a new node over the same log dirs, as a new process would.
_TRANSITIONS: Final[Mapping[tuple[NodeState, str], NodeState]] = {
    (NodeState.NEW, "start"): NodeState.RUNNING,
    (NodeState.RUNNING, "stop"): NodeState.STOPPED,
    (NodeState.RUNNING, "crash"): NodeState.STOPPED,
}


class IllegalNodeTransitionError(RuntimeError):
    pass


class BrokerNode:
    """One broker: `await start()`, serve, then `await stop()` (or `crash()` in tests)."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        transport: Transport,
        clock: Clock,
        cluster_secret: bytes,
        controller: Address | None = None,
        lifecycle: bool = True,
        listener_transports: Mapping[str, Transport] | None = None,
    ) -> None:
        """`lifecycle=False` leaves out registration, heartbeats and controlled shutdown, for a
        test that plays the controller by hand; the broker epoch then stays -1 unless the owner
        calls `set_broker_epoch`. `listener_transports` overrides `transport` per listener name
        (TLS where listener.security.protocol.map says so, runtime/net/tls.py): a listener's
        transport serves it and dials the peers' listener of that name (`controller` for the
        controller's)."""
        self.config = config
        self.broker_id = config.broker_id
        self.clock = clock
        self._transport = transport
        self._listener_transports = dict(listener_transports or {})
        self._secret = cluster_secret
        controller = controller if controller is not None else config.controller_address
        if controller is None:
            raise ValueError("the broker needs the controller's address (controller.address)")
        self.controller = controller
        self.state = NodeState.NEW
        self.broker_epoch = NO_BROKER_EPOCH
        self.loaded: list[LoadedDir] = []  # what LogManager.open reported (clean or recovered)
        self._log_task: asyncio.Task[None] | None = None
        self._cleaner_task: asyncio.Task[None] | None = None
        # Set when the broker cannot go on (every log dir failed, or the controller is of another
        # cluster); the process main waits on it and exits 1 (node/process.py), as Kafka halts a
        # broker with no live log dir and refuses one whose meta.properties names another cluster.
        self.failed = asyncio.Event()
        # Why the controller refused this broker (INCONSISTENT_CLUSTER_ID), when it did: a
        # configuration error, which the process main exits with (a restart cannot cure it).
        self.refused: str | None = None
        # Holds Kafka-listener requests until the first UpdateMetadata is in and the cluster id
        # is known (serving_gate.py): an answer without it crashes some clients (librdkafka's
        # describe_cluster). Only a first start learns the id from the controller, at the
        # registration its UpdateMetadata may overtake.
        self.metadata_gate = MetadataGate()
        self._has_metadata = False
        # The build steps, in dependency order. Parts that need each other's lookups get lambdas
        # that read the attribute at call time, by which point every part exists.
        self._build_storage_and_metrics()
        self._build_control_plane(lifecycle)
        self._build_replication()
        self._build_groups()
        self._build_listeners()

    # -- build steps ------------------------------------------------------------------------------

    def _build_storage_and_metrics(self) -> None:
        """The log dirs, the purgatories, and the metrics (built first: the ReplicaManager and
        the servers take its hooks; its sources are read only at scrape time)."""
        config, clock = self.config, self.clock
        self.log_manager = LogManager(
            config.log,
            clock,
            node_id=self.broker_id,
            cluster_id=config.lifecycle.cluster_id or None,
        )
        self.delayed = DelayedOperations(clock)
        self.metrics = BrokerMetrics(
            replica_counts=lambda: self.replica_manager.partition_counts(),
            purgatories={"Produce": self.delayed.produce, "Fetch": self.delayed.fetch},
            mailboxes=self._mailboxes,
        )
        self.metrics_server: MetricsHttpServer | None = None
        if config.metrics_port != METRICS_DISABLED:
            self.metrics_server = MetricsHttpServer(
                self.metrics, config.listen_address.host, config.metrics_port, clock=clock
            )

    def _build_control_plane(self, lifecycle: bool) -> None:
        """What talks to the controller over the credentialed control client: registration and
        heartbeats, forwarded admin requests, ISR proposals, producer-id blocks."""
        config, clock = self.config, self.clock
        self._control_client = Client(
            [self.controller],
            transport=self._transport_for(CONTROLLER_LISTENER),
            clock=clock,
            client_id=f"broker-{self.broker_id}-control",
            config=config.client,
            credential=self._secret,
        )
        channel = _ControlChannel(self._control_client, self.controller)
        self.lifecycle: BrokerLifecycle | None = None
        if lifecycle:
            self.lifecycle = BrokerLifecycle(
                self.broker_id,
                config.lifecycle,
                channel=channel,
                clock=clock,
                listeners=self._registration_listeners,
                on_registered=self.set_broker_epoch,
                log_dirs=self.log_manager.directory_ids,
                offline_log_dirs=self.log_manager.offline_directory_ids,
                cluster_id=lambda: self.log_manager.cluster_id,
                on_cluster_id=self._joined_cluster,
                on_refused=self._on_refused,
            )
        # Kafka bounds a forwarded request by the broker's request.timeout.ms.
        self.forwarder = ControllerForwarder(
            channel, clock, budget_ms=config.client.request_timeout_ms, seed=self.broker_id
        )
        self.auto_topics = AutoTopicCreationManager(
            config.auto_topics, self.forwarder.create_topics
        )
        self.alter_partition = AlterPartitionManager(
            self.broker_id,
            self._send_alter_partition,
            clock,
            broker_epoch=lambda: self.broker_epoch,
            topic_id=lambda topic: self.replica_manager.metadata.topic_id(topic),
        )
        # Producer ids for InitProducerId, in blocks from the controller (KIP-730).
        self.producer_ids = ProducerIdManager(
            self._send_allocate_producer_ids,
            self.broker_id,
            broker_epoch=lambda: self.broker_epoch,
            clock=clock,
            retry_backoff_ms=config.client.retry_backoff_ms,
        )

    def _build_replication(self) -> None:
        """The follower fetchers, the ReplicaManager and its partition actors, the data path."""
        config, clock = self.config, self.clock
        # Insertion-ordered (dicts as sets): the order they are closed or woken in is part of a
        # run, and a seeded simulation must replay it (a set of objects orders them by address).
        self._fetch_clients: dict[_FetchClient, None] = {}
        self.fetchers = ReplicaFetcherManager(
            self.broker_id,
            self._fetch_client,
            lambda tp: self.replica_manager.partition(tp),
            clock,
            config.fetcher,
        )
        self.replica_manager = ReplicaManager(
            config.replica_manager,
            self.log_manager,
            self.fetchers,
            self.delayed,
            self.alter_partition,
            # Seed 002: leadership of __consumer_offsets partitions moves the groups with it.
            on_leadership_change=self._leadership_changed,
            on_partitions_deleted=lambda deleted: self.group_coordinator.on_partitions_deleted(
                deleted
            ),
            isr_change_listener=self.metrics.isr_changes,
            # No log dir left: the process must stop (exit 1, node/process.py).
            on_all_log_dirs_offline=self.failed.set,
            # Kafka clients are served once the controller's first metadata is in.
            on_metadata_updated=self._metadata_updated,
            clock=clock,
        )
        # The live log cleaner (runtime/log/cleaner/); its swaps go to the partition actors.
        self.log_cleaner = LogCleaner(
            self.log_manager,
            config.cleaner,
            clock,
            swap=partition_swap_sink(self.replica_manager.partition),
        )
        self.metrics.add_collector(lambda: log_cleaner_metrics(self.log_cleaner.stats, clock))
        self.request_path = RequestPath(
            self.replica_manager.partition,
            self.delayed,
            message_max_bytes=config.message_max_bytes,
            # The topic's override (from the controller's topic configs), else the broker's.
            min_insync_replicas=lambda topic: self.replica_manager.min_insync_replicas(topic),
        )
        # The coordinators' own writes (a transactional offset commit has its producer's epoch
        # but not its sequence numbers): the same partitions and purgatories, another origin.
        self.coordinator_path = RequestPath(
            self.replica_manager.partition,
            self.delayed,
            message_max_bytes=config.message_max_bytes,
            min_insync_replicas=lambda topic: self.replica_manager.min_insync_replicas(topic),
            origin=AppendOrigin.COORDINATOR,
        )

    def _build_groups(self) -> None:
        """The group coordinator on __consumer_offsets, written and read through the data path."""
        config, clock = self.config, self.clock
        self.group_coordinator = GroupCoordinator(
            RequestPathOffsetsLog(
                self.coordinator_path, config.groups.offsets_commit_timeout_ms, clock
            ),
            config.groups,
            clock=clock,
            offsets_partitions=self._offsets_partitions,
        )
        # Sends only to named leaders (never bootstraps): any address satisfies the client.
        self._marker_client = Client(
            [config.listen_address],
            transport=self._transport_for(config.listener_name),
            clock=clock,
            client_id=f"broker-{self.broker_id}-txn-markers",
            config=config.client,
            credential=self._secret,
        )
        self.txn_coordinator = TransactionCoordinator(
            RequestPathOffsetsLog(
                self.coordinator_path,
                config.transactions.write_timeout_ms,
                clock,
                topic=TRANSACTION_STATE_TOPIC,
            ),
            TxnMarkerSender(
                self._marker_client,
                lambda: self.replica_manager.metadata,
                clock=clock,
                retry_backoff_ms=config.client.retry_backoff_ms,
                retry_backoff_max_ms=config.client.retry_backoff_max_ms,
            ),
            config.transactions,
            clock=clock,
            new_producer_id=self._new_producer_id,
            coordinator_epoch=self._transaction_log_epoch,
            state_partitions=lambda: self._partition_count(TRANSACTION_STATE_TOPIC),
        )
        self.groups = BrokerGroups(
            self.group_coordinator,
            metadata=lambda: self.replica_manager.metadata,
            create_topics=self.forwarder.create_topics,
            transactions=self.txn_coordinator,
        )

    def _build_listeners(self) -> None:
        """One handler table (node/broker/apis.py) served by the native listener and, when
        configured, the Kafka listener."""
        config, clock = self.config, self.clock
        replica_manager = self.replica_manager
        self.apis = BrokerApis(
            broker_id=self.broker_id,
            cluster_id=lambda: self.log_manager.cluster_id,
            replica_manager=replica_manager,
            request_path=self.request_path,
            forwarder=self.forwarder,
            auto_topics=self.auto_topics,
            groups=self.groups,
            producer_ids=self.producer_ids,
            topic_configs=TopicConfigSource(
                exists=lambda topic: replica_manager.metadata.has_topic(topic),
                overrides=self.log_manager.topic_overrides,
                effective=self.log_manager.config_for,
                min_insync_replicas=replica_manager.min_insync_replicas,
            ),
            broker_configs=BrokerConfigSource.of(config),
        )
        handlers = self.apis.table()
        # ACLs (node/broker/acls.py): their APIs on both listeners, the set from UpdateMetadata,
        # and the Kafka listener's guards (node/broker/authorization.py).
        self.authorization = Authorization(
            Authorizer(config.authorizer),
            has_topic=lambda topic: replica_manager.metadata.has_topic(topic),
        )
        acls = BrokerAcls(self.authorization, self.forwarder)
        handlers |= acls.table()
        handlers[ApiKey.UPDATE_METADATA] = acls.observe_update_metadata(
            handlers[ApiKey.UPDATE_METADATA]
        )
        # SCRAM credentials (node/broker/scram_credentials.py): their APIs on both listeners,
        # and the controller's credentials from UpdateMetadata, which SASL checks logins with.
        self.scram_credentials = BrokerScramCredentials(
            ScramCredentialCache(), self.forwarder, tls_listeners=config.listener_tls
        )
        handlers |= self.scram_credentials.table()
        handlers[ApiKey.UPDATE_METADATA] = self.scram_credentials.observe_update_metadata(
            handlers[ApiKey.UPDATE_METADATA]
        )
        # Client quotas (node/broker/quotas.py): their APIs on both listeners, the quota set
        # from UpdateMetadata, and the Produce / Fetch layer that measures and throttles. The
        # Kafka listener's authorization wraps it (below), so a refused request is not counted.
        self.client_quotas = ClientQuotaManager(clock, config.quotas)
        handlers |= QuotaApis(self.client_quotas, self.forwarder).table()
        handlers = with_quotas(handlers, self.client_quotas)
        # Latency is the one per-request metric; a node without an endpoint skips it.
        observer = None if self.metrics_server is None else self.metrics.requests.observe
        # One queued.max.request.bytes for both listeners, as Kafka's pool is per broker.
        request_pool = RequestMemoryPool(config.server.queued_max_request_bytes)
        # One fetch-session cache per broker, as KIP-227's: followers' sessions on the native
        # listener and Kafka clients' on the Kafka listener compete for the same slots, where a
        # follower's (privileged) session may evict a consumer's.
        sessions = FetchSessionCache(clock, config.max_incremental_fetch_session_cache_slots)
        self.fetch_sessions = sessions
        self.metrics.add_collector(lambda: fetch_session_metrics(sessions))
        # The native listener: the same identities (SASL when the protocol map says so) and
        # ACLs as the Kafka listener (node/broker/native_security.py).
        self.server = Server(
            self._transport_for(config.listener_name),
            config.listen_address,
            native_handlers(self.authorization, handlers),
            clock=clock,
            config=config.server,
            cluster_secret=self._secret,
            request_observer=observer,
            listener=config.listener_name,
            request_pool=request_pool,
            dialect=native_dialect(
                native_sasl(config.native_sasl, self.scram_credentials.cache), sessions
            ),
        )
        self.kafka_server: Server | None = None
        if config.kafka_listen_address is not None:
            kafka = KafkaProtocol(
                self.metadata_gate.wrap(self.authorization.wrap(handlers)),
                _TopicIds(replica_manager),
                sessions,
                sasl=kafka_sasl(config.sasl, self.scram_credentials.cache),
            )
            self.kafka_server = Server(
                self._transport_for(KAFKA_LISTENER),
                config.kafka_listen_address,
                kafka.handlers,
                clock=clock,
                config=config.server,
                request_observer=observer,
                dialect=kafka.dialect,
                listener=KAFKA_LISTENER,
                request_pool=request_pool,
            )

    # -- wiring ---------------------------------------------------------------------------------

    def _transport_for(self, listener: str) -> Transport:
        """The transport serving `listener` and dialing the peers' listener of that name."""
        return self._listener_transports.get(listener, self._transport)

    def _fetch_client(self, leader: BrokerEndpoint, fetcher_id: int) -> FetcherClient:
        client = Client(
            [leader.address],
            # Leaders are reached on the inter-broker listener (the native one).
            transport=self._transport_for(self.config.listener_name),
            clock=self.clock,
            client_id=f"broker-{self.broker_id}-fetcher-{fetcher_id}",
            config=self.config.client,
            # A SASL or ACL-guarded native listener serves followers as cluster members only.
            credential=(
                self._secret
                if fetcher_credential(self.config.native_sasl, self.authorization)
                else None
            ),
        )
        owned = _FetchClient(client, self._fetch_clients)
        self._fetch_clients[owned] = None
        return owned

    async def _send_alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        response = await self._control_client.send(self.controller, request)
        assert isinstance(response, AlterPartitionResponse), response
        return response

    async def _send_allocate_producer_ids(
        self, request: AllocateProducerIdsRequest
    ) -> AllocateProducerIdsResponse:
        response = await self._control_client.send(self.controller, request)
        assert isinstance(response, AllocateProducerIdsResponse), response
        return response

    def _mailboxes(self) -> Iterator[tuple[str, ActorStatistics]]:
        """Every running actor of the broker, by kind (for the mailbox-depth gauges)."""
        yield "ReplicaManager", self.replica_manager.statistics()
        for actor in self.replica_manager.routes.values():
            yield "Partition", actor.statistics()

    def _registration_listeners(self) -> list[BrokerRegistrationListener]:
        """Every configured listener at its advertised address, else at the address it bound
        (port 0 resolved)."""
        bound = {self.config.listener_name: self.server.address}
        if self.kafka_server is not None:
            bound[KAFKA_LISTENER] = self.kafka_server.address
        listeners = []
        for name, address in sorted(self.config.listeners.items()):
            advertised = self.config.advertised(name, bound.get(name, address))
            listeners.append(
                BrokerRegistrationListener(name=name, host=advertised.host, port=advertised.port)
            )
        return listeners

    def _joined_cluster(self, cluster_id: str) -> None:
        """The controller named the cluster at this broker's first registration: it goes into
        the log dirs' meta.properties, and the Kafka listener may serve."""
        self.log_manager.store_cluster_id(cluster_id)
        self._open_gate_when_ready()

    def _on_refused(self, reason: str) -> None:
        self.refused = reason
        self.failed.set()

    def _metadata_updated(self) -> None:
        self._has_metadata = True
        self._open_gate_when_ready()

    def _open_gate_when_ready(self) -> None:
        # Without a lifecycle (tests playing the controller) nobody would tell the cluster id.
        knows_cluster = self.lifecycle is None or self.log_manager.cluster_id is not None
        if self._has_metadata and knows_cluster:
            self.metadata_gate.open()

    def _offsets_partitions(self) -> int | None:
        return self._partition_count(OFFSETS_TOPIC)

    def _partition_count(self, name: str) -> int | None:
        topic = self.replica_manager.metadata.topics.get(name)
        return None if topic is None else len(topic.partitions)

    def _leadership_changed(
        self, leaders: Sequence[TopicPartition], followers: Sequence[TopicPartition]
    ) -> None:
        # Seed 002: leadership of the internal topics' partitions moves the coordinators with it.
        self.group_coordinator.on_leadership_change(leaders, followers)
        self.txn_coordinator.on_leadership_change(leaders, followers)

    def _transaction_log_epoch(self, partition: int) -> int:
        """The coordinator epoch of a loaded `__transaction_state` partition: its leader epoch
        here (Kafka's), which fences markers of the coordinators before it."""
        actor = self.replica_manager.partition(TopicPartition(TRANSACTION_STATE_TOPIC, partition))
        return -1 if actor is None else actor.view.leader_epoch

    async def _new_producer_id(self) -> int | ErrorCode:
        try:
            return await self.producer_ids.generate()
        except ProducerIdsUnavailableError as exc:
            return exc.code

    # -- lifecycle ------------------------------------------------------------------------------

    def _move(self, event: str) -> None:
        target = _TRANSITIONS.get((self.state, event))
        if target is None:
            raise IllegalNodeTransitionError(f"broker {self.broker_id}: {event} while {self.state}")
        self.state = target

    @property
    def address(self) -> Address:
        """The bound address of the native listener (the real port when port 0 was asked)."""
        return self.server.address

    @property
    def had_clean_shutdown(self) -> bool:
        """Every log dir that loaded had the clean-shutdown marker at start (no recovery scan)."""
        return bool(self.loaded) and all(d.clean_shutdown for d in self.loaded)

    async def start(self) -> None:
        self._move("start")
        self.loaded = await self.log_manager.open_async()
        try:
            self._log_task = asyncio.get_running_loop().create_task(
                self.log_manager.run(), name=f"log-manager@{self.broker_id}"
            )
            self._cleaner_task = asyncio.get_running_loop().create_task(
                self.log_cleaner.run(), name=f"log-cleaner@{self.broker_id}"
            )
            await self.alter_partition.start()
            await self.group_coordinator.start()  # before leadership can move to it
            await self.txn_coordinator.start()
            await self.replica_manager.start()
            await self.server.start()
            if self.kafka_server is not None:
                await self.kafka_server.start()
            if self.metrics_server is not None:
                await self.metrics_server.start()
            if self.lifecycle is not None:
                await self.lifecycle.start()
        except BaseException:
            await self._abort()
            raise
        kafka = (
            "" if self.kafka_server is None else f", Kafka protocol at {self.kafka_server.address}"
        )
        log.info("broker %d serving at %s%s", self.broker_id, self.server.address, kafka)

    async def set_broker_epoch(self, broker_epoch: int) -> None:
        """The epoch the controller's registration answered (issue 6); fences older requests."""
        self.broker_epoch = broker_epoch
        await self.replica_manager.ask(SetBrokerEpoch(broker_epoch))

    async def stop(self) -> None:
        """Clean shutdown; afterwards the log dirs hold the clean-shutdown marker."""
        self._move("stop")
        if self.lifecycle is not None:
            # While everything still serves: the controller's LeaderAndIsr / StopReplica for
            # the leadership it moves away come to this broker.
            await self.lifecycle.controlled_shutdown()
            await self.lifecycle.stop()
        await self._stop_metrics_server()
        await self._stop_servers()
        await self.auto_topics.stop()
        await self.fetchers.shutdown()
        await self._stop_groups()
        await self.replica_manager.stop()  # partition actors stop; last HW checkpoint
        self.delayed.close()
        await self.alter_partition.stop()
        await self.producer_ids.stop()
        await self._stop_log_task()
        await self.log_manager.shutdown_async()
        await self._close_clients()
        log.info("broker %d stopped cleanly", self.broker_id)

    async def crash(self) -> None:
        """Stop every task as a killed process would: no flush, no checkpoint, no marker.

        The caller should cut the node's network links first (as the harness does): the
        server then has no connection to drain, so nothing here waits on the clock.
        """
        self._move("crash")
        await self._abort()
        log.info("broker %d crashed (test)", self.broker_id)

    async def _abort(self) -> None:
        if self.lifecycle is not None:
            await self.lifecycle.stop()
        await self._stop_metrics_server()
        await self._stop_servers()
        await self.auto_topics.stop()
        await self.fetchers.shutdown()
        await self._stop_groups()
        await self.replica_manager.abort()
        self.delayed.close()
        await self.alter_partition.stop()
        await self.producer_ids.stop()
        await self._stop_log_task()
        self.log_manager.abandon()
        await self._close_clients()

    async def _stop_groups(self) -> None:
        await self.groups.stop()
        await asyncio.gather(self.group_coordinator.stop(), self.txn_coordinator.stop())

    async def _stop_servers(self) -> None:
        servers = [self.server] if self.kafka_server is None else [self.server, self.kafka_server]
        await asyncio.gather(*(server.stop() for server in servers))

    async def _stop_metrics_server(self) -> None:
        if self.metrics_server is not None:
            await self.metrics_server.stop()

    async def _stop_log_task(self) -> None:
        for task in (self._cleaner_task, self._log_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._log_task = self._cleaner_task = None

    async def _close_clients(self) -> None:
        fetch_clients = list(self._fetch_clients)
        await asyncio.gather(
            self._control_client.close(),
            self._marker_client.close(),
            *(client.close() for client in fetch_clients),
        )


class _TopicIds:
    """The broker's current topic ids, as the Kafka listener resolves them (Fetch v13+)."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self._replica_manager = replica_manager

    def name_of(self, topic_id: bytes) -> str | None:
        return self._replica_manager.metadata.topic_name(topic_id)

    def id_of(self, name: str) -> bytes:
        return self._replica_manager.metadata.topic_id(name)


class _ControlChannel:
    """The controller as the lifecycle and the forwarder see it: one address on the node's
    credentialed control client."""

    def __init__(self, client: Client, controller: Address) -> None:
        self._client = client
        self._controller = controller

    async def send(self, request: Request, *, timeout_ms: float | None = None) -> Response:
        return await self._client.send(self._controller, request, timeout_ms=timeout_ms)


class _FetchClient:
    """A fetcher's client that leaves the node's table when its fetcher closes it, so the node
    closes at shutdown only the clients still open (a replaced fetcher closes its own)."""

    def __init__(self, client: Client, owner: dict[_FetchClient, None]) -> None:
        self._client = client
        self._owner = owner

    async def send(
        self, target: Address, request: Request, *, timeout_ms: float | None = None
    ) -> Response:
        return await self._client.send(target, request, timeout_ms=timeout_ms)

    async def close(self) -> None:
        self._owner.pop(self, None)
        await self._client.close()
