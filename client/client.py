"""The async client of ketch's native protocol, shared by producers, consumers, brokers and the
controller.

    client = Client([Address.parse("127.0.0.1:9092")], transport=TcpTransport(), clock=clock)
    response = await client.send(node_id, MetadataRequest(...))
    ...
    await client.close()

What it adds on top of one `BrokerConnection` per broker (see client_connection.py):

* Bootstrap. Before any metadata is known, requests go to the bootstrap addresses, tried in
  turn (starting at a seeded random one, so many clients spread over the list), until one
  answers. Once a Metadata response lists the brokers, requests address brokers by node id.
  When no address can be reached, `send_any()` tries them all again, each after its reconnect
  backoff, for up to `reach_timeout_ms` (0 by default: one round, the caller's own retries
  decide), as Kafka's clients keep polling their bootstrap list until the caller's timeout; a
  command line tool sets it so a broker that restarts in half a second does not fail it.
* Metadata cache (metadata.py). `refresh_metadata()` asks one broker (one with an open
  connection first, else the next bootstrap address) for the topics of interest; concurrent
  refreshes share one request. It is refreshed when it is older than metadata.max.age.ms, and
  on demand after NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION (and the rest of Kafka's
  InvalidMetadataException family) or a lost connection, not more often than retry.backoff.ms.
* Retries. `call()` runs an operation until it succeeds, fails with a non-retriable error, or
  its delivery timeout (delivery.timeout.ms) would pass before the next attempt; between
  attempts it waits retry.backoff.ms, doubling up to retry.backoff.max.ms with seeded jitter,
  and refreshes metadata first when the error calls for it.
* Cluster credential. With `credential=` every connection proves it before its first request
  (SaslHandshake + two SaslAuthenticate rounds, see runtime/net/auth.py), so brokers and the
  controller can reuse this client for control-plane requests. With `authenticator=` instead,
  every connection logs in as a user first (SASL PLAIN / SCRAM, client/sasl.py).
* Shutdown. `close()` closes every connection, failing whatever is pending with
  `ClientClosedError`; when it returns no task of the client is left.

Everything runs on the event loop thread; the client owns its state and needs no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from client.config import ClientConfig
from client.connection import (
    Authenticator,
    BrokerConnection,
    ConnectionState,
    RawSender,
    consume_outcome,
)
from client.errors import (
    AuthenticationError,
    ClientClosedError,
    ClientError,
    ConnectionFailedError,
    DeliveryTimeoutError,
    NoBrokersAvailableError,
    UnknownBrokerError,
    error_reason,
    invalidates_metadata,
    is_retriable,
)
from client.metadata import (
    BrokerNode,
    ClusterView,
    MetadataCache,
    PartitionInfo,
    TopicInfo,
)
from runtime.clock import NS_PER_MS, Clock
from runtime.net import auth
from runtime.net.backoff import ExponentialBackoff
from runtime.net.transport import Address, Transport
from wire.errors import ErrorCode, KafkaError
from wire.messages import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from wire.messages.base import Request, Response
from wire.messages.fields import ZERO_UUID
from wire.topic import TopicPartition

_log = logging.getLogger(__name__)

_T = TypeVar("_T")
_Resp = TypeVar("_Resp", bound=Response)

Target = int | Address
"""Where a request goes: a broker's node id (from metadata) or an address (bootstrap,
controller)."""


class Client:
    def __init__(
        self,
        bootstrap: Sequence[Address],
        *,
        transport: Transport,
        clock: Clock,
        client_id: str | None = "ketch",
        config: ClientConfig | None = None,
        credential: bytes | None = None,
        seed: int = 0,
        reach_timeout_ms: float = 0,
        authenticator: Authenticator | None = None,
    ) -> None:
        """`authenticator` runs on each fresh connection instead of the cluster credential's
        exchange: a user's SASL login (client/sasl.py's `sasl_authenticator`)."""
        if not bootstrap:
            raise ValueError("the client needs at least one bootstrap address")
        if reach_timeout_ms < 0:
            raise ValueError(f"reach_timeout_ms must be >= 0, got {reach_timeout_ms}")
        self._bootstrap = list(bootstrap)
        self._reach_timeout_ms = reach_timeout_ms
        self._transport = transport
        self.clock = clock
        self.client_id = client_id
        self.config = config or ClientConfig()
        self._rng = random.Random(seed)
        if credential is not None and authenticator is not None:
            raise ValueError("a client proves the cluster credential or logs in, not both")
        self._authenticator = _credential_authenticator(credential) if credential else authenticator
        if credential is not None:
            auth.derive_key(credential)  # reject a too-short secret now, not on first connect
        self.metadata = MetadataCache(
            max_age_ms=self.config.metadata_max_age_ms,
            refresh_backoff_ms=self.config.retry_backoff_ms,
        )
        self._retry_backoff = ExponentialBackoff(
            initial_ms=self.config.retry_backoff_ms, max_ms=self.config.retry_backoff_max_ms
        )
        self._connections: dict[Address, BrokerConnection] = {}
        self._next_bootstrap = self._rng.randrange(len(self._bootstrap))
        self._refresh: asyncio.Task[ClusterView] | None = None
        self._refresh_topics: frozenset[str] = frozenset()
        self._closed = False

    # ---------------------------------------------------------------------------------------
    # Sending

    async def send(
        self, target: Target, request: Request, *, timeout_ms: float | None = None
    ) -> Response:
        """One attempt: send `request` to `target` and return its decoded response.

        Raises the connection's typed errors (`ConnectionFailedError`, `ConnectionLostError`,
        `RequestTimeoutError`, `ClientClosedError`); a loss of the connection to a known
        broker also marks the metadata for refresh, since the broker may be gone.
        """
        connection = self._connection(self._resolve(target))
        try:
            return await connection.request(
                request.API_KEY,
                request.API_VERSION,
                request.to_body(),
                request.RESPONSE.from_body,
                timeout_ms=timeout_ms,
            )
        except ClientError as exc:
            if invalidates_metadata(exc):
                self.metadata.request_update()
            raise

    async def send_expect(
        self,
        target: Target,
        request: Request,
        response_type: type[_Resp],
        *,
        timeout_ms: float | None = None,
    ) -> _Resp:
        """`send()`, then raise `KafkaError` for a request-level error code, and check the type."""
        response = await self.send(target, request, timeout_ms=timeout_ms)
        if response.error_code != ErrorCode.NONE:
            if ErrorCode.from_code(response.error_code) is ErrorCode.NOT_CONTROLLER:
                self.metadata.request_update()
            raise KafkaError(response.error_code, f"from {target}")
        if not isinstance(response, response_type):
            raise TypeError(f"expected {response_type.__name__}, got {type(response).__name__}")
        return response

    async def send_only(self, target: Target, request: Request) -> None:
        """Send a request that gets no response (produce with acks=0)."""
        connection = self._connection(self._resolve(target))
        await connection.send_only(request.API_KEY, request.API_VERSION, request.to_body())

    async def send_any(self, request: Request, *, timeout_ms: float | None = None) -> Response:
        """Send to any reachable broker (open connection first, then bootstrap addresses).

        Only a failed connect moves on to the next address: a request that reached a broker
        may have been processed, so its timeout or lost connection is raised as is. When no
        address can be reached, later rounds (within `reach_timeout_ms`) try the addresses
        whose reconnect backoff has passed, sleeping until the next one's has; then
        `NoBrokersAvailableError`, from the last failure.
        """
        deadline_ns = self.clock.monotonic_ns() + round(self._reach_timeout_ms * NS_PER_MS)
        candidates = self._candidates()
        tried: dict[Address, None] = {}  # an ordered set, for the message
        last: Exception | None = None
        while True:
            for address in candidates:
                try:
                    return await self.send(address, request, timeout_ms=timeout_ms)
                except ConnectionFailedError as exc:
                    tried[address] = None
                    last = exc
            # Every round waits out at least one backoff, so the loop is bounded by the deadline.
            wait_ms = self._ms_until_connect_allowed() or self.config.reconnect_backoff_ms
            if self.clock.monotonic_ns() + round(wait_ms * NS_PER_MS) >= deadline_ns:
                break
            await self.clock.sleep(wait_ms / 1000)
            candidates = [a for a in self._candidates() if self._may_connect_now(a)]
        among = ", ".join(str(a) for a in tried)
        raise NoBrokersAvailableError(f"no broker reachable among {among}") from last

    async def call(
        self,
        operation: Callable[[], Awaitable[_T]],
        *,
        timeout_ms: float | None = None,
        what: str = "request",
    ) -> _T:
        """Run `operation` until it succeeds, retrying retriable errors within the timeout.

        `timeout_ms` defaults to delivery.timeout.ms. A non-retriable error is raised as is;
        when time runs out, `DeliveryTimeoutError` is raised from the last error.
        """
        budget_ms = self.config.delivery_timeout_ms if timeout_ms is None else timeout_ms
        deadline_ns = self.clock.monotonic_ns() + round(budget_ms * NS_PER_MS)
        attempts = 0
        while True:
            self._check_open()
            try:
                return await operation()
            except Exception as exc:
                if not is_retriable(exc):
                    raise
                if invalidates_metadata(exc):
                    self.metadata.request_update()
                delay_ms = self._retry_backoff.delay_ms(attempts, self._rng)
                remaining_ms = (deadline_ns - self.clock.monotonic_ns()) / NS_PER_MS
                if delay_ms >= remaining_ms:
                    raise DeliveryTimeoutError(
                        f"{what} did not succeed within {budget_ms} ms "
                        f"({attempts + 1} attempts); last error: {error_reason(exc)}"
                    ) from exc
                _log.debug("%s failed (%s); retrying in %.0f ms", what, exc, delay_ms)
                attempts += 1
                await self.clock.sleep(delay_ms / 1000)

    # ---------------------------------------------------------------------------------------
    # Metadata

    async def refresh_metadata(self, topics: Iterable[str] = ()) -> ClusterView:
        """Fetch metadata now for the tracked topics plus `topics`; shared by concurrent calls."""
        self._check_open()
        self.metadata.add_topics(topics)
        wanted = self.metadata.topics
        if self._refresh is not None and not wanted <= self._refresh_topics:
            # The refresh under way asks for fewer topics: let it finish, then ask again.
            with contextlib.suppress(Exception):
                await asyncio.shield(self._refresh)
        if self._refresh is None:
            self._refresh_topics = wanted
            self._refresh = asyncio.create_task(self._do_refresh(wanted), name="metadata refresh")
            self._refresh.add_done_callback(consume_outcome)
        task = self._refresh
        return await asyncio.shield(task)

    async def cluster(self, topics: Iterable[str] = ()) -> ClusterView:
        """The metadata view, refreshed first if a refresh is requested or due."""
        topics = list(topics)
        new_topics = self.metadata.add_topics(topics)
        now_ms = self.clock.monotonic_ms()
        if new_topics or self.metadata.needs_refresh(now_ms) or self.metadata.version == 0:
            return await self.refresh_metadata()
        return self.metadata.view

    async def wait_for_topic(self, topic: str, *, timeout_ms: float | None = None) -> TopicInfo:
        """Metadata of `topic`, retrying while it is unknown or its metadata is unavailable."""

        async def attempt() -> TopicInfo:
            view = await self.cluster([topic])
            info = view.topics.get(topic)
            if info is None:
                self.metadata.request_update()
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, topic)
            if info.error != ErrorCode.NONE:
                self.metadata.request_update()
                raise KafkaError(info.error, topic)
            return info

        return await self.call(attempt, timeout_ms=timeout_ms, what=f"metadata of {topic!r}")

    async def leader_for(
        self, tp: TopicPartition, *, timeout_ms: float | None = None
    ) -> tuple[BrokerNode, PartitionInfo]:
        """The current leader of `tp` and its partition metadata, waiting while leaderless."""

        async def attempt() -> tuple[BrokerNode, PartitionInfo]:
            view = await self.cluster([tp.topic])
            info = view.partition(tp)
            leader = view.leader(tp)
            if info is None or leader is None:
                self.metadata.request_update()
                code = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    if info is None
                    else ErrorCode.LEADER_NOT_AVAILABLE
                )
                raise KafkaError(code, str(tp))
            return leader, info

        return await self.call(attempt, timeout_ms=timeout_ms, what=f"leader of {tp}")

    async def _do_refresh(self, topics: frozenset[str]) -> ClusterView:
        try:
            wait_ms = self.metadata.ms_until_refresh(self.clock.monotonic_ms())
            if self.metadata.version > 0 and wait_ms > 0 and self.metadata.update_requested():
                # Refreshing again right after a refresh would hit the same stale broker.
                await self.clock.sleep(wait_ms / 1000)
            request = MetadataRequest(
                topics=[MetadataRequestTopic(name=t) for t in sorted(topics)],
                allow_auto_topic_creation=False,
            )
            try:
                response = await self.send_any(request)
            except ClientError:
                self.metadata.refresh_failed(self.clock.monotonic_ms())
                raise
            if not isinstance(response, MetadataResponse):
                raise TypeError(f"Metadata answered with {type(response).__name__}")
            if response.error_code != ErrorCode.NONE:
                self.metadata.refresh_failed(self.clock.monotonic_ms())
                raise KafkaError(response.error_code, "metadata request")
            brokers, topic_infos = metadata_from_response(response)
            return self.metadata.update(
                brokers,
                topic_infos,
                now_ms=self.clock.monotonic_ms(),
                controller_id=response.controller_id,
                cluster_id=response.cluster_id,
            )
        finally:
            self._refresh = None

    # ---------------------------------------------------------------------------------------
    # Connections

    def _resolve(self, target: Target) -> Address:
        if isinstance(target, Address):
            return target
        broker = self.metadata.view.brokers.get(target)
        if broker is None:
            self.metadata.request_update()
            raise UnknownBrokerError(f"broker {target} is not in the metadata")
        return broker.address

    def _connection(self, address: Address) -> BrokerConnection:
        self._check_open()
        connection = self._connections.get(address)
        if connection is None:
            connection = BrokerConnection(
                address,
                transport=self._transport,
                clock=self.clock,
                config=self.config,
                client_id=self.client_id,
                rng=self._rng,
                authenticator=self._authenticator,
            )
            self._connections[address] = connection
        return connection

    def connection_to(self, target: Target) -> BrokerConnection:
        """The (lazily opened) connection to `target`, e.g. to inspect its state."""
        return self._connection(self._resolve(target))

    def _candidates(self) -> list[Address]:
        """Addresses to try for a request any broker can answer, best first.

        Open connections come first (least loaded first), then the other known brokers, then
        the bootstrap list rotated by one per call; an address still in its reconnect backoff
        goes last, so one dead broker does not delay every metadata refresh.
        """
        known = [b.address for b in self.metadata.view.brokers.values()]
        start = self._next_bootstrap
        self._next_bootstrap = (start + 1) % len(self._bootstrap)
        rotated = self._bootstrap[start:] + self._bootstrap[:start]
        ordered = list(dict.fromkeys([*known, *rotated]))

        def rank(address: Address) -> tuple[int, int, int]:
            connection = self._connections.get(address)
            if connection is None:
                return (1, 0, 0)
            backing_off = int(connection.ms_until_connect_allowed() > 0)
            not_ready = int(connection.state is not ConnectionState.READY)
            return (backing_off * 2 + not_ready, connection.in_flight, 0)

        return sorted(ordered, key=rank)  # stable: ties keep the order above

    def _may_connect_now(self, address: Address) -> bool:
        connection = self._connections.get(address)
        return connection is None or connection.ms_until_connect_allowed() <= 0

    def _ms_until_connect_allowed(self) -> float:
        """How long until the first connection in its reconnect backoff may try again."""
        waits = [c.ms_until_connect_allowed() for c in self._connections.values()]
        return min((w for w in waits if w > 0), default=0.0)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the client is closed")

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Close every connection; pending requests fail with `ClientClosedError`."""
        if self._closed:
            return
        self._closed = True
        refresh, self._refresh = self._refresh, None
        if refresh is not None:
            refresh.cancel()
            with contextlib.suppress(BaseException):
                await refresh
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            await connection.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def metadata_from_response(response: MetadataResponse) -> tuple[list[BrokerNode], list[TopicInfo]]:
    """Convert a Metadata response to the cache's types (partitions sorted by index)."""
    brokers = [BrokerNode(b.node_id, Address(b.host, b.port), b.rack) for b in response.brokers]
    topics = []
    for topic in response.topics:
        partitions = sorted(topic.partitions, key=lambda p: p.partition_index)
        if [p.partition_index for p in partitions] != list(range(len(partitions))):
            # A gap means a broker answered from half-updated state; treat it as unknown.
            topics.append(TopicInfo(topic.name, error=ErrorCode.LEADER_NOT_AVAILABLE))
            continue
        topics.append(
            TopicInfo(
                name=topic.name,
                error=topic.error_code,
                topic_id=None if topic.topic_id == ZERO_UUID else topic.topic_id,
                is_internal=topic.is_internal,
                partitions=tuple(
                    PartitionInfo(
                        topic=topic.name,
                        partition=p.partition_index,
                        leader_id=p.leader_id,
                        leader_epoch=p.leader_epoch,
                        replicas=tuple(p.replica_nodes),
                        isr=tuple(p.isr_nodes),
                        offline_replicas=tuple(p.offline_replicas),
                        error=p.error_code,
                    )
                    for p in partitions
                ),
            )
        )
    return brokers, topics


def _credential_authenticator(secret: bytes) -> Authenticator:
    """Prove the cluster credential on a fresh connection (runtime/net/auth.py's exchange)."""

    async def authenticate(sender: RawSender) -> None:
        client = auth.ClientAuthenticator(secret)
        handshake = await _raw(sender, SaslHandshakeRequest(mechanism=auth.MECHANISM))
        assert isinstance(handshake, SaslHandshakeResponse)
        if handshake.error_code != ErrorCode.NONE:
            raise AuthenticationError(
                f"SaslHandshake refused: {ErrorCode.from_code(handshake.error_code).name}"
            )
        try:
            first = SaslAuthenticateRequest(auth_bytes=client.first_message())
            challenge = await _raw(sender, first)
            assert isinstance(challenge, SaslAuthenticateResponse)
            _raise_auth_error(challenge)
            proof = client.on_challenge(challenge.auth_bytes)
            final = await _raw(sender, SaslAuthenticateRequest(auth_bytes=proof))
            assert isinstance(final, SaslAuthenticateResponse)
            _raise_auth_error(final)
            client.on_server_proof(final.auth_bytes)
        except auth.AuthenticationError as exc:
            raise AuthenticationError(str(exc)) from exc

    return authenticate


async def _raw(sender: RawSender, request: Request) -> Any:
    return await sender.request(
        request.API_KEY, request.API_VERSION, request.to_body(), request.RESPONSE.from_body
    )


def _raise_auth_error(response: SaslAuthenticateResponse) -> None:
    if response.error_code != ErrorCode.NONE:
        name = ErrorCode.from_code(response.error_code).name
        raise AuthenticationError(f"SaslAuthenticate failed: {name}")
