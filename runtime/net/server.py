"""The request server: connections in, typed requests to handlers, responses out.

One `Server` serves one listener of a `Transport` (TCP or the in-memory network) in one
*dialect* (runtime/net/dialect.py): ketch's native protocol (runtime/net/native_dialect.py, the
default) or Kafka's (runtime/net/kafka_dialect.py). The dialect turns a frame into a `Call`
(handler, typed request) or a ready answer, and frames the handler's response; everything else
here is the same for both.
Both protocols frame requests with a 4-byte big-endian length. Per connection:

* **One reader task** (the task the transport starts for the stream) reads bytes, cuts frames
  (`wire.frames`), has the dialect decode each, and dispatches each request to its handler in a
  task of its own, so pipelined requests run concurrently.
* **Responses leave in request order**, as Kafka guarantees: each request owns a slot in a FIFO;
  whichever task completes the slot at the head writes every consecutive finished slot in one
  send, so no extra writer task sits on the hot path and a slow request holds back only the
  responses behind it. A lone request is answered at once; when more are outstanding, the write
  is deferred by one loop iteration so a pipelined burst leaves in one send (one syscall).
* **Backpressure by not reading**: with `queued.max.requests` responses outstanding, the reader
  stops taking frames and stops calling `receive()`; the transport then stops reading the socket
  and TCP's window pushes back on the client.
* **Memory for requests** comes from a pool of queued.max.request.bytes shared by a node's
  servers (runtime/net/request_pool.py): once a frame's length is known, its size is reserved
  before its body is read, and while the pool is short the connection is not read at all; the
  reservation is given back when the handler has answered. Connections beyond max.connections,
  or beyond max.connections.per.ip from one address, are closed as they arrive
  (runtime/net/server_config.py has the settings).
* **Throttled connections** (client quotas, KIP-219): after a handler's answer carries
  `throttle_time_ms` > 0, the connection is muted: no further request is read from it until
  that time has passed on the injected clock (`_Connection.mute`).
* **Idle connections** (no bytes received and nothing outstanding for connections.max.idle.ms on
  the injected clock) are closed. One alarm per idle period, re-armed lazily, so a busy
  connection costs no timer work per request.
* A frame over socket.request.max.bytes, a garbled length or an undecodable envelope closes that
  connection only (so does a dialect that fails to admit a frame). A well-framed native request
  the server cannot serve is answered instead:

      unknown API key / version, or no handler for it   UNSUPPORTED_VERSION (bare error body)
      body that does not match the request's fields     INVALID_REQUEST
      control-plane API on an unauthenticated conn.     CLUSTER_AUTHORIZATION_FAILED
      handler raised (or returned something unencodable) UNKNOWN_SERVER_ERROR

  in the response's top-level `error_code`; the handler is not called for the first three.

SaslHandshake (17) and SaslAuthenticate (36) are answered by the native dialect, synchronously in
the reader, so a request pipelined behind the final SaslAuthenticate already sees the connection
authenticated (see `runtime.net.auth` for the exchange); the Kafka dialect does the same for SASL
on a SASL listener (runtime/net/sasl.py). A dialect may cap the next frame below
socket.request.max.bytes (`max_frame_bytes()`, asked after each frame it admits: the Kafka
listener's sasl.server.max.receive.size before authentication), and may end a connection after
one last answer (`CloseAfterAnswer`: a refused login is answered, then closed). ApiVersions (18)
is answered from the registered handlers unless a handler for it is given.

An optional request observer (`request_observer(request, elapsed_ns)`, the broker's latency
histograms) is called once per request a handler served, when its response is ready: elapsed is
from the request being cut from the stream to its response frame being encoded, on the server's
clock (Kafka's TotalTimeMs, less the time the response then waits for its turn to be written).
It is the only per-request cost of metrics, so it must stay a few hundred nanoseconds.

`stop()` is graceful: stop accepting, stop reading new requests, wait (bounded by
server.shutdown.timeout.ms on the clock) for outstanding responses to be written, then close
every connection and cancel whatever handler is still running.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from runtime.clock import NS_PER_MS, Alarm, Clock
from runtime.net.auth import ServerAuthenticator
from runtime.net.dialect import (
    Answer,
    Call,
    CloseAfterAnswer,
    DialectFactory,
    Handler,
    RequestContext,
)
from runtime.net.native_dialect import NativeDialect
from runtime.net.request_pool import RequestMemoryPool
from runtime.net.server_config import ServerConfig as ServerConfig  # re-exported: its old home
from runtime.net.transport import Address, Buffer, Listener, Stream, Transport
from wire.errors import ErrorCode, ProtocolError
from wire.frames import LENGTH_PREFIX_BYTES, FrameDecoder
from wire.messages import (
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    ApiVersionsResponseKey,
    Request,
    Response,
    supported_versions,
)

_log = logging.getLogger(__name__)


RequestObserver = Callable[[Request, int], None]
"""`observer(request, elapsed_ns)`: called on the loop once a handler's response is ready."""


class _Slot:
    """One request's place in its connection's response order."""

    __slots__ = ("frame",)

    def __init__(self, frame: Answer | None = None) -> None:
        self.frame = frame  # the encoded response frame once it is known


class _Connection:
    """State of one accepted stream; mutated only by its reader and its request tasks."""

    def __init__(self, server: Server, stream: Stream) -> None:
        self.server = server
        self.stream = stream
        self.dialect = server.dialect(server, stream)
        self.decoder = FrameDecoder(server.config.socket_request_max_bytes)
        self.pending: deque[_Slot] = deque()
        self.flushing = False
        self.flush_scheduled = False
        self.closed = False
        self.last_active_ns = server.clock.monotonic_ns()
        self.idle_alarm: Alarm | None = None
        self.slot_waiter: asyncio.Future[None] | None = None
        self.drained_waiters: list[asyncio.Future[None]] = []
        self.host = _host_of(stream.peer)
        # Pool memory reserved for the frame being received (its body still arriving), and the
        # wait for it while the pool is short.
        self.reserved = 0
        self.reserving: asyncio.Future[None] | None = None
        # Client quotas (KIP-219): after an answer with throttle_time_ms > 0 the connection is
        # not read until then (Kafka mutes the channel), so a client that ignores the throttle
        # time is held back all the same. 0: not muted.
        self.muted_until_ns = 0
        self.unmute_waiter: asyncio.Future[None] | None = None
        # The dialect's own frame limit, if it has one (see runtime/net/dialect.py's Dialect).
        self.frame_limit: Callable[[], int | None] | None = getattr(
            self.dialect, "max_frame_bytes", None
        )
        self.apply_frame_limit()

    # reading

    async def run(self) -> None:
        self.arm_idle_alarm()
        try:
            await self.read_loop()
        except CloseAfterAnswer as exc:
            _log.info("closing connection from %s after answering: %s", self.stream.peer, exc)
            await self.answer_last(exc.answer)
        except ProtocolError as exc:
            # Framing or envelope is broken: nothing after this point can be trusted.
            _log.warning("closing connection from %s: %s", self.stream.peer, exc)
        except OSError as exc:
            _log.debug("connection from %s broke: %s", self.stream.peer, exc)
        except Exception:
            # A dialect bug on one request: that connection is lost, never the server.
            _log.exception(
                "closing connection from %s: request could not be admitted", self.stream.peer
            )
        finally:
            await self.close()

    async def read_loop(self) -> None:
        server = self.server
        cap = server.config.queued_max_requests
        decoder = self.decoder
        stream = self.stream
        while True:
            if self.muted_until_ns and not await self.wait_unmuted():
                return
            # A frame's memory before its body: while the pool is short this connection is not
            # read. (reserve() is False when the connection was closed while it waited.)
            announced = 0 if self.reserved else decoder.incomplete_frame_size()
            if announced and not await self.reserve(announced):
                return
            # Straight into the frame being assembled: a request's records are never copied.
            received = await stream.receive_into(decoder.receive_buffer())
            if not received:
                return
            self.last_active_ns = server.clock.monotonic_ns()
            decoder.filled(received)
            while True:
                while len(self.pending) >= cap:
                    await self.wait_for_slot()
                    if self.closed:
                        return
                if server.stopping:
                    # No new requests once stopping; answer what is outstanding, then close.
                    await self.wait_drained()
                    return
                # A throttled client's next request waits out its throttle time here.
                if self.muted_until_ns and not await self.wait_unmuted():
                    return
                frame = decoder.next_frame()
                if frame is None:
                    break
                self.dispatch(frame)
            if self.pending and self.pending[0].frame is not None and not self.flushing:
                await self.flush()

    async def answer_last(self, answer: Answer) -> None:
        """Write `answer` behind every answer owed before it (the reader reads no more)."""
        self.pending.append(_Slot(answer))
        if not self.flushing and self.pending[0].frame is not None:
            await self.flush()
        await self.wait_drained()

    def apply_frame_limit(self) -> None:
        if self.frame_limit is None:
            return
        cap = self.server.config.socket_request_max_bytes
        limit = self.frame_limit()
        self.decoder.max_frame_bytes = cap if limit is None else min(cap, limit)

    def mute(self, throttle_time_ms: int) -> None:
        """Read no further request until `throttle_time_ms` from now have passed on the clock
        (KIP-219; Kafka mutes from the moment the throttled answer is sent, here from the
        moment it is ready, which is the same instant unless writes are backed up). Requests
        of a pipelined burst that were already dispatched are not held back: Kafka reads one
        request at a time per connection, ketch serves a burst concurrently."""
        until_ns = self.server.clock.monotonic_ns() + throttle_time_ms * NS_PER_MS
        self.muted_until_ns = max(self.muted_until_ns, until_ns)

    async def wait_unmuted(self) -> bool:
        """Wait until the mute has passed; False when close() ended the wait."""
        clock = self.server.clock
        while not self.closed and clock.monotonic_ns() < self.muted_until_ns:
            waiter = self.unmute_waiter = asyncio.get_running_loop().create_future()

            def wake(waiter: asyncio.Future[None] = waiter) -> None:
                if not waiter.done():
                    waiter.set_result(None)

            alarm = clock.call_at_ns(self.muted_until_ns, wake)
            try:
                await waiter
            finally:
                alarm.cancel()
                self.unmute_waiter = None
        self.muted_until_ns = 0
        return not self.closed

    async def reserve(self, size: int) -> bool:
        """Reserve pool memory for the frame being received; False when close() ended the
        wait (a muted connection is not being read, so only close() can end it early)."""
        pool = self.server.request_pool
        waiting = asyncio.ensure_future(pool.reserve(size))
        self.reserving = waiting
        try:
            await asyncio.wait([waiting])
        except asyncio.CancelledError:
            if waiting.done() and not waiting.cancelled() and waiting.exception() is None:
                pool.release(size)  # granted just as this reader was cancelled
            waiting.cancel()
            raise
        finally:
            self.reserving = None
        if waiting.cancelled():
            return False
        waiting.result()  # a frame larger than the pool (the config forbids it) raises here
        self.reserved = size
        return True

    async def wait_for_slot(self) -> None:
        if self.pending[0].frame is not None and not self.flushing:
            await self.flush()
            return
        self.slot_waiter = asyncio.get_running_loop().create_future()
        try:
            await self.slot_waiter
        finally:
            self.slot_waiter = None

    def dispatch(self, frame: memoryview) -> None:
        server = self.server
        held = LENGTH_PREFIX_BYTES + frame.nbytes
        if self.reserved:
            self.reserved = 0  # the frame it was reserved for is this one
        else:
            server.request_pool.charge(held)  # it arrived whole within one read
        try:
            admitted = self.dialect.admit(frame)
        except BaseException:
            server.request_pool.release(held)
            raise
        self.apply_frame_limit()
        if not isinstance(admitted, Call):
            server.request_pool.release(held)
            self.pending.append(_Slot(admitted))
            return
        slot = _Slot()
        self.pending.append(slot)
        # The clock is read only for an observer: without metrics a request pays nothing.
        received_ns = server.clock.monotonic_ns() if server.request_observer is not None else 0
        server.spawn(self.serve(slot, admitted, received_ns, held))

    # serving and writing

    async def serve(self, slot: _Slot, call: Call, received_ns: int, held: int) -> None:
        server = self.server
        try:
            # None: the request gets no response (Kafka's Produce with acks=0); its slot still
            # keeps its place so later responses are not written ahead of earlier ones.
            response = await call.handler(call.request, call.context)
            frame = self.dialect.encode(call, response)
            if response is not None and response.throttle_time_ms > 0:
                self.mute(response.throttle_time_ms)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # stop() cancelled this task: the connection is closing anyway
            # Something the handler awaited was cancelled, not this task; answer rather than
            # leave a hole that would hold back every later response on the connection.
            frame = self.failure_frame(call)
        except Exception:
            frame = self.failure_frame(call)
        finally:
            server.request_pool.release(held)
        if server.request_observer is not None:
            server.request_observer(call.request, server.clock.monotonic_ns() - received_ns)
        slot.frame = frame
        pending = self.pending
        if self.flushing or not pending or pending[0] is not slot:
            return  # the running flush, or the request ahead of this one, will write it
        if len(pending) == 1:
            await self.flush()  # nothing to coalesce with: answer at once
        elif not self.flush_scheduled:
            # The rest of a pipelined burst is likely finishing in this same loop iteration; a
            # flush queued behind those tasks writes them all with one send (one syscall).
            self.flush_scheduled = True
            self.server.spawn(self.deferred_flush())

    def failure_frame(self, call: Call) -> Answer:
        # A handler bug must cost one error response, never the connection or the server.
        context = call.context
        _log.exception(
            "handler for API %d failed (request %d from %s)",
            context.api_key,
            context.correlation_id,
            context.peer,
        )
        try:
            return self.dialect.error(call, ErrorCode.UNKNOWN_SERVER_ERROR)
        except Exception:
            # Not even an error answer can be framed: the request keeps its place in the order
            # with no answer, and the connection is closed (the client retries elsewhere).
            _log.exception(
                "cannot answer request %d; closing the connection", context.correlation_id
            )
            self.server.spawn(self.close())
            return b""

    async def deferred_flush(self) -> None:
        self.flush_scheduled = False
        if not self.flushing:
            await self.flush()

    async def flush(self) -> None:
        """Write every finished response at the head of the queue, in order, in one send."""
        assert not self.flushing
        self.flushing = True
        pending = self.pending
        try:
            while pending and pending[0].frame is not None:
                buffers: list[Buffer] = []
                while pending and (frame := pending[0].frame) is not None:
                    if isinstance(frame, bytes):
                        if frame:
                            buffers.append(frame)
                    else:
                        buffers.extend(frame)
                    pending.popleft()
                self.wake_reader()
                if not buffers or self.closed:
                    continue
                if len(buffers) == 1 and isinstance(buffers[0], bytes):
                    await self.stream.send(buffers[0])
                else:
                    # A pipelined burst, or an answer in pieces: one vectored write, no join.
                    await self.stream.send_buffers(buffers)
        except OSError as exc:
            _log.debug("cannot answer %s: %s", self.stream.peer, exc)
            self.pending.clear()
            self.wake_reader()
        finally:
            self.flushing = False
        self.last_active_ns = self.server.clock.monotonic_ns()
        if not pending:
            self.wake_drained()

    def wake_reader(self) -> None:
        if self.slot_waiter is not None and not self.slot_waiter.done():
            self.slot_waiter.set_result(None)

    def wake_drained(self) -> None:
        waiters, self.drained_waiters = self.drained_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_drained(self) -> None:
        while self.pending and not self.closed:
            waiter = asyncio.get_running_loop().create_future()
            self.drained_waiters.append(waiter)
            await waiter

    # idle timeout and close

    def arm_idle_alarm(self) -> None:
        idle_ns = self.server.config.connections_max_idle_ms * NS_PER_MS
        self.idle_alarm = self.server.clock.call_at_ns(self.last_active_ns + idle_ns, self.on_idle)

    def on_idle(self) -> None:
        self.idle_alarm = None
        if self.closed:
            return
        idle_ns = self.server.config.connections_max_idle_ms * NS_PER_MS
        if not self.pending and self.server.clock.monotonic_ns() - self.last_active_ns >= idle_ns:
            _log.info("closing idle connection from %s", self.stream.peer)
            self.server.spawn(self.close())
        else:
            self.arm_idle_alarm()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.reserving is not None:
            self.reserving.cancel()  # a muted reader: nothing else would wake it
        if self.unmute_waiter is not None and not self.unmute_waiter.done():
            self.unmute_waiter.set_result(None)  # a throttled reader, likewise
        if self.reserved:
            self.server.request_pool.release(self.reserved)
            self.reserved = 0
        if self.idle_alarm is not None:
            self.idle_alarm.cancel()
            self.idle_alarm = None
        self.wake_reader()
        self.wake_drained()
        self.server.forget(self)
        try:
            await self.stream.aclose()
        except OSError as exc:
            _log.debug("closing %s: %s", self.stream.peer, exc)


class Server:
    """Serves `handlers` (by API key) on `address` of `transport`; `start()` / `stop()`."""

    def __init__(
        self,
        transport: Transport,
        address: Address,
        handlers: Mapping[int, Handler],
        *,
        clock: Clock,
        config: ServerConfig | None = None,
        cluster_secret: bytes | None = None,
        request_observer: RequestObserver | None = None,
        dialect: DialectFactory = NativeDialect,
        listener: str = "native",
        request_pool: RequestMemoryPool | None = None,
    ) -> None:
        self.transport = transport
        self.requested_address = address
        self.handlers: dict[int, Handler] = dict(handlers)
        self.clock = clock
        self.config = config or ServerConfig()
        # None: no connection can become a cluster member (control-plane APIs always refused).
        self.cluster_secret = cluster_secret
        self.request_observer = request_observer
        self.dialect = dialect
        self.listener = listener  # the name handlers see in RequestContext.listener
        # Shared by a node's servers (one queued.max.request.bytes for all its listeners).
        self.request_pool = request_pool or RequestMemoryPool(self.config.queued_max_request_bytes)
        self._per_ip_limits = self.config.connection_limits()
        self._per_host: dict[str, int] = {}
        if cluster_secret is not None:
            ServerAuthenticator(cluster_secret)  # rejects an unusable secret now, not per client
        if ApiKey.API_VERSIONS not in self.handlers:
            self.handlers[ApiKey.API_VERSIONS] = self._api_versions
        self.stopping = False
        self._listener: Listener | None = None
        # Insertion-ordered (dicts as sets): the order they are closed or woken in is part of a
        # run, and a seeded simulation must replay it (a set of objects orders them by address).
        self._connections: dict[_Connection, None] = {}
        self._tasks: dict[asyncio.Task[None], None] = {}
        self._readers: dict[asyncio.Future[None], None] = {}

    @property
    def address(self) -> Address:
        """The bound address (with the real port when port 0 was asked for)."""
        if self._listener is None:
            raise RuntimeError("server not started")
        return self._listener.address

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        if self._listener is not None:
            raise RuntimeError("server already started")
        self._listener = await self.transport.listen(self.requested_address, self._on_stream)

    async def stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self._listener is not None:
            await self._listener.aclose()
        connections = list(self._connections)
        timeout_ms = self.config.server_shutdown_timeout_ms
        drained = [asyncio.ensure_future(c.wait_drained()) for c in connections]
        if drained:
            await _wait_on_clock(self.clock, drained, timeout_ms)
        # Concurrently: a peer that stopped reading makes its close wait for the flush bound.
        await asyncio.gather(*(connection.close() for connection in connections))
        # Closed streams wake their readers with b"", so these finish promptly.
        await asyncio.gather(*self._readers, return_exceptions=True)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def handler_for(self, api_key: int) -> Handler | None:
        return self.handlers.get(api_key)

    def spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks[task] = None
        task.add_done_callback(lambda done: self._tasks.pop(done, None))

    def forget(self, connection: _Connection) -> None:
        if self._connections.pop(connection, False) is None:
            count = self._per_host[connection.host] - 1
            if count:
                self._per_host[connection.host] = count
            else:
                del self._per_host[connection.host]

    async def _on_stream(self, stream: Stream) -> None:
        host = _host_of(stream.peer)
        per_ip = self._per_ip_limits.get(host, self.config.max_connections_per_ip)
        refusal = None
        if self.stopping:
            refusal = "the server is stopping"
        elif len(self._connections) >= self.config.max_connections:
            refusal = f"max.connections ({self.config.max_connections}) reached"
        elif self._per_host.get(host, 0) >= per_ip:
            refusal = f"max.connections.per.ip ({per_ip}) reached for {host}"
        if refusal is not None:
            _log.warning("refusing connection from %s: %s", stream.peer, refusal)
            await stream.aclose()
            return
        connection = _Connection(self, stream)
        self._connections[connection] = None
        self._per_host[host] = self._per_host.get(host, 0) + 1
        done = asyncio.get_running_loop().create_future()
        self._readers[done] = None
        try:
            await connection.run()
        finally:
            self._readers.pop(done, None)
            done.set_result(None)

    async def _api_versions(self, request: ApiVersionsRequest, ctx: RequestContext) -> Response:
        return api_versions_response(self.handlers.keys())


def _host_of(peer: str) -> str:
    """The address part of a peer name (`127.0.0.1:5555` -> `127.0.0.1`, `[::1]:5555` ->
    `::1`); a name without a port (an in-memory node) is its own host."""
    host, sep, port = peer.rpartition(":")
    if not sep or not port.isdigit():
        return peer
    return host.strip("[]")


def api_versions_response(served_keys: Any) -> ApiVersionsResponse:
    """ApiVersions answer: the versions of every API this server has a handler for, plus SASL."""
    keys = {int(k) for k in served_keys} | {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
    return ApiVersionsResponse(
        api_keys=[
            ApiVersionsResponseKey(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in supported_versions().items()
            if key in keys
        ]
    )


async def _wait_on_clock(
    clock: Clock, futures: Sequence[asyncio.Future[None]], timeout_ms: int
) -> None:
    """Wait for all `futures` or until `timeout_ms` pass on `clock`, whichever is first."""
    expired: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def expire() -> None:
        if not expired.done():
            expired.set_result(None)

    alarm = clock.call_at_ns(clock.monotonic_ns() + timeout_ms * NS_PER_MS, expire)
    everything: asyncio.Future[list[Any]] = asyncio.gather(*futures, return_exceptions=True)
    waited: list[asyncio.Future[Any]] = [everything, expired]
    try:
        await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
    finally:
        alarm.cancel()
        if not everything.done():
            everything.cancel()
            await asyncio.gather(everything, return_exceptions=True)
