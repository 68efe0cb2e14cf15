"""The controller's request channels to the brokers.

`ControllerChannelManager` is Kafka's ControllerChannelManager: one channel per live broker,
each a FIFO queue and a sender task (Kafka's RequestSendThread) with a `Client` of its own that
holds the cluster credential (control-plane requests are refused without it).

* `send(broker_id, request, callback)` enqueues and returns at once, so a slow or dead broker
  never stalls the controller's event handling. A request for a broker that has no channel is
  logged and dropped, as Kafka does: the broker is not live, and the controller brings it up to
  date when it registers again.
* The sender sends one request at a time, in queue order, and waits for its response before the
  next, so a broker applies the controller's requests in the order they were decided (the
  per-broker order LeaderAndIsr -> UpdateMetadata -> StopReplica of a batch holds end to end).
* On a connection failure or a timeout it waits (exponential backoff with seeded jitter,
  runtime/net/backoff.py) and sends the same request again, for as long as the broker has a
  channel; `remove_broker()` stops the sender at once, wherever it is, and drops what is queued
  (each dropped request's callback then gets `(None, attempts)`, so its owner can forget it).
  A response with an error code is an answer, not a failure: it goes to the callback unretried.
* The callback gets `(response, attempts)`, where `attempts` counts how many times the request
  was handed to a connection (a failed connect sends nothing and does not count). With
  attempts > 1 an earlier copy may have been applied before its response was lost, and a
  stale-epoch answer (STALE_CONTROLLER_EPOCH, STALE_BROKER_EPOCH) to the later copy may be the
  broker fencing the *repeat* of a request it already applied; the controller counts such an
  answer as applied (`applied()`), and the broker-change events repair the case where it was
  not (a restarted broker registers again and receives its full state).

The queues are deliberately unbounded, as Kafka's are: the controller must neither block on a
dead broker (its event loop serves every other broker) nor drop a decided state change. Their
depth is bounded in practice by the controller's own event rate and is observable per broker
(`queue_size()`, `statistics()`) for metrics.

What one controller event sends (Kafka's ControllerBrokerRequestBatch) is put together by the
controller itself from its model (`Outbox` and `RequestSender` in actors/controller/outbox.py)
and handed to `send`.

Ownership and why no lock: everything runs on the event loop. The manager belongs to the
controller actor, which alone calls its methods; each channel's in-flight state belongs to
its sender task, and the queue is appended by the controller and popped by that task between
awaits, never concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from client.client import Client
from client.config import ClientConfig
from client.errors import ClientClosedError, ClientError, ConnectionFailedError
from runtime.clock import Clock
from runtime.net.backoff import ExponentialBackoff
from runtime.net.transport import Address, Transport
from wire.errors import ErrorCode
from wire.messages.base import Request, Response

logger = logging.getLogger(__name__)

ResponseCallback = Callable[[Response | None, int], None]
"""Called with (response, attempts) once the broker answered, or with (None, attempts) when
the request was dropped unanswered because its broker was removed."""

STALE_EPOCH_CODES: Final = frozenset(
    {ErrorCode.STALE_CONTROLLER_EPOCH, ErrorCode.STALE_BROKER_EPOCH}
)


def applied_code(error_code: int, attempts: int) -> bool:
    """Whether an error code (request-level or per partition) means the change is in effect:
    NONE, or a stale-epoch answer to a request the channel sent more than once."""
    code = ErrorCode.from_code(error_code)
    return code is ErrorCode.NONE or (attempts > 1 and code in STALE_EPOCH_CODES)


def applied(response: Response | None, attempts: int) -> bool:
    """`applied_code` for a response's request-level error code; a request dropped unanswered
    (None: its broker was removed) is not known to be applied."""
    return response is not None and applied_code(response.error_code, attempts)


@dataclass(frozen=True, slots=True)
class ChannelConfig:
    """Settings of the controller's channels (Kafka: controller.socket.timeout.ms and the
    inter-broker client's backoffs)."""

    request_timeout_ms: int = 30_000
    socket_connection_setup_timeout_ms: int = 10_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 5_000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1_000

    def client_config(self) -> ClientConfig:
        return ClientConfig(
            request_timeout_ms=self.request_timeout_ms,
            socket_connection_setup_timeout_ms=self.socket_connection_setup_timeout_ms,
            reconnect_backoff_ms=self.reconnect_backoff_ms,
            reconnect_backoff_max_ms=self.reconnect_backoff_max_ms,
            # One request at a time: the sender waits for each response anyway.
            max_in_flight_requests_per_connection=1,
        )


@dataclass(frozen=True, slots=True)
class ChannelStatistics:
    broker_id: int
    address: Address
    queued: int  # waiting, not counting the one in flight
    in_flight: bool
    answered: int  # requests that got a response
    resends: int  # sends beyond the first of a request
    failed_attempts: int  # connection failures and timeouts, counted or not in `attempts`


@dataclass(frozen=True, slots=True)
class _QueueItem:
    request: Request
    callback: ResponseCallback | None


class _BrokerChannel:
    """One broker's queue and sender task. Created and stopped only by the manager."""

    def __init__(
        self,
        broker_id: int,
        address: Address,
        client: Client,
        clock: Clock,
        config: ChannelConfig,
        rng: random.Random,
    ) -> None:
        self.broker_id = broker_id
        self.address = address
        self.client = client
        self._clock = clock
        self._config = config
        self._rng = rng
        self._backoff = ExponentialBackoff(
            initial_ms=config.retry_backoff_ms, max_ms=config.retry_backoff_max_ms
        )
        self.queue: deque[_QueueItem] = deque()
        self.in_flight: _QueueItem | None = None
        self.in_flight_sends = 0  # times the in-flight request may have reached the broker
        self.answered = 0
        self.resends = 0
        self.failed_attempts = 0
        self._wakeup = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"controller channel to broker {broker_id}"
        )

    def put(self, item: _QueueItem) -> None:
        self.queue.append(item)
        self._wakeup.set()

    def statistics(self) -> ChannelStatistics:
        return ChannelStatistics(
            broker_id=self.broker_id,
            address=self.address,
            queued=len(self.queue),
            in_flight=self.in_flight is not None,
            answered=self.answered,
            resends=self.resends,
            failed_attempts=self.failed_attempts,
        )

    async def stop(self) -> int:
        """Cancel the sender, close the client, and tell the callbacks of the requests dropped
        unanswered (response None); how many were dropped."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        dropped = [(self.in_flight, self.in_flight_sends)] if self.in_flight is not None else []
        dropped += [(item, 0) for item in self.queue]
        self.queue.clear()
        self.in_flight = None
        await self.client.close()
        for item, sends in dropped:
            self._answer(item, None, sends)
        return len(dropped)

    def _answer(self, item: _QueueItem, response: Response | None, sends: int) -> None:
        if item.callback is None:
            return
        try:
            item.callback(response, sends)
        except Exception:
            logger.exception("broker %d: response callback failed", self.broker_id)

    async def _run(self) -> None:
        while True:
            while not self.queue:
                self._wakeup.clear()
                await self._wakeup.wait()
            item = self.queue.popleft()
            self.in_flight = item
            self.in_flight_sends = 0
            try:
                response, attempts = await self._send_until_answered(item.request)
            except ClientClosedError:
                return
            except Exception:
                # A request that cannot even be encoded is a bug; losing the sender task to it
                # would silently cut the broker off, so log it and go on with the next one.
                logger.exception("broker %d: dropping unsendable %r", self.broker_id, item.request)
                self.in_flight = None
                continue
            self.in_flight = None
            self.answered += 1
            self._answer(item, response, attempts)

    async def _send_until_answered(self, request: Request) -> tuple[Response, int]:
        sends = 0
        failures = 0
        while True:
            # Should the broker be removed during this send, the request may have reached it.
            self.in_flight_sends = sends + 1
            try:
                response = await self.client.send(
                    self.address, request, timeout_ms=self._config.request_timeout_ms
                )
            except ClientClosedError:
                raise
            except ConnectionFailedError as exc:
                self.in_flight_sends = sends  # never connected: nothing was sent
                self._note_failure(request, exc)
            except ClientError as exc:
                sends += 1  # lost or timed out after sending: the broker may have applied it
                self._note_failure(request, exc)
            else:
                sends += 1
                self.resends += sends - 1
                return response, sends
            delay_ms = self._backoff.delay_ms(failures, self._rng)
            failures += 1
            await self._clock.sleep(delay_ms / 1000)

    def _note_failure(self, request: Request, exc: ClientError) -> None:
        self.failed_attempts += 1
        logger.warning(
            "controller channel to broker %d (%s): %s failed (%s); will resend",
            self.broker_id,
            self.address,
            type(request).__name__,
            exc,
        )


class ControllerChannelManager:
    def __init__(
        self,
        *,
        transport: Transport,
        clock: Clock,
        credential: bytes | None,
        config: ChannelConfig | None = None,
        client_id: str = "controller",
        seed: int = 0,
    ) -> None:
        self._transport = transport
        self._clock = clock
        self._credential = credential
        self.config = config or ChannelConfig()
        self._client_id = client_id
        self._rng = random.Random(seed)
        self._channels: dict[int, _BrokerChannel] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self.dropped_unknown_broker = 0
        self.dropped_on_removal = 0
        self._closed = False

    # -- brokers --------------------------------------------------------------------------------

    def add_broker(self, broker_id: int, address: Address) -> None:
        """Open a channel to a newly live broker (a no-op if it has one to the same address)."""
        if self._closed:
            raise RuntimeError("the channel manager is closed")
        channel = self._channels.get(broker_id)
        if channel is not None:
            if channel.address != address:
                # A broker that moved is a new incarnation: the controller removes the old
                # channel first (onBrokerFailure), so reaching this is a controller bug.
                raise ValueError(
                    f"broker {broker_id} already has a channel to {channel.address}, not {address}"
                )
            return
        seed = self._rng.getrandbits(64)
        client = Client(
            [address],
            transport=self._transport,
            clock=self._clock,
            client_id=self._client_id,
            config=self.config.client_config(),
            credential=self._credential,
            seed=seed,
        )
        self._channels[broker_id] = _BrokerChannel(
            broker_id, address, client, self._clock, self.config, random.Random(seed)
        )
        logger.info("controller channel to broker %d at %s opened", broker_id, address)

    def remove_broker(self, broker_id: int) -> None:
        """Stop the broker's sender now and drop its queued requests; closing its connection and
        calling the dropped requests' callbacks with (None, attempts) finish in the background
        (`wait_removed()`), never inside this call."""
        channel = self._channels.pop(broker_id, None)
        if channel is None:
            return
        task = asyncio.get_running_loop().create_task(
            self._stop_channel(channel), name=f"closing controller channel to {broker_id}"
        )
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _stop_channel(self, channel: _BrokerChannel) -> None:
        dropped = await channel.stop()
        self.dropped_on_removal += dropped
        logger.info(
            "controller channel to broker %d closed (%d requests dropped)",
            channel.broker_id,
            dropped,
        )

    async def wait_removed(self) -> None:
        """Wait until every removed channel has closed its connection."""
        while self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)

    @property
    def broker_ids(self) -> list[int]:
        return sorted(self._channels)

    # -- sending --------------------------------------------------------------------------------

    def send(
        self, broker_id: int, request: Request, callback: ResponseCallback | None = None
    ) -> None:
        """Queue `request` for the broker. Without a channel to it (not live), the request is
        logged, counted in `dropped_unknown_broker` and dropped; its callback is not called."""
        channel = self._channels.get(broker_id)
        if channel is None:
            self.dropped_unknown_broker += 1
            logger.warning(
                "no channel to broker %d (not live); dropping %s", broker_id, type(request).__name__
            )
            return
        channel.put(_QueueItem(request, callback))

    def has_broker(self, broker_id: int) -> bool:
        return broker_id in self._channels

    # -- observation ----------------------------------------------------------------------------

    def queue_size(self, broker_id: int) -> int:
        """Requests waiting for the broker, not counting the one in flight (Kafka's QueueSize)."""
        channel = self._channels.get(broker_id)
        return 0 if channel is None else len(channel.queue)

    def statistics(self) -> list[ChannelStatistics]:
        return [self._channels[b].statistics() for b in sorted(self._channels)]

    # -- shutdown -------------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop every channel; when it returns, no task or connection of the manager is left."""
        self._closed = True
        for broker_id in list(self._channels):
            self.remove_broker(broker_id)
        await self.wait_removed()
