"""`SimulatedLoop.freeze` / `thaw` (testkit/sim/loop.py): a frozen node's callbacks, timers and
tasks wait, everyone else's run; at the thaw the parked ready work runs in its order and the
timers that expired meanwhile fire at once, earliest first. The in-memory network's contexts
(runtime/net/memory.py) make a connection's handler the listening node's and a chunk in flight
nobody's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from runtime.net.memory import LinkConfig, MemoryNetwork
from runtime.net.transport import Address, Stream
from testkit.sim.loop import NODE, SimClock, SimulatedLoop, SimulationStuck, node_context

MS = 0.001


@pytest.fixture
def loop() -> Iterator[SimulatedLoop]:
    simulated = SimulatedLoop()
    yield simulated
    simulated.close()


def run_for(loop: SimulatedLoop, ms: int) -> None:
    """Let the loop run until `ms` of virtual time have passed."""
    loop.run_until_complete(asyncio.sleep(ms * MS))


def as_node(node: str, events: list[str], name: str) -> Callable[[], None]:
    def record() -> None:
        assert NODE.get() == node, "the callback runs in its node's context"
        events.append(name)

    return record


def soon(loop: SimulatedLoop, node: str, events: list[str], name: str) -> None:
    loop.call_soon(as_node(node, events, name), context=node_context(node))


def later(loop: SimulatedLoop, node: str, ms: int, events: list[str], name: str) -> None:
    loop.call_later(ms * MS, as_node(node, events, name), context=node_context(node))


def cancelled_tally_is_right(loop: SimulatedLoop) -> bool:
    """asyncio's count of cancelled timers in its heap matches the heap."""
    return loop._timer_cancelled_count == sum(1 for t in loop._scheduled if t.cancelled())


def test_a_frozen_nodes_callbacks_and_timers_wait_while_other_nodes_run(
    loop: SimulatedLoop,
) -> None:
    events: list[str] = []
    for node in ("a", "b"):
        soon(loop, node, events, f"{node}-soon")
        later(loop, node, 10, events, f"{node}-timer")
    loop.freeze("a")
    run_for(loop, 100)
    assert events == ["b-soon", "b-timer"]
    assert loop.frozen == ["a"]
    loop.thaw("a")
    run_for(loop, 1)
    assert events == ["b-soon", "b-timer", "a-soon", "a-timer"]
    assert loop.frozen == []


def test_after_a_thaw_ready_work_runs_in_order_then_expired_timers_in_deadline_order(
    loop: SimulatedLoop,
) -> None:
    events: list[str] = []
    fired_ms: dict[str, int] = {}

    def timer(ms: int) -> None:
        def fire() -> None:
            events.append(f"t{ms}")
            fired_ms[f"t{ms}"] = loop.now_ns // 1_000_000

        loop.call_later(ms * MS, fire, context=node_context("a"))

    for ms in (30, 10, 20, 200):
        timer(ms)
    soon(loop, "a", events, "r1")
    soon(loop, "a", events, "r2")
    loop.freeze("a")
    # Scheduled for the frozen node from outside (a task of its woken, a handler started):
    # parked as well, after what was parked already.
    soon(loop, "a", events, "r3")
    timer(5)
    run_for(loop, 100)
    assert events == []
    loop.thaw("a")
    run_for(loop, 150)
    assert events == ["r1", "r2", "r3", "t5", "t10", "t20", "t30", "t200"]
    # The expired ones fired at the thaw, the one still ahead at its own deadline.
    assert fired_ms == {"t5": 100, "t10": 100, "t20": 100, "t30": 100, "t200": 200}
    assert cancelled_tally_is_right(loop)


def test_a_freeze_in_mid_turn_parks_what_the_turn_was_about_to_run(loop: SimulatedLoop) -> None:
    """The loop counted its queue before the turn: the freeze must leave that count right."""
    events: list[str] = []
    loop.call_soon(loop.freeze, "a")
    soon(loop, "a", events, "a-1")
    soon(loop, "b", events, "b-1")
    soon(loop, "a", events, "a-2")
    run_for(loop, 10)
    assert events == ["b-1"]
    loop.thaw("a")
    run_for(loop, 1)
    assert events == ["b-1", "a-1", "a-2"]


def test_a_task_started_by_a_frozen_nodes_work_is_frozen_too(loop: SimulatedLoop) -> None:
    events: list[str] = []

    async def work(name: str, sleep_ms: int) -> None:
        events.append(f"{name} started")
        await asyncio.sleep(sleep_ms * MS)
        events.append(f"{name} slept")

    def start_then_stop() -> None:
        # The task's first step is already queued when its node freezes: it waits.
        asyncio.get_running_loop().create_task(work("inner", 5))
        loop.freeze("a")

    loop.call_soon(start_then_stop, context=node_context("a"))
    run_for(loop, 50)
    assert events == []
    # A task created for the frozen node from outside (as a listener's handler is).
    loop.create_task(work("outer", 7), context=node_context("a"))
    run_for(loop, 50)
    assert events == []
    loop.thaw("a")
    run_for(loop, 1)
    assert events == ["inner started", "outer started"]
    loop.freeze("a")  # both sleep: their timers are parked now
    run_for(loop, 50)
    assert events == ["inner started", "outer started"]
    loop.thaw("a")
    run_for(loop, 1)
    assert events == ["inner started", "outer started", "inner slept", "outer slept"]


def test_a_frozen_task_woken_from_outside_runs_only_after_the_thaw(loop: SimulatedLoop) -> None:
    """As data arriving for a frozen node: the future is resolved by someone else, the node's
    task that awaits it stays parked."""
    events: list[str] = []
    arrived: asyncio.Future[str] = loop.create_future()

    async def reader() -> None:
        events.append(await arrived)

    loop.create_task(reader(), context=node_context("a"))
    run_for(loop, 1)
    loop.freeze("a")
    arrived.set_result("data")
    run_for(loop, 100)
    assert events == []
    loop.thaw("a")
    run_for(loop, 1)
    assert events == ["data"]


def test_work_cancelled_while_frozen_never_runs(loop: SimulatedLoop) -> None:
    events: list[str] = []
    node = node_context("a")
    before = loop.call_later(10 * MS, lambda: events.append("cancelled before the freeze"))
    ready = loop.call_soon(lambda: events.append("ready"), context=node)
    parked = loop.call_later(10 * MS, lambda: events.append("parked timer"), context=node)
    loop.call_later(20 * MS, lambda: events.append("kept"), context=node)
    before.cancel()
    loop.freeze("a")
    later_timer = loop.call_later(5 * MS, lambda: events.append("later"), context=node)
    for handle in (ready, parked, later_timer):
        handle.cancel()
    assert cancelled_tally_is_right(loop)
    run_for(loop, 30)
    loop.thaw("a")
    assert cancelled_tally_is_right(loop)
    run_for(loop, 30)
    assert events == ["kept"]
    assert cancelled_tally_is_right(loop)


def test_freezing_an_unknown_node_or_thawing_one_not_frozen_is_harmless(
    loop: SimulatedLoop,
) -> None:
    events: list[str] = []
    soon(loop, "a", events, "a-soon")
    later(loop, "a", 10, events, "a-timer")
    loop.freeze("nobody")
    loop.freeze("nobody")
    loop.thaw("a")
    run_for(loop, 20)
    assert events == ["a-soon", "a-timer"]
    loop.thaw("nobody")
    loop.thaw("nobody")
    assert loop.frozen == []


def test_a_loop_whose_only_work_is_frozen_is_stuck_and_says_so(loop: SimulatedLoop) -> None:
    done: asyncio.Future[None] = loop.create_future()
    loop.call_soon(done.set_result, None, context=node_context("a"))
    loop.freeze("a")
    with pytest.raises(SimulationStuck, match="frozen: a"):
        loop.run_until_complete(done)


# -- the in-memory network's contexts ---------------------------------------------------------


async def _in(node: str, coro: Coroutine[Any, Any, Any]) -> Any:
    return await asyncio.get_running_loop().create_task(coro, context=node_context(node))


def test_a_frozen_servers_handler_reads_nothing_until_the_thaw(loop: SimulatedLoop) -> None:
    """The handler of a connection is started by the client's connect but is the listening
    node's work: frozen with it; the client's bytes wait in the connection."""
    network = MemoryNetwork(1, SimClock(loop), default_link=LinkConfig(1, 1))
    received: list[bytes] = []

    async def on_stream(stream: Stream) -> None:
        assert NODE.get() == "server"
        received.append(await stream.receive())

    server = Address("server", 9092)
    loop.run_until_complete(_in("server", network.transport("server").listen(server, on_stream)))
    loop.freeze("server")

    async def client() -> None:
        stream = await network.transport("client").connect(server, timeout_s=1)
        await stream.send(b"hello")

    loop.run_until_complete(client())
    run_for(loop, 100)
    assert received == []
    loop.thaw("server")
    run_for(loop, 1)
    assert received == [b"hello"]


def test_a_chunk_in_flight_arrives_while_its_sender_is_frozen(loop: SimulatedLoop) -> None:
    """A stopped process's socket buffer still drains: delivery is the network's work."""
    network = MemoryNetwork(2, SimClock(loop), default_link=LinkConfig(5))
    arrived_ms: list[int] = []

    async def on_stream(stream: Stream) -> None:
        await stream.receive()
        arrived_ms.append(loop.now_ns // 1_000_000)

    server = Address("server", 9092)
    loop.run_until_complete(network.transport("server").listen(server, on_stream))

    async def send_then_freeze() -> None:
        stream = await network.transport("sender").connect(server, timeout_s=1)
        sent_ms = loop.now_ns // 1_000_000
        await stream.send(b"in flight")
        loop.freeze("sender")
        arrived_ms.append(sent_ms)

    loop.run_until_complete(_in("sender", send_then_freeze()))
    run_for(loop, 50)
    sent_ms, arrival_ms = arrived_ms
    assert arrival_ms == sent_ms + 5
