"""`ControllerForwarder`: admin requests from clients, forwarded to the controller (KIP-590).

Every broker accepts CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs,
CreateAcls, DeleteAcls, AlterUserScramCredentials and DescribeCluster from clients and forwards
them over its credentialed
control channel (node/broker/lifecycle.py's `ControllerChannel`), since ketch's controller is not
a broker clients can reach. The class docstring has the retry rules.

Ownership: stateless between requests apart from its backoff settings and a seeded random source
for jitter; each forward is its own coroutine on the event loop, waiting on the injected clock.
"""

from __future__ import annotations

import logging
import random
from typing import Final

from client.errors import ClientError, is_retriable
from node.broker.lifecycle import ControllerChannel
from runtime.clock import NS_PER_MS, Clock
from runtime.net.backoff import ExponentialBackoff
from wire.error_responses import error_response
from wire.errors import ErrorCode
from wire.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    Request,
    Response,
)

log = logging.getLogger(__name__)

_UNREACHABLE: Final = "the controller could not be reached"


class ControllerForwarder:
    """Forwards clients' CreateTopics / DeleteTopics / CreatePartitions /
    IncrementalAlterConfigs / DescribeCluster to the controller; returns its answer.

    While the controller cannot be reached the request is resent (backoff 100 ms doubling, up
    to 1 s) until `budget_ms` (the broker's request.timeout.ms, as Kafka's forwarding channel)
    has passed; then every topic is answered REQUEST_TIMED_OUT, which is what Kafka's
    ForwardingManager answers when forwarding times out. Clients retry that code.

    A resend after a connection lost mid-request may reach a controller that already applied
    the first copy; its answer (e.g. TOPIC_ALREADY_EXISTS) is returned as is, as in Kafka.
    """

    def __init__(
        self,
        channel: ControllerChannel,
        clock: Clock,
        *,
        budget_ms: float,
        seed: int = 0,
    ) -> None:
        self._channel = channel
        self._clock = clock
        self._budget_ms = budget_ms
        self._backoff = ExponentialBackoff(initial_ms=100, max_ms=1_000)
        self._rng = random.Random(seed)

    async def create_topics(self, request: CreateTopicsRequest) -> CreateTopicsResponse:
        response = await self._forward(request)
        assert isinstance(response, CreateTopicsResponse), response
        return response

    async def delete_topics(self, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
        response = await self._forward(request)
        assert isinstance(response, DeleteTopicsResponse), response
        return response

    async def create_partitions(self, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
        response = await self._forward(request)
        assert isinstance(response, CreatePartitionsResponse), response
        return response

    async def incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest
    ) -> IncrementalAlterConfigsResponse:
        response = await self._forward(request)
        assert isinstance(response, IncrementalAlterConfigsResponse), response
        return response

    async def create_acls(self, request: CreateAclsRequest) -> CreateAclsResponse:
        response = await self._forward(request)
        assert isinstance(response, CreateAclsResponse), response
        return response

    async def delete_acls(self, request: DeleteAclsRequest) -> DeleteAclsResponse:
        response = await self._forward(request)
        assert isinstance(response, DeleteAclsResponse), response
        return response

    async def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        response = await self._forward(request)
        assert isinstance(response, AlterUserScramCredentialsResponse), response
        return response

    async def alter_client_quotas(
        self, request: AlterClientQuotasRequest
    ) -> AlterClientQuotasResponse:
        response = await self._forward(request)
        assert isinstance(response, AlterClientQuotasResponse), response
        return response

    async def describe_cluster(self, request: DescribeClusterRequest) -> DescribeClusterResponse:
        response = await self._forward(request)
        assert isinstance(response, DescribeClusterResponse), response
        return response

    async def _forward(self, request: Request) -> Response:
        """The controller's answer, else (not had within the budget) every topic of the request
        answered REQUEST_TIMED_OUT."""
        response = await self._send_within_budget(request)
        if response is None:
            return error_response(request, ErrorCode.REQUEST_TIMED_OUT, _UNREACHABLE)
        return response

    async def _send_within_budget(self, request: Request) -> Response | None:
        """The controller's answer, or None when it could not be had within the budget."""
        deadline_ns = self._clock.monotonic_ns() + round(self._budget_ms * NS_PER_MS)
        failures = 0
        while True:
            remaining_ms = (deadline_ns - self._clock.monotonic_ns()) / NS_PER_MS
            if remaining_ms <= 0:
                return None
            try:
                return await self._channel.send(request, timeout_ms=remaining_ms)
            except ClientError as exc:
                if not is_retriable(exc):
                    log.warning("forwarding %s failed: %s", type(request).__name__, exc)
                    return None
                delay_ms = self._backoff.delay_ms(failures, self._rng)
                failures += 1
                remaining_ms = (deadline_ns - self._clock.monotonic_ns()) / NS_PER_MS
                if delay_ms >= remaining_ms:
                    return None
                log.debug("forwarding %s: %s; retrying", type(request).__name__, exc)
                await self._clock.sleep(delay_ms / 1000)
