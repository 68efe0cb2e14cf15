"""`ControllerNode`: the composition root of the controller process.

    MetadataLog                  the durable metadata (locked directory; replayed at start)
    ControllerChannelManager     one request channel per live broker (credentialed Client each)
    ControllerActor              every controller event, one at a time
    Server                       the controller's listener: BrokerRegistration, BrokerHeartbeat,
                                 AlterPartition, ControlledShutdown, AllocateProducerIds,
                                 and the CreateTopics / DeleteTopics / CreatePartitions /
                                 IncrementalAlterConfigs / DescribeCluster / CreateAcls /
                                 DeleteAcls / AlterUserScramCredentials / AlterClientQuotas
                                 that brokers forward for clients (KIP-590)

Only cluster members talk to the controller: every request here needs a connection that proved
the cluster credential, forwarded topic requests included (a client must go through a broker),
so anything else is answered CLUSTER_AUTHORIZATION_FAILED and changes nothing.

With `metrics_port` set (a node's `metrics.port` property, runtime.metrics.registry.metrics_port), a
MetricsHttpServer on the node's loop serves the controller's gauges (offline partitions,
controller epoch, active and fenced brokers, unclean elections, mailbox depth); each scrape asks
the actor once for a snapshot (DescribeCluster), so nothing reads the actor's fields.

If the actor stops on a fatal error (the metadata log failed), `failed` is set: the process
exits and a restart replays what is really on disk. Ownership: everything runs on the event
loop; the node only starts, stops and forwards.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actors.controller.acls import CreateAcls, DeleteAcls
from actors.controller.channel import ChannelConfig, ControllerChannelManager
from actors.controller.client_quotas import AlterClientQuotas
from actors.controller.controller import ControllerActor
from actors.controller.messages import (
    AllocateProducerIds,
    AlterPartition,
    ClusterStatus,
    ControlledShutdown,
    ControllerConfig,
    CreatePartitions,
    CreateTopics,
    DeleteTopics,
    DescribeCluster,
    Heartbeat,
    IncrementalAlterConfigs,
    RegisterBroker,
)
from actors.controller.scram_credentials import AlterUserScramCredentials
from runtime.actor import Actor, Ask
from runtime.clock import Clock
from runtime.log.metadata_log import MetadataLog
from runtime.metrics.controller import ControllerGauges, ControllerMetrics
from runtime.metrics.endpoint import MetricsHttpServer
from runtime.metrics.registry import METRICS_DISABLED
from runtime.net.dialect import (
    Handler,
    RequestContext,
)
from runtime.net.server import (
    Server,
    ServerConfig,
)
from runtime.net.transport import Address, Transport
from wire.errors import ErrorCode
from wire.messages import (
    ApiKey,
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
    Request,
    Response,
)

log = logging.getLogger(__name__)


class ControllerNode:
    def __init__(
        self,
        config: ControllerConfig,
        metadata_dir: Path,
        *,
        transport: Transport,
        clock: Clock,
        cluster_secret: bytes,
        listen: Address,
        server_config: ServerConfig | None = None,
        channel_config: ChannelConfig | None = None,
        rng: random.Random | None = None,
        metrics_port: int = METRICS_DISABLED,
        broker_transport: Transport | None = None,
    ) -> None:
        """`transport` serves the controller's listener; `broker_transport` (default: the
        same) dials the brokers' inter-broker listener (they differ when only one is TLS)."""
        self.config = config
        self.failed = asyncio.Event()
        self.store = MetadataLog(metadata_dir)
        self.channels = ControllerChannelManager(
            transport=broker_transport or transport,
            clock=clock,
            credential=cluster_secret,
            config=channel_config,
        )
        self.actor = ControllerActor(
            config,
            self.store,
            self.channels,
            clock=clock,
            rng=rng,
            supervisor=self._actor_failed,
        )
        handlers: dict[int, Handler] = {
            ApiKey.BROKER_REGISTRATION: self._forward(RegisterBroker),
            ApiKey.BROKER_HEARTBEAT: self._forward(Heartbeat),
            ApiKey.ALTER_PARTITION: self._forward(AlterPartition),
            ApiKey.CONTROLLED_SHUTDOWN: self._forward(ControlledShutdown),
            ApiKey.ALLOCATE_PRODUCER_IDS: self._forward(AllocateProducerIds),
            ApiKey.CREATE_TOPICS: self._forward(CreateTopics),
            ApiKey.DELETE_TOPICS: self._forward(DeleteTopics),
            ApiKey.CREATE_PARTITIONS: self._forward(CreatePartitions),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._forward(IncrementalAlterConfigs),
            ApiKey.DESCRIBE_CLUSTER: self._describe_cluster,
            ApiKey.CREATE_ACLS: self._forward(CreateAcls),
            ApiKey.DELETE_ACLS: self._forward(DeleteAcls),
            ApiKey.ALTER_CLIENT_QUOTAS: self._forward(AlterClientQuotas),
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self._forward(AlterUserScramCredentials),
        }
        self.server = Server(
            transport,
            listen,
            handlers,
            clock=clock,
            config=server_config,
            cluster_secret=cluster_secret,
        )
        self.metrics = ControllerMetrics(
            self._gauges, lambda: [("Controller", self.actor.statistics())]
        )
        self.metrics_server: MetricsHttpServer | None = None
        if metrics_port != METRICS_DISABLED:
            self.metrics_server = MetricsHttpServer(
                self.metrics, listen.host, metrics_port, clock=clock
            )

    async def _gauges(self) -> ControllerGauges:
        status = await self.status()
        fenced = sum(1 for b in status.brokers if b.state == "fenced")
        return ControllerGauges(
            controller_epoch=status.controller_epoch,
            offline_partitions=status.offline_partitions,
            active_brokers=len(status.brokers) - fenced,
            fenced_brokers=fenced,
            unclean_elections=status.unclean_elections,
        )

    def _forward(self, message: Callable[[Any], Ask[Any]]) -> Handler:
        async def handle(request: Request, ctx: RequestContext) -> Response:
            if not ctx.cluster_member:
                return type(request).RESPONSE.error_response(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            response: Response = await self.actor.ask(message(request))
            return response

        return handle

    async def _describe_cluster(
        self, request: DescribeClusterRequest, ctx: RequestContext
    ) -> DescribeClusterResponse:
        if not ctx.cluster_member:
            return DescribeClusterResponse.error_response(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        status = await self.status()
        return DescribeClusterResponse(
            cluster_id=status.cluster_id,
            controller_id=status.controller_id,
            controller_epoch=status.controller_epoch,
            brokers=[
                DescribeClusterBroker(
                    broker_id=b.broker_id,
                    host=b.host,
                    port=b.port,
                    broker_epoch=b.broker_epoch,
                    state=b.state,
                    offline_log_dirs=list(b.offline_log_dirs),
                )
                for b in status.brokers
            ],
            offline_partitions=status.offline_partitions,
        )

    def _actor_failed(self, actor: Actor, error: BaseException) -> None:
        log.critical("controller stopped: %s", error)
        self.failed.set()

    @property
    def address(self) -> Address:
        return self.server.address

    async def start(self) -> None:
        await self.actor.start()
        # The log is replayed and the new epoch written before any broker is heard.
        await self.actor.ask(DescribeCluster())
        await self.server.start()
        if self.metrics_server is not None:
            await self.metrics_server.start()
        log.info(
            "controller %d (epoch %d) of cluster %s serving at %s",
            self.config.controller_id,
            self.actor.model.controller_epoch,
            self.actor.model.cluster_id,
            self.server.address,
        )

    async def status(self) -> ClusterStatus:
        return await self.actor.ask(DescribeCluster())

    async def stop(self) -> None:
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        await self.server.stop()
        await self.actor.stop()
        await self.channels.close()
        await self.store.close()
