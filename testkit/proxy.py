"""A fault-injecting TCP proxy in front of every node of a local cluster: per *directed* link
(source node -> destination node) it can cut, blackhole or delay the bytes, and heal.

    network = FaultyNetwork()
    network.start()                                        # its own thread and event loop
    front = network.add_route(0, Address("127.0.0.1", 9092))    # broker 0's native listener
    network.cut(1, 0)                                      # broker 1 -> broker 0
    network.heal()                                         # every link, every fault
    network.close()

Who is talking. Each node binds its outgoing connections to its own loopback address
(`source_host(node)`, the node's `connections.source.host`: runtime/net/tcp.py), so the proxy
in front of a destination knows the source of a connection by its peer address; anything else
(127.0.0.1: the test, a Kafka client) is CLIENT. Linux routes all of 127.0.0.0/8 to the
loopback interface; elsewhere `start()` refuses to run.

    broker b     127.0.1.<b+1>        controller   127.0.2.1        client   anything else

A connection from S accepted in front of D carries S -> D bytes (governed by the link S -> D)
and D -> S bytes (the link D -> S). Faults, per link, in the direction of the bytes:

    cut         connections S opens to D are reset (RST) and new ones reset on arrival, so S
                sees at once that it cannot reach D; on connections D opened to S, the S -> D
                bytes (S's answers) are held, as a real one-way loss would hold them: D's
                requests arrive and are applied, their answers do not come back
    blackhole   S -> D bytes are held on every connection; S's new connections are accepted
                (and their bytes held): S only notices by its own timeouts
    delay       S -> D bytes are forwarded `delay_ms` after they were read, in order
    heal        the link carries bytes again; what it held is delivered then, in order (TCP
                would retransmit it once the path is back)

Held bytes stay in the connection's bounded queue (QUEUE_CHUNKS reads), then in the kernel's
socket buffers (the proxy stops reading), then the sender blocks: nothing is dropped mid-stream,
so a stream's framing is never broken; a connection is only ever lost whole (reset). A
partition both ways is a cut each way. An end of stream (FIN) is passed on after the bytes before
it; the connection closes once both directions ended, and a reset on one side resets the other.

Ownership: the network's state (links, listeners, connections) belongs to its own event loop
on its own thread, so the proxies keep forwarding while the caller's loop or thread blocks (a
user's synchronous Kafka client call, a librdkafka flush). Every public method is synchronous and
thread-safe: it runs on that loop and waits (bounded by CALL_TIMEOUT_S) until the change is in
force, existing connections reset included.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import ipaddress
import socket
import struct
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from node.layout import CONTROLLER_NODE
from runtime.net.transport import Address

Node = int | str
"""A broker id, CONTROLLER or CLIENT."""

CONTROLLER: Final = CONTROLLER_NODE
CLIENT: Final = "client"
LOCALHOST: Final = "127.0.0.1"
CONTROLLER_SOURCE_HOST: Final = "127.0.2.1"
_BROKER_NET: Final = (127, 0, 1)
MAX_BROKERS: Final = 254
CHUNK_BYTES: Final = 64 * 1024
# Chunks read and not yet written, per direction of a connection: beyond this the proxy stops
# reading and the kernel's buffers, then the sender, hold the rest.
QUEUE_CHUNKS: Final = 16
CONNECT_TIMEOUT_S: Final = 5.0
CALL_TIMEOUT_S: Final = 10.0
_T = TypeVar("_T")


def source_host(node: Node) -> str:
    """The loopback address `node` binds its outgoing connections to."""
    if node == CONTROLLER:
        return CONTROLLER_SOURCE_HOST
    assert isinstance(node, int), f"not a node: {node!r}"
    assert 0 <= node < MAX_BROKERS, f"broker id out of range: {node}"
    return ".".join(str(part) for part in (*_BROKER_NET, node + 1))


def node_of(host: str) -> Node:
    """Who connected from `host` (the inverse of source_host; CLIENT for any other address)."""
    if host == CONTROLLER_SOURCE_HOST:
        return CONTROLLER
    try:
        packed = ipaddress.IPv4Address(host).packed
    except ValueError:
        return CLIENT
    if tuple(packed[:3]) == _BROKER_NET and 1 <= packed[3] <= MAX_BROKERS:
        return packed[3] - 1
    return CLIENT


class Fault(enum.Enum):
    CUT = "cut"
    BLACKHOLE = "blackhole"


@dataclass(frozen=True, slots=True)
class LinkStats:
    """One directed link's counters since the network started."""

    fault: Fault | None
    delay_ms: float
    connections: int  # opened by the link's source through it
    refused: int  # reset on arrival (the link was cut)
    reset: int  # reset because the link was cut while they were open
    forwarded_bytes: int
    held_bytes: int  # read from the source, not yet written to the destination


@dataclass
class _Link:
    fault: Fault | None = None
    delay_s: float = 0.0
    # Set while bytes may pass (no fault); the writers of the link's direction wait on it.
    passable: asyncio.Event = field(default_factory=asyncio.Event)
    connections: int = 0
    refused: int = 0
    reset: int = 0
    forwarded_bytes: int = 0
    held_bytes: int = 0

    def __post_init__(self) -> None:
        self.passable.set()

    def set_fault(self, fault: Fault | None) -> None:
        self.fault = fault
        if fault is None:
            self.passable.set()
        else:
            self.passable.clear()

    def is_cut(self) -> bool:
        # A method, not a property: a cut can come while _accept awaits, and mypy would narrow
        # a property's value across the await.
        return self.fault is Fault.CUT

    def stats(self) -> LinkStats:
        return LinkStats(
            self.fault,
            self.delay_s * 1_000,
            self.connections,
            self.refused,
            self.reset,
            self.forwarded_bytes,
            self.held_bytes,
        )


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a RST, not a FIN: the peer sees "connection reset", as on a cut path."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


_Chunk = tuple[float, bytes | None]  # (when it may be written, data); b"": end; None: reset


@dataclass
class _Direction:
    """One direction of a connection: the link it follows and the bytes it holds."""

    link: _Link
    queue: asyncio.Queue[_Chunk] = field(default_factory=lambda: asyncio.Queue(QUEUE_CHUNKS))
    held_bytes: int = 0

    def hold(self, size: int) -> None:
        self.held_bytes += size
        self.link.held_bytes += size

    def release(self, size: int) -> None:
        self.held_bytes -= size
        self.link.held_bytes -= size


class _Connection:
    """One proxied connection: `source` opened it to `destination`'s proxy. Two directions,
    each a reader task filling a bounded queue and a writer task emptying it."""

    def __init__(
        self,
        source: Node,
        destination: Node,
        downstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        links: tuple[_Link, _Link],
        done: Callable[[_Connection], None],
    ) -> None:
        self.source = source
        self.destination = destination
        self._writers = (downstream[1], upstream[1])
        self._directions = (_Direction(links[0]), _Direction(links[1]))
        self._ended = 0  # directions whose end of stream was passed on
        self._closed = False
        self._done = done
        loop = asyncio.get_running_loop()
        self._tasks: list[asyncio.Task[None]] = []
        for reader, writer, direction in (
            (downstream[0], upstream[1], self._directions[0]),
            (upstream[0], downstream[1], self._directions[1]),
        ):
            self._tasks.append(loop.create_task(self._read(reader, direction)))
            self._tasks.append(loop.create_task(self._write(direction, writer)))

    async def _read(self, reader: asyncio.StreamReader, direction: _Direction) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await reader.read(CHUNK_BYTES)
                direction.hold(len(data))
                await direction.queue.put((loop.time() + direction.link.delay_s, data))
                if not data:
                    return
        except OSError:
            await direction.queue.put((0.0, None))

    async def _write(self, direction: _Direction, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        link = direction.link
        while True:
            due, data = await direction.queue.get()
            if data is None:  # the reader's side was reset: pass the reset on
                self.reset()
                return
            wait_s = due - loop.time()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            await link.passable.wait()
            if not data:
                self._end(writer)
                return
            direction.release(len(data))
            link.forwarded_bytes += len(data)
            try:
                writer.write(data)
                await writer.drain()
            except OSError:
                self.reset()
                return

    def _end(self, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()
        self._ended += 1
        if self._ended == 2:
            self._finish(reset=False)

    def reset(self) -> None:
        """Reset both sides (RST) and drop what is held: the connection is lost whole."""
        self._finish(reset=True)

    def _finish(self, *, reset: bool) -> None:
        if self._closed:
            return
        self._closed = True
        for writer in self._writers:
            if reset:
                _reset(writer)
            else:
                writer.close()
        for direction in self._directions:
            direction.release(direction.held_bytes)
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        self._done(self)


class FaultyNetwork:
    """The proxies in front of a cluster's nodes and the state of every directed link between
    them (see the module docstring)."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._links: dict[tuple[Node, Node], _Link] = {}
        self._servers: list[asyncio.Server] = []
        self._connections: set[_Connection] = set()
        self._closing = False

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the network's thread and event loop (no proxies yet: add_route)."""
        assert self._thread is None, "started twice"
        _check_loopback_sources()
        ready = threading.Event()
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="ketch-faulty-network", daemon=True)
        self._thread.start()
        if not ready.wait(CALL_TIMEOUT_S):
            raise RuntimeError("the network's event loop did not start")

    def close(self) -> None:
        """Reset every connection, close every proxy and end the thread (idempotent)."""
        if self._thread is None or self._loop is None:
            return
        loop, thread = self._loop, self._thread
        if thread.is_alive():
            with contextlib.suppress(TimeoutError, RuntimeError):
                self._call(self._shutdown)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(CALL_TIMEOUT_S)
        if not thread.is_alive():
            loop.close()
        self._thread = None

    def _call(self, function: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        """Run `function()` on the network's loop and wait for its result."""
        assert self._loop is not None, "the network is not started"
        assert threading.current_thread() is not self._thread, "called from the network's loop"
        future = asyncio.run_coroutine_threadsafe(function(), self._loop)
        return future.result(CALL_TIMEOUT_S)

    async def _shutdown(self) -> None:
        """Reset everything, then close the listeners once no accept is in progress: asyncio
        (3.11) leaks, unanswered, a connection accepted just before its server closed (the
        transport refuses a closed server and the socket is dropped without a close). New
        arrivals meanwhile are reset by _accept (it sees _closing)."""
        self._closing = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CALL_TIMEOUT_S / 2
        while True:
            for connection in list(self._connections):
                connection.reset()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if not tasks or loop.time() > deadline:
                break
            await asyncio.wait(tasks, timeout=max(0.0, deadline - loop.time()))
        # No await between the check above and this: no accept can start in between.
        for server in self._servers:
            server.close()
        self._servers.clear()

    # -- proxies ---------------------------------------------------------------------------------

    def add_route(self, node: Node, target: Address, front: Address | None = None) -> Address:
        """A proxy for `node` at `front` (default: a free port on 127.0.0.1) forwarding to
        `target`; the address it accepts on."""
        listen = front or Address(LOCALHOST, 0)

        async def add() -> Address:
            async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                await self._accept(node, target, reader, writer)

            server = await asyncio.start_server(
                accept, listen.host, listen.port, reuse_address=True
            )
            self._servers.append(server)
            return Address(listen.host, int(server.sockets[0].getsockname()[1]))

        return self._call(add)

    async def _accept(
        self,
        destination: Node,
        target: Address,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        peer = writer.get_extra_info("peername")
        source = node_of(str(peer[0])) if isinstance(peer, tuple) else CLIENT
        link = self._link(source, destination)
        link.connections += 1
        if link.is_cut() or self._closing:
            link.refused += 1
            _reset(writer)
            return
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                upstream = await asyncio.open_connection(target.host, target.port)
        except (OSError, TimeoutError):
            # The node is down: its clients see the connection fail, as without the proxy.
            _reset(writer)
            return
        if link.is_cut() or self._closing:  # cut (or closing) while connecting
            link.refused += 1
            _reset(writer)
            _reset(upstream[1])
            return
        backward = self._link(destination, source)
        connection = _Connection(
            source, destination, (reader, writer), upstream, (link, backward), self._forget
        )
        self._connections.add(connection)

    def _forget(self, connection: _Connection) -> None:
        self._connections.discard(connection)

    def _link(self, source: Node, destination: Node) -> _Link:
        link = self._links.get((source, destination))
        if link is None:
            link = self._links[source, destination] = _Link()
        return link

    # -- faults ----------------------------------------------------------------------------------

    def cut(self, source: Node, destination: Node) -> None:
        """Cut source -> destination: its connections reset, new ones refused, its answers on
        the destination's connections held (module docstring)."""
        self._set(source, destination, Fault.CUT)

    def blackhole(self, source: Node, destination: Node) -> None:
        """Hold every source -> destination byte; connections stay open."""
        self._set(source, destination, Fault.BLACKHOLE)

    def delay(self, source: Node, destination: Node, delay_ms: float) -> None:
        """Forward source -> destination bytes `delay_ms` after they are read (0: no delay)."""
        assert delay_ms >= 0, delay_ms

        async def apply() -> None:
            self._link(source, destination).delay_s = delay_ms / 1_000

        self._call(apply)

    def heal(self, source: Node | None = None, destination: Node | None = None) -> None:
        """Remove the faults and delays of every link from `source` (any when None) to
        `destination` (any when None); held bytes are delivered."""

        async def apply() -> None:
            for (s, d), link in self._links.items():
                if source in (None, s) and destination in (None, d):
                    link.set_fault(None)
                    link.delay_s = 0.0

        self._call(apply)

    def _set(self, source: Node, destination: Node, fault: Fault) -> None:
        assert source != destination, f"a link joins two nodes, not {source!r} to itself"

        async def apply() -> None:
            link = self._link(source, destination)
            link.set_fault(fault)
            if fault is not Fault.CUT:
                return
            for connection in list(self._connections):
                if (connection.source, connection.destination) == (source, destination):
                    link.reset += 1
                    connection.reset()

        self._call(apply)

    # -- observing -------------------------------------------------------------------------------

    def stats(self, source: Node, destination: Node) -> LinkStats:
        async def read() -> LinkStats:
            return self._link(source, destination).stats()

        return self._call(read)

    def faults(self) -> dict[tuple[Node, Node], Fault]:
        """Every link with a fault now."""

        async def read() -> dict[tuple[Node, Node], Fault]:
            return {key: link.fault for key, link in self._links.items() if link.fault is not None}

        return self._call(read)

    def open_connections(self) -> int:
        async def read() -> int:
            return len(self._connections)

        return self._call(read)


def _check_loopback_sources() -> None:
    """Each node needs its own loopback address: Linux has all of 127.0.0.0/8 on lo; macOS and
    others have only 127.0.0.1 unless aliases are added. Fail early, and say so."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.bind((CONTROLLER_SOURCE_HOST, 0))
    except OSError as exc:
        raise RuntimeError(
            f"cannot bind {CONTROLLER_SOURCE_HOST} ({exc.strerror}): the fault-injecting proxy "
            "needs the whole 127.0.0.0/8 on the loopback interface (as on Linux)"
        ) from None
    finally:
        probe.close()
