"""One client connection to one broker: pipelining, correlation ids, timeouts, reconnects.

Requests are written in the order `request()` is called and the broker answers in that order
(Kafka's guarantee, and ketch's server keeps it), so the connection keeps its outstanding
requests in a FIFO. A response is matched to the *oldest* outstanding request, and its
correlation id must equal that request's: anything else means the byte stream is out of step,
which is unrecoverable, so the connection is reset.

Life cycle:

    DISCONNECTED --request()--> CONNECTING --connected (+ authenticated)--> READY
         ^                           |                                       |
         +------ connect failed -----+------ EOF / error / timeout ---------+
    any state --close()--> CLOSED (final)

* Connecting is lazy (the first `request()` opens the connection) and single-flight: concurrent
  callers share one connect task. Before each attempt the connection waits out its reconnect
  backoff: after the n-th consecutive failed attempt, `reconnect.backoff.ms * 2**n` (capped by
  `reconnect.backoff.max.ms`, +/-20% seeded jitter). A connection that was established and then
  lost waits the base backoff before its next attempt, so a crashing broker is not hammered.
* If an authenticator is given (the cluster credential of brokers and the controller), it runs
  on the fresh stream before any queued request is written.
* Every request has a deadline (request.timeout.ms by default) on the injected clock. A
  request that misses it fails with `RequestTimeoutError`, and the connection is reset: the
  late response would otherwise have to be read and dropped, and Kafka's client resets too.
  All other outstanding requests then fail with `ConnectionLostError` (retriable).
* At most `max.in.flight.requests.per.connection` requests are outstanding; later callers wait
  for a slot (backpressure toward the caller instead of an unbounded queue).
* `close()` fails every pending request with `ClientClosedError` and returns only once the
  reader task has ended and the stream is closed: no task outlives the connection.

The connection is used only from the event loop thread; asyncio's single thread is its lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

from client.config import ClientConfig
from client.errors import (
    AuthenticationError,
    ClientClosedError,
    ConnectionFailedError,
    ConnectionLostError,
    RequestTimeoutError,
    os_error_reason,
)
from client.gate import Gate
from runtime.clock import NS_PER_MS, Alarm, Clock
from runtime.net.backoff import ExponentialBackoff
from runtime.net.transport import Address, ConnectionClosedError, Stream, Transport
from wire.envelope import RequestEnvelope, decode_response, encode_request
from wire.errors import ProtocolError
from wire.frames import FrameDecoder, encode_frame

_log = logging.getLogger(__name__)

_R = TypeVar("_R")
_INT32_MAX = 2**31 - 1

BodyDecoder = Callable[[dict[str, Any]], _R]


class ConnectionState(Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    READY = "ready"
    CLOSED = "closed"


class RawSender:
    """What an authenticator may use: requests on the stream before it is READY."""

    def __init__(self, connection: BrokerConnection) -> None:
        self._connection = connection

    async def request(
        self, api_key: int, api_version: int, body: dict[str, Any], decode: BodyDecoder[_R]
    ) -> _R:
        connection = self._connection
        timeout_ms = connection._config.request_timeout_ms
        return await connection._exchange(api_key, api_version, body, decode, timeout_ms)


Authenticator = Callable[[RawSender], Awaitable[None]]


@dataclass(slots=True, eq=False)
class _Outstanding(Generic[_R]):
    correlation_id: int
    api_key: int
    decode: BodyDecoder[_R]
    future: asyncio.Future[_R]
    optional: bool = False  # the server may never answer (acks=0 produce)
    timeout_ms: float | None = None
    deadline_ns: int | None = None


def _ignore_body(body: dict[str, Any]) -> None:
    return None


def consume_outcome(task: asyncio.Task[Any]) -> None:
    """Done-callback marking a shared task's exception as retrieved (its waiters may be gone)."""
    if not task.cancelled():
        task.exception()


class BrokerConnection:
    def __init__(
        self,
        address: Address,
        *,
        transport: Transport,
        clock: Clock,
        config: ClientConfig,
        client_id: str | None,
        rng: random.Random,
        authenticator: Authenticator | None = None,
    ) -> None:
        self.address = address
        self._transport = transport
        self._clock = clock
        self._config = config
        self._client_id = client_id
        self._rng = rng
        self._authenticator = authenticator
        self._backoff = ExponentialBackoff(
            initial_ms=config.reconnect_backoff_ms, max_ms=config.reconnect_backoff_max_ms
        )
        self._state = ConnectionState.DISCONNECTED
        self._stream: Stream | None = None
        self._reader: asyncio.Task[None] | None = None
        self._connect_task: asyncio.Task[Stream] | None = None
        self._outstanding: deque[_Outstanding[Any]] = deque()
        self._write_gate = Gate(1)
        self._slots = Gate(config.max_in_flight_requests_per_connection)
        # One alarm per connection, at the earliest deadline outstanding, instead of a timer
        # per request: with equal timeouts a new request never needs to re-arm it.
        self._timeout_alarm: Alarm | None = None
        self._timeout_alarm_ns: int | None = None
        self._next_correlation_id = 0
        self._failed_attempts = 0
        self._next_attempt_ns = 0
        self._generation = 0  # bumped per stream, so stale callbacks can tell they are stale

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def in_flight(self) -> int:
        return len(self._outstanding)

    @property
    def failed_attempts(self) -> int:
        return self._failed_attempts

    def ms_until_connect_allowed(self) -> float:
        return max(0, self._next_attempt_ns - self._clock.monotonic_ns()) / NS_PER_MS

    async def request(
        self,
        api_key: int,
        api_version: int,
        body: dict[str, Any],
        decode: BodyDecoder[_R],
        *,
        timeout_ms: float | None = None,
    ) -> _R:
        """Send one request and wait for its response, decoded by `decode(body)`."""
        if self._state is not ConnectionState.READY:
            await self._ready()
        timeout = self._config.request_timeout_ms if timeout_ms is None else timeout_ms
        if not self._slots.try_enter():
            await self._slots.enter()
        try:
            return await self._exchange(api_key, api_version, body, decode, timeout)
        finally:
            self._slots.leave()

    async def send_only(self, api_key: int, api_version: int, body: dict[str, Any]) -> None:
        """Send a request whose response nobody waits for (a produce with acks=0).

        Kafka's broker sends no response to an acks=0 produce. The request still takes its
        place in the FIFO, marked as maybe-unanswered: a later response with a newer
        correlation id skips it, and an answer that does come is dropped. So the connection
        stays in step whether or not the server answers.
        """
        await self._ready()
        stream = self._current_stream()
        generation = self._generation
        correlation_id = self._take_correlation_id()
        frame = self._frame(api_key, api_version, correlation_id, body)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = _Outstanding(correlation_id, api_key, _ignore_body, future, optional=True)
        await self._register_and_write(stream, generation, entry, frame)

    async def close(self) -> None:
        if self._state is ConnectionState.CLOSED:
            return
        self._fail_stream(ClientClosedError(f"connection to {self.address} closed"))
        self._state = ConnectionState.CLOSED
        connect, self._connect_task = self._connect_task, None
        if connect is not None:
            connect.cancel()
            with contextlib.suppress(BaseException):
                await connect
        await self._drain_reader()

    # ---------------------------------------------------------------------------------------
    # Connecting

    async def _ready(self) -> None:
        if self._state is ConnectionState.READY:
            return
        if self._state is ConnectionState.CLOSED:
            raise ClientClosedError(f"connection to {self.address} is closed")
        if self._connect_task is None:
            self._connect_task = asyncio.create_task(
                self._connect(), name=f"connect {self.address}"
            )
            # Every waiter may have been cancelled; the outcome is still consumed here.
            self._connect_task.add_done_callback(consume_outcome)
        task = self._connect_task
        # Shielded: one caller giving up must not cancel the attempt the others wait on.
        await asyncio.shield(task)

    async def _connect(self) -> Stream:
        self._state = ConnectionState.CONNECTING
        try:
            wait_ms = self.ms_until_connect_allowed()
            if wait_ms > 0:
                await self._clock.sleep(wait_ms / 1000)
            await self._drain_reader()  # the previous stream's reader, if any, must be gone
            setup_timeout_ms = self._config.socket_connection_setup_timeout_ms
            try:
                stream = await self._transport.connect(
                    self.address, timeout_s=setup_timeout_ms / 1000
                )
            except (OSError, TimeoutError) as exc:
                self._attempt_failed()
                reason = os_error_reason(exc, timeout_ms=setup_timeout_ms)
                raise ConnectionFailedError(f"cannot connect to {self.address}: {reason}") from exc
            self._start_stream(stream)
            if self._authenticator is not None:
                await self._authenticate()
            self._failed_attempts = 0
            self._state = ConnectionState.READY
            return stream
        finally:
            self._connect_task = None
            if self._state is ConnectionState.CONNECTING:
                self._state = ConnectionState.DISCONNECTED

    async def _authenticate(self) -> None:
        assert self._authenticator is not None
        try:
            await self._authenticator(RawSender(self))
        except AuthenticationError:
            self._attempt_failed()
            self._fail_stream(ConnectionLostError(f"authentication with {self.address} failed"))
            raise
        except (ConnectionLostError, RequestTimeoutError, ProtocolError) as exc:
            self._attempt_failed()
            self._fail_stream(ConnectionLostError(f"authentication with {self.address} broke"))
            raise ConnectionFailedError(f"authentication with {self.address}: {exc}") from exc

    def _attempt_failed(self) -> None:
        delay_ms = self._backoff.delay_ms(self._failed_attempts, self._rng)
        self._failed_attempts += 1
        self._next_attempt_ns = self._clock.monotonic_ns() + round(delay_ms * NS_PER_MS)

    def _start_stream(self, stream: Stream) -> None:
        self._generation += 1
        self._stream = stream
        self._reader = asyncio.create_task(
            self._read_loop(stream, self._generation), name=f"read {self.address}"
        )

    def _current_stream(self) -> Stream:
        stream = self._stream
        if stream is None:
            raise ConnectionLostError(f"connection to {self.address} was lost")
        return stream

    async def _drain_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    # ---------------------------------------------------------------------------------------
    # Requests and responses

    def _take_correlation_id(self) -> int:
        correlation_id = self._next_correlation_id
        self._next_correlation_id = 0 if correlation_id == _INT32_MAX else correlation_id + 1
        return correlation_id

    def _frame(
        self, api_key: int, api_version: int, correlation_id: int, body: dict[str, Any]
    ) -> bytes:
        envelope = RequestEnvelope(api_key, api_version, correlation_id, self._client_id, body)
        return encode_frame(encode_request(envelope))

    async def _exchange(
        self,
        api_key: int,
        api_version: int,
        body: dict[str, Any],
        decode: BodyDecoder[_R],
        timeout_ms: float | None,
    ) -> _R:
        stream = self._current_stream()
        generation = self._generation
        correlation_id = self._take_correlation_id()
        frame = self._frame(api_key, api_version, correlation_id, body)
        future: asyncio.Future[_R] = asyncio.get_running_loop().create_future()
        entry = _Outstanding(correlation_id, api_key, decode, future, timeout_ms=timeout_ms)
        try:
            await self._register_and_write(stream, generation, entry, frame)
        except BaseException:
            # A failed write reset the stream, which failed the future too; the error is
            # raised here, so mark the future's copy as seen.
            if future.done() and not future.cancelled():
                future.exception()
            raise
        return await future

    async def _register_and_write(
        self, stream: Stream, generation: int, entry: _Outstanding[Any], frame: bytes
    ) -> None:
        """Append `entry` to the FIFO and write its frame, as one step no other write splits."""
        if not self._write_gate.try_enter():
            await self._write_gate.enter()
        try:
            if generation != self._generation or self._stream is None:
                raise ConnectionLostError(f"connection to {self.address} was lost")
            if entry.timeout_ms is not None:
                deadline_ns = self._clock.monotonic_ns() + round(entry.timeout_ms * NS_PER_MS)
                entry.deadline_ns = deadline_ns
                self._arm_timeout(deadline_ns)
            # Registered before the bytes leave, so a fast response always finds its request.
            self._outstanding.append(entry)
            await self._write(stream, frame)
        finally:
            self._write_gate.leave()

    def _arm_timeout(self, deadline_ns: int) -> None:
        if self._timeout_alarm_ns is not None and self._timeout_alarm_ns <= deadline_ns:
            return
        if self._timeout_alarm is not None:
            self._timeout_alarm.cancel()
        generation = self._generation
        self._timeout_alarm = self._clock.call_at_ns(
            deadline_ns, lambda: self._check_timeouts(generation)
        )
        self._timeout_alarm_ns = deadline_ns

    def _disarm_timeout(self) -> None:
        if self._timeout_alarm is not None:
            self._timeout_alarm.cancel()
        self._timeout_alarm = None
        self._timeout_alarm_ns = None

    def _check_timeouts(self, generation: int) -> None:
        self._timeout_alarm = None
        self._timeout_alarm_ns = None
        if generation != self._generation:
            return
        now_ns = self._clock.monotonic_ns()
        waiting = [
            e for e in self._outstanding if e.deadline_ns is not None and not e.future.done()
        ]
        expired = [e for e in waiting if e.deadline_ns is not None and e.deadline_ns <= now_ns]
        for entry in expired:
            entry.future.set_exception(
                RequestTimeoutError(
                    f"request (api key {entry.api_key}) to {self.address} got no response "
                    f"in {entry.timeout_ms} ms"
                )
            )
        if expired:
            self._fail_stream(ConnectionLostError(f"connection to {self.address} reset: timeout"))
            return
        deadlines = [e.deadline_ns for e in waiting if e.deadline_ns is not None]
        if deadlines:
            self._arm_timeout(min(deadlines))

    async def _write(self, stream: Stream, frame: bytes) -> None:
        try:
            await stream.send(frame)
        except ConnectionClosedError as exc:
            lost = ConnectionLostError(f"connection to {self.address} lost while sending")
            self._fail_stream(lost)
            raise lost from exc
        except asyncio.CancelledError:
            # Part of the frame may be on the wire: the stream's framing is no longer known.
            self._fail_stream(ConnectionLostError(f"send to {self.address} was cancelled"))
            raise

    async def _read_loop(self, stream: Stream, generation: int) -> None:
        decoder = FrameDecoder(self._config.max_response_bytes)
        error: Exception
        try:
            while True:
                # Straight into the frame being assembled (a fetch answer's records uncopied).
                received = await stream.receive_into(decoder.receive_buffer())
                if not received:
                    error = ConnectionLostError(f"connection to {self.address} closed by peer")
                    break
                decoder.filled(received)
                while (payload := decoder.next_frame()) is not None:
                    self._dispatch(payload)
        except ProtocolError as exc:
            _log.warning("bad response from %s: %s; resetting the connection", self.address, exc)
            error = ConnectionLostError(f"bad response from {self.address}: {exc}")
        except Exception as exc:
            # A transport bug must not leave callers waiting forever on a dead reader.
            _log.exception("reader of %s failed", self.address)
            reason = os_error_reason(exc)
            error = ConnectionLostError(f"connection to {self.address} failed: {reason}")
        finally:
            # Runs on cancellation too: the stream must not outlive its reader.
            with contextlib.suppress(Exception):
                await stream.aclose()
        if generation == self._generation:
            self._reader = None  # ended by itself: nothing to cancel or await later
            self._fail_stream(error)

    def _dispatch(self, payload: memoryview) -> None:
        envelope = decode_response(payload)
        if not self._outstanding:
            raise ProtocolError(f"response {envelope.correlation_id} with no request outstanding")
        outstanding = self._outstanding
        while outstanding[0].optional and envelope.correlation_id != outstanding[0].correlation_id:
            # The server did not answer that one (as Kafka does for acks=0): skip it.
            skipped = outstanding.popleft()
            if not skipped.future.done():
                skipped.future.set_result(None)
            if not outstanding:
                raise ProtocolError(f"response {envelope.correlation_id} matches no request")
        if envelope.correlation_id != outstanding[0].correlation_id:
            # Left in the FIFO, so the reset fails it along with everything else outstanding.
            raise ProtocolError(
                f"response correlation id {envelope.correlation_id}, "
                f"expected {outstanding[0].correlation_id}"
            )
        entry = outstanding.popleft()
        if entry.future.done():
            return  # the caller gave up (cancelled); the response is dropped
        try:
            entry.future.set_result(entry.decode(envelope.body))
        except Exception as exc:
            # A body that does not decode fails its own request; the framing is still intact.
            entry.future.set_exception(exc)

    def _fail_stream(self, error: Exception) -> None:
        """Drop the current stream: fail what is outstanding and arrange the reconnect backoff.

        Synchronous, so timeouts (alarm callbacks) can call it. The reader task owns the
        stream and closes it when cancelled here, or has already closed it if it ended itself.
        """
        if self._stream is None:
            return
        self._stream = None
        self._generation += 1
        self._disarm_timeout()
        if self._state is not ConnectionState.CLOSED:
            self._state = ConnectionState.DISCONNECTED
        if self._reader is not None and self._reader is not asyncio.current_task():
            self._reader.cancel()
        outstanding, self._outstanding = self._outstanding, deque()
        for entry in outstanding:
            if entry.future.done():
                continue
            if entry.optional:
                entry.future.set_result(None)  # nobody waits for it; it was written
            else:
                entry.future.set_exception(error)
        # Lost after being established: wait the base backoff before reconnecting.
        if self._failed_attempts == 0:
            delay_ms = self._backoff.delay_ms(0, self._rng)
            self._next_attempt_ns = self._clock.monotonic_ns() + round(delay_ms * NS_PER_MS)
