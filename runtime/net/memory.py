"""An in-memory network for tests and seeded whole-cluster simulation.

`MemoryNetwork(seed, clock)` hands out one `Transport` per node name. Every connection is two
one-way pipes; everything that varies comes from the injected clock and from one
`random.Random(seed)`, so a run with the same seed, clock and program is the same run.

Links are named by the unordered pair of node names and configured with `set_link()` (or the
network-wide default):

* `delay_ms` (+ a uniform `jitter_ms` drawn from the seeded PRNG): a chunk passed to `send()`
  reaches the peer's `receive()` that much later on the injected clock. Chunks of one pipe never
  overtake each other (a later chunk is delivered no earlier than the one before it), as on TCP.
  Establishing a connection costs one round trip (2 x delay).
* `drop_probability`: the chance, per chunk, that the chunk is lost. A byte stream cannot lose a
  chunk and carry on (every frame after it would be garbage), so a lost chunk *resets the
  connection*: both ends see `receive() -> b""` and `send()` raising `ConnectionClosedError` —
  which is what a real TCP connection does once retransmissions give up.
* `partition(a, b)` makes the link a black hole until `heal(a, b)`: new connections cannot be
  established (connect waits for the heal and times out after `timeout_s` on the clock), and
  chunks sent on existing connections are held, then delivered in order after the heal (TCP
  retransmission). Chunks already in transit when the partition starts still arrive. So the
  peers of a partition notice it only through their own timeouts, as in production.
  `partition(a, b, one_way=True)` holds only what `a` sends to `b`; `b`'s chunks still reach
  `a`, and no new connection is established either way (a handshake needs both directions).
* `kill(a, b=None)` resets every connection between `a` and `b` (or every connection of `a`).
* `lose_next(src, dst)`: the next chunk `src` sends to `dst` resets its connection instead of
  arriving. Sent by a server to a client, that is a lost answer: the request was applied, the
  client never learns it and retries on a new connection.
* `lose_answer(asker, answerer, is_request)`: the answer to the next chunk `asker` sends
  `answerer` that `is_request(chunk)` recognises is lost: the next chunk `answerer` sends back on
  that connection resets it (the answer itself, or one to an earlier request queued before it;
  either way the asker never gets that answer). The network sees bytes only; the caller knows the
  protocol and tells a request it wants by its first bytes (ketch's clients send one frame per
  chunk). Armed until such a request comes, or `heal_all()`.
* `tracer`, when set, is called with every chunk accepted for sending, in order; a simulation
  compares two runs' traces to prove they were the same run.

Each pipe holds at most `buffer_bytes` of sent-but-unread data (plus one chunk); a sender waits
beyond that, so a reader that stops reading pushes back on its peer as through a TCP window.

Addresses are names, not sockets: `listen(Address("broker-0", 9092), ...)` registers that exact
address network-wide, port 0 picks a free port from a counter, and a client's end is named
`<node>:<ephemeral port>`.

Whose work is what (`contextvars`): a listener's connection handlers run in a copy of the
context the listener was created in, not in the connecting peer's (`connect()` starts the
handler from the client's side), and a delivery after a link's delay runs in an empty context of
its own, not in the sender's. A simulation that tells nodes apart by a context variable
(testkit/sim/loop.py freezes a node's work) so sees a handler as the listening node's, and a
chunk in flight as nobody's: it arrives while its sender is frozen, as from a stopped process's
socket buffer. Elsewhere nothing reads those contexts.

Over 500 lines on purpose: the pipes, the connections and the network's fault controls are one
model of TCP behaviour (ordering, back-pressure, resets, black holes) that reads best in one place.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from runtime.clock import NS_PER_MS, NS_PER_S, Alarm, Clock
from runtime.net.transport import (
    Address,
    Buffer,
    ConnectionClosedError,
    StreamHandler,
    take_chunks,
)

DEFAULT_BUFFER_BYTES = 1024 * 1024
_FIRST_LISTEN_PORT = 40_000
_FIRST_EPHEMERAL_PORT = 50_000

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LinkConfig:
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    drop_probability: float = 0.0

    def __post_init__(self) -> None:
        if self.delay_ms < 0 or self.jitter_ms < 0:
            raise ValueError(f"negative link delay: {self}")
        if not 0.0 <= self.drop_probability <= 1.0:
            raise ValueError(f"drop probability outside [0, 1]: {self}")


def _link_key(a: str, b: str) -> frozenset[str]:
    return frozenset((a, b))


class _Pipe:
    """One direction of a connection: data from `src` to `dst`, in order."""

    __slots__ = (
        "alarm",
        "broken",
        "connection",
        "dst",
        "fin_delivered",
        "held",
        "in_transit",
        "inbox",
        "last_deliver_ns",
        "read_waiter",
        "reader_done",
        "space_waiter",
        "src",
        "unread_bytes",
    )

    def __init__(self, connection: _Connection, src: str, dst: str) -> None:
        self.connection = connection
        self.src = src
        self.dst = dst
        # None stands for the FIN of a closing sender.
        self.in_transit: deque[tuple[int, bytes | None]] = deque()
        self.held: deque[bytes | None] = deque()
        self.inbox: deque[bytes] = deque()
        self.alarm: Alarm | None = None
        self.last_deliver_ns = 0
        self.unread_bytes = 0
        self.fin_delivered = False
        self.reader_done = False  # the receiving end closed: arrivals are discarded
        self.broken = False
        self.read_waiter: asyncio.Future[None] | None = None
        self.space_waiter: asyncio.Future[None] | None = None

    def wake_reader(self) -> None:
        if self.read_waiter is not None and not self.read_waiter.done():
            self.read_waiter.set_result(None)

    def wake_sender(self) -> None:
        if self.space_waiter is not None and not self.space_waiter.done():
            self.space_waiter.set_result(None)

    def deliver(self, chunk: bytes | None) -> None:
        if self.broken:
            return
        if chunk is None:
            self.fin_delivered = True
        elif self.reader_done:
            self.unread_bytes -= len(chunk)
            self.wake_sender()
        else:
            self.inbox.append(chunk)
        self.wake_reader()

    def reset(self) -> None:
        self.broken = True
        self.in_transit.clear()
        self.held.clear()
        self.inbox.clear()
        self.unread_bytes = 0
        if self.alarm is not None:
            self.alarm.cancel()
            self.alarm = None
        self.wake_reader()
        self.wake_sender()


class _Connection:
    __slots__ = ("a", "a_to_b", "b", "b_to_a", "open_ends")

    def __init__(self, a: str, b: str) -> None:
        self.a = a
        self.b = b
        self.a_to_b = _Pipe(self, a, b)
        self.b_to_a = _Pipe(self, b, a)
        self.open_ends = 2

    @property
    def broken(self) -> bool:
        return self.a_to_b.broken

    def touches(self, a: str, b: str | None) -> bool:
        if b is None:
            return a in (self.a, self.b)
        return {self.a, self.b} == {a, b}


class MemoryStream:
    """One end of an in-memory connection."""

    __slots__ = ("_closed", "_incoming", "_network", "_outgoing", "_peer")

    def __init__(self, network: MemoryNetwork, outgoing: _Pipe, incoming: _Pipe, peer: str) -> None:
        self._network = network
        self._outgoing = outgoing
        self._incoming = incoming
        self._peer = peer
        self._closed = False

    @property
    def peer(self) -> str:
        return self._peer

    @property
    def tls_principal(self) -> str | None:
        return None  # the in-memory network has no TLS

    async def _readable(self) -> bool:
        """Wait until something is in the inbox: True, or False once the stream is finished."""
        pipe = self._incoming
        while not pipe.inbox:
            if pipe.fin_delivered or pipe.reader_done or pipe.broken:
                return False
            assert pipe.read_waiter is None, "receive() called concurrently on one stream"
            pipe.read_waiter = asyncio.get_running_loop().create_future()
            try:
                await pipe.read_waiter
            finally:
                pipe.read_waiter = None
        return True

    async def receive(self) -> bytes:
        pipe = self._incoming
        if not await self._readable():
            return b""
        data = pipe.inbox.popleft() if len(pipe.inbox) == 1 else b"".join(pipe.inbox)
        pipe.inbox.clear()
        pipe.unread_bytes -= len(data)
        pipe.wake_sender()
        return data

    async def receive_into(self, buffer: memoryview) -> int:
        pipe = self._incoming
        if not await self._readable():
            return 0
        copied = take_chunks(pipe.inbox, buffer)
        pipe.unread_bytes -= copied
        pipe.wake_sender()
        return copied

    async def send_buffers(self, buffers: Sequence[Buffer]) -> None:
        # One chunk, as one send() of the joined bytes: what the network's faults and tracers
        # see does not depend on how the sender split its data.
        await self.send(b"".join(buffers))

    async def send(self, data: bytes) -> None:
        pipe = self._outgoing
        while True:
            if self._closed or pipe.broken or self._incoming.fin_delivered:
                raise ConnectionClosedError(f"connection to {self._peer} is closed")
            if pipe.unread_bytes < self._network.buffer_bytes:
                break
            assert pipe.space_waiter is None, "send() called concurrently on one stream"
            pipe.space_waiter = asyncio.get_running_loop().create_future()
            try:
                await pipe.space_waiter
            finally:
                pipe.space_waiter = None
        if data:
            self._network.transmit(pipe, data)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        incoming = self._incoming
        incoming.reader_done = True
        incoming.inbox.clear()
        incoming.unread_bytes = 0
        incoming.wake_reader()
        incoming.wake_sender()
        self._outgoing.wake_sender()  # our own blocked send() must now raise
        if not self._outgoing.broken:
            self._network.transmit(self._outgoing, None)
        self._network.end_closed(incoming.connection)


class MemoryListener:
    __slots__ = ("_address", "_closed", "_context", "_network", "node", "on_stream", "tasks")

    def __init__(
        self, network: MemoryNetwork, node: str, address: Address, on_stream: StreamHandler
    ) -> None:
        self._network = network
        self._address = address
        self._closed = False
        self.node = node
        self.on_stream = on_stream
        # The listening node's context, for its handlers (module docstring).
        self._context = contextvars.copy_context()
        # Insertion-ordered (dicts as sets): the order they are closed or woken in is part of a
        # run, and a seeded simulation must replay it (a set of objects orders them by address).
        self.tasks: dict[asyncio.Task[None], None] = {}

    @property
    def address(self) -> Address:
        return self._address

    def spawn(self, stream: MemoryStream) -> None:
        # A copy per handler: each task owns its context, as one created in the listener's.
        task = asyncio.get_running_loop().create_task(
            self._run(stream), context=self._context.copy()
        )
        self.tasks[task] = None
        task.add_done_callback(lambda done: self.tasks.pop(done, None))

    async def _run(self, stream: MemoryStream) -> None:
        try:
            await self.on_stream(stream)
        except Exception:
            _log.exception("connection handler for %s failed", stream.peer)
            await stream.aclose()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._network.unregister(self)


class MemoryTransport:
    """The `Transport` of one node on a `MemoryNetwork`."""

    __slots__ = ("_network", "node")

    def __init__(self, network: MemoryNetwork, node: str) -> None:
        self._network = network
        self.node = node

    async def connect(self, address: Address, *, timeout_s: float) -> MemoryStream:
        return await self._network.connect(self.node, address, timeout_s)

    async def listen(self, address: Address, on_stream: StreamHandler) -> MemoryListener:
        return self._network.listen(self.node, address, on_stream)


class MemoryNetwork:
    """Nodes, links and connections of one simulated network. Runs on one event loop."""

    def __init__(
        self,
        seed: int,
        clock: Clock,
        *,
        default_link: LinkConfig | None = None,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    ) -> None:
        if buffer_bytes <= 0:
            raise ValueError(f"buffer_bytes must be positive, got {buffer_bytes}")
        self.seed = seed
        self.clock = clock
        self.buffer_bytes = buffer_bytes
        self._rng = random.Random(seed)
        self._default_link = default_link or LinkConfig()
        self._links: dict[frozenset[str], LinkConfig] = {}
        self._partitions: set[frozenset[str]] = set()
        self._one_way: set[tuple[str, str]] = set()  # (src, dst) held in that direction only
        self._lose_next: set[tuple[str, str]] = set()
        # (asker, answerer) -> the test of the request whose answer to lose; and the pipes whose
        # next chunk is such an answer.
        self._lose_answers: dict[tuple[str, str], Callable[[bytes], bool]] = {}
        self._answers_to_lose: set[_Pipe] = set()
        # Called with (src, dst, chunk or None for a FIN) for every chunk accepted for sending.
        self.tracer: Callable[[str, str, bytes | None], None] | None = None
        self._heal_waiters: dict[frozenset[str], list[asyncio.Future[None]]] = {}
        self._listeners: dict[Address, MemoryListener] = {}
        self._connections: list[_Connection] = []
        self._listen_ports = itertools.count(_FIRST_LISTEN_PORT)
        self._ephemeral_ports = itertools.count(_FIRST_EPHEMERAL_PORT)

    def transport(self, node: str) -> MemoryTransport:
        if not node:
            raise ValueError("node name is empty")
        return MemoryTransport(self, node)

    # link controls

    def set_link(
        self,
        a: str,
        b: str,
        *,
        delay_ms: float = 0.0,
        jitter_ms: float = 0.0,
        drop_probability: float = 0.0,
    ) -> None:
        """Configure the link between `a` and `b` (both directions). Affects later sends."""
        self._links[_link_key(a, b)] = LinkConfig(delay_ms, jitter_ms, drop_probability)

    def link(self, a: str, b: str) -> LinkConfig:
        return self._links.get(_link_key(a, b), self._default_link)

    def partition(self, a: str, b: str, *, one_way: bool = False) -> None:
        """Cut the link between `a` and `b` (only what `a` sends to `b` if `one_way`)."""
        if a == b:
            raise ValueError(f"cannot partition node {a!r} from itself")
        if one_way:
            self._one_way.add((a, b))
        else:
            self._partitions.add(_link_key(a, b))

    def is_partitioned(self, a: str, b: str) -> bool:
        """Whether no connection can be made between `a` and `b` (either kind of cut)."""
        return (
            _link_key(a, b) in self._partitions
            or (a, b) in self._one_way
            or (b, a) in self._one_way
        )

    def _holds(self, src: str, dst: str) -> bool:
        return _link_key(src, dst) in self._partitions or (src, dst) in self._one_way

    def lose_next(self, src: str, dst: str) -> None:
        """The next chunk `src` sends to `dst` resets its connection instead (module doc)."""
        self._lose_next.add((src, dst))

    def lose_answer(self, asker: str, answerer: str, is_request: Callable[[bytes], bool]) -> None:
        """Lose the answer to the next request `is_request` recognises (module doc)."""
        self._lose_answers[(asker, answerer)] = is_request

    def heal(self, a: str, b: str) -> None:
        """Undo every cut between `a` and `b`, both kinds, both directions."""
        key = _link_key(a, b)
        cut = key in self._partitions or (a, b) in self._one_way or (b, a) in self._one_way
        if not cut:
            return
        self._partitions.discard(key)
        self._one_way.discard((a, b))
        self._one_way.discard((b, a))
        for connection in list(self._connections):
            if connection.touches(a, b):
                for pipe in (connection.a_to_b, connection.b_to_a):
                    held = list(pipe.held)
                    pipe.held.clear()
                    for chunk in held:
                        self._schedule(pipe, chunk)
        for waiter in self._heal_waiters.pop(key, []):
            if not waiter.done():
                waiter.set_result(None)

    def heal_all(self) -> None:
        pairs = {tuple(sorted(key)) for key in self._partitions}
        pairs |= {tuple(sorted(pair)) for pair in self._one_way}
        for a, b in sorted(pairs):
            self.heal(a, b)
        self._lose_next.clear()
        self._lose_answers.clear()
        self._answers_to_lose.clear()

    def kill(self, a: str, b: str | None = None) -> int:
        """Reset every connection between `a` and `b` (every one of `a` if b is None)."""
        victims = [c for c in self._connections if c.touches(a, b)]
        for connection in victims:
            self._reset(connection)
        return len(victims)

    def open_connections(self, node: str | None = None) -> int:
        return sum(1 for c in self._connections if node is None or c.touches(node, None))

    # plumbing used by streams, listeners and transports

    def listen(self, node: str, address: Address, on_stream: StreamHandler) -> MemoryListener:
        if address.port == 0:
            address = Address(address.host, self._free_port(address.host))
        if address in self._listeners:
            raise OSError(f"address already in use: {address}")
        listener = MemoryListener(self, node, address, on_stream)
        self._listeners[address] = listener
        return listener

    def unregister(self, listener: MemoryListener) -> None:
        if self._listeners.get(listener.address) is listener:
            del self._listeners[listener.address]

    async def connect(self, node: str, address: Address, timeout_s: float) -> MemoryStream:
        deadline_ns = self.clock.monotonic_ns() + round(timeout_s * NS_PER_S)
        listener = self._listeners.get(address)
        if listener is None:
            raise ConnectionRefusedError(f"nothing listens at {address}")
        while self.is_partitioned(node, listener.node):
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            waiters = self._heal_waiters.setdefault(_link_key(node, listener.node), [])
            waiters.append(waiter)
            try:
                await self._wait_until(waiter, deadline_ns, address)
            finally:
                if waiter in waiters:  # timed out: do not keep it until some later heal
                    waiters.remove(waiter)
        round_trip_ns = 2 * self._delay_ns(self.link(node, listener.node))
        if round_trip_ns > 0:
            if self.clock.monotonic_ns() + round_trip_ns > deadline_ns:
                await self._wait_until(None, deadline_ns, address)
            await self.clock.sleep(round_trip_ns / NS_PER_S)
        if self._listeners.get(address) is not listener:
            raise ConnectionRefusedError(f"nothing listens at {address}")
        connection = _Connection(node, listener.node)
        self._connections.append(connection)
        client_name = str(Address(node, next(self._ephemeral_ports)))
        client = MemoryStream(self, connection.a_to_b, connection.b_to_a, str(address))
        server = MemoryStream(self, connection.b_to_a, connection.a_to_b, client_name)
        listener.spawn(server)
        return client

    async def _wait_until(
        self, waiter: asyncio.Future[None] | None, deadline_ns: int, address: Address
    ) -> None:
        """Await `waiter` (None: nothing) until `deadline_ns` on the clock, then TimeoutError."""
        timed_out: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def expire() -> None:
            if not timed_out.done():
                timed_out.set_result(None)

        alarm = self.clock.call_at_ns(deadline_ns, expire)
        try:
            pending = [timed_out] if waiter is None else [timed_out, waiter]
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        finally:
            alarm.cancel()
            if waiter is not None and not waiter.done():
                waiter.cancel()
        if timed_out.done():
            raise TimeoutError(f"connecting to {address} timed out")

    def transmit(self, pipe: _Pipe, chunk: bytes | None) -> None:
        """Accept `chunk` (None: FIN) from the sending end of `pipe`."""
        if self.tracer is not None:
            self.tracer(pipe.src, pipe.dst, chunk)
        if chunk is not None:
            pipe.unread_bytes += len(chunk)
            link = self.link(pipe.src, pipe.dst)
            if link.drop_probability > 0 and self._rng.random() < link.drop_probability:
                _log.debug("link %s->%s lost a chunk: resetting", pipe.src, pipe.dst)
                self._reset(pipe.connection)
                return
            if self._lose_next and (pipe.src, pipe.dst) in self._lose_next:
                self._lose_next.discard((pipe.src, pipe.dst))
                _log.debug("link %s->%s lost an answer: resetting", pipe.src, pipe.dst)
                self._reset(pipe.connection)
                return
            if (self._lose_answers or self._answers_to_lose) and self._loses_answer(pipe, chunk):
                return
        if self._holds(pipe.src, pipe.dst):
            pipe.held.append(chunk)
            return
        self._schedule(pipe, chunk)

    def _loses_answer(self, pipe: _Pipe, chunk: bytes) -> bool:
        """`lose_answer`'s part of `transmit`: True when `chunk` is lost (its connection reset)."""
        if pipe in self._answers_to_lose:
            self._answers_to_lose.discard(pipe)
            _log.debug("link %s->%s lost an answer: resetting", pipe.src, pipe.dst)
            self._reset(pipe.connection)
            return True
        is_request = self._lose_answers.get((pipe.src, pipe.dst))
        if is_request is not None and is_request(chunk):
            del self._lose_answers[(pipe.src, pipe.dst)]
            connection = pipe.connection
            back = connection.b_to_a if pipe is connection.a_to_b else connection.a_to_b
            self._answers_to_lose.add(back)
        return False

    def end_closed(self, connection: _Connection) -> None:
        connection.open_ends -= 1
        if connection.open_ends == 0 and connection in self._connections:
            self._connections.remove(connection)

    # internals

    def _free_port(self, host: str) -> int:
        while True:
            port = next(self._listen_ports)
            if Address(host, port) not in self._listeners:
                return port

    def _delay_ns(self, link: LinkConfig) -> int:
        delay_ms = link.delay_ms
        if link.jitter_ms > 0:
            delay_ms += self._rng.uniform(0.0, link.jitter_ms)
        return round(delay_ms * NS_PER_MS)

    def _schedule(self, pipe: _Pipe, chunk: bytes | None) -> None:
        now_ns = self.clock.monotonic_ns()
        delay_ns = self._delay_ns(self.link(pipe.src, pipe.dst))
        deliver_ns = max(now_ns + delay_ns, pipe.last_deliver_ns)
        pipe.last_deliver_ns = deliver_ns
        if deliver_ns <= now_ns and not pipe.in_transit:
            pipe.deliver(chunk)
            return
        pipe.in_transit.append((deliver_ns, chunk))
        if pipe.alarm is None:
            self._arm(pipe)

    def _arm(self, pipe: _Pipe) -> None:
        # One alarm per pipe, for the head chunk only: deliveries cannot reorder even on a clock
        # whose equal deadlines fire in arbitrary order.
        # In a context of its own, not the sender's: a delivery is nobody's work (module doc).
        deliver_ns = pipe.in_transit[0][0]
        pipe.alarm = contextvars.Context().run(
            self.clock.call_at_ns, deliver_ns, lambda: self._on_alarm(pipe)
        )

    def _on_alarm(self, pipe: _Pipe) -> None:
        pipe.alarm = None
        now_ns = self.clock.monotonic_ns()
        while pipe.in_transit and pipe.in_transit[0][0] <= now_ns:
            _, chunk = pipe.in_transit.popleft()
            pipe.deliver(chunk)
        if pipe.in_transit:
            self._arm(pipe)

    def _reset(self, connection: _Connection) -> None:
        connection.a_to_b.reset()
        connection.b_to_a.reset()
        if connection in self._connections:
            self._connections.remove(connection)
