"""`MemoryNetwork.lose_answer`: the answer to one recognised request is lost with its
connection; other requests, other connections and later requests are not touched."""

from __future__ import annotations

import asyncio

from runtime.clock import ManualClock
from runtime.net.memory import MemoryNetwork, MemoryStream
from runtime.net.transport import Address, Stream

CONTROLLER = Address("controller", 9093)


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


class _Answerer:
    """Listens as "controller"; the test answers through the accepted streams."""

    def __init__(self) -> None:
        self.accepted: list[Stream] = []
        self._done = asyncio.Event()

    async def on_stream(self, stream: Stream) -> None:
        self.accepted.append(stream)
        await self._done.wait()

    def stop(self) -> None:
        self._done.set()


async def _open(network: MemoryNetwork, answerer: _Answerer) -> tuple[MemoryStream, Stream]:
    ours = await network.transport("broker-1").connect(CONTROLLER, timeout_s=1.0)
    await _settle()
    return ours, answerer.accepted[-1]


async def _exchange(asker: MemoryStream, answerer: Stream, request: bytes) -> bytes:
    """Send `request`, answer it with b"re:" + request, return what the asker receives."""
    await asker.send(request)
    await _settle()
    assert await answerer.receive() == request
    await answerer.send(b"re:" + request)  # a lost one resets the connection, no error here
    await _settle()
    return await asker.receive()


async def _network() -> tuple[MemoryNetwork, _Answerer]:
    network = MemoryNetwork(seed=3, clock=ManualClock())
    answerer = _Answerer()
    await network.transport("controller").listen(CONTROLLER, answerer.on_stream)
    return network, answerer


async def test_only_the_answer_to_the_recognised_request_is_lost() -> None:
    network, answerer = await _network()
    network.lose_answer("broker-1", "controller", lambda chunk: chunk.startswith(b"alter"))
    asker, server = await _open(network, answerer)
    assert await _exchange(asker, server, b"heartbeat") == b"re:heartbeat"
    # The request arrives (the controller may apply it); its answer resets the connection.
    assert await _exchange(asker, server, b"alter-1") == b""
    assert network.open_connections("broker-1") == 0
    # Once only: the resent request on a new connection is answered.
    asker, server = await _open(network, answerer)
    assert await _exchange(asker, server, b"alter-1") == b"re:alter-1"
    answerer.stop()


async def test_the_answer_is_lost_on_the_requests_connection_only() -> None:
    network, answerer = await _network()
    first, first_server = await _open(network, answerer)
    second, second_server = await _open(network, answerer)
    network.lose_answer("broker-1", "controller", lambda chunk: chunk == b"alter")
    await second.send(b"alter")
    await _settle()
    assert await second_server.receive() == b"alter"
    # An answer on the other connection goes through; the one on the request's is lost.
    assert await _exchange(first, first_server, b"heartbeat") == b"re:heartbeat"
    await second_server.send(b"re:alter")
    await _settle()
    assert await second.receive() == b""
    assert network.open_connections("broker-1") == 1
    answerer.stop()


async def test_another_askers_requests_and_heal_all_disarm_nothing_else() -> None:
    network, answerer = await _network()
    network.lose_answer("broker-2", "controller", lambda chunk: True)  # another asker
    asker, server = await _open(network, answerer)
    assert await _exchange(asker, server, b"alter") == b"re:alter"
    network.lose_answer("broker-1", "controller", lambda chunk: True)
    network.heal_all()  # the end of a run's faults disarms it
    assert await _exchange(asker, server, b"alter") == b"re:alter"
    answerer.stop()
