"""The actor kernel: ordering, backpressure, ask errors, fatal errors, stop, no leaked tasks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import pytest

from runtime.actor import (
    Actor,
    ActorFatalError,
    Ask,
    MailboxClosed,
    MailboxFull,
    UnhandledMessageError,
    handles,
)


@dataclass(frozen=True, slots=True)
class Append:
    value: int


@dataclass(frozen=True, slots=True)
class Snapshot(Ask[tuple[int, ...]]):
    pass


@dataclass(frozen=True, slots=True)
class SlowAppend(Ask[int]):
    value: int
    gate: asyncio.Event


@dataclass(frozen=True, slots=True)
class Divide(Ask[float]):
    by: int


@dataclass(frozen=True, slots=True)
class Corrupt(Ask[None]):
    pass


@dataclass(frozen=True, slots=True)
class Unknown(Ask[None]):
    pass


async def eventually(condition: Callable[[], bool], *, turns: int = 100) -> None:
    """Let the loop run until `condition` holds (a bounded number of turns, no sleeping)."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


class Log(Actor):
    mailbox_capacity = 4

    def __init__(self, name: str = "log", **kwargs: object) -> None:
        super().__init__(name, **kwargs)  # type: ignore[arg-type]
        self.values: list[int] = []
        self.in_handler = False

    @handles(Append)
    def append(self, message: Append) -> None:
        assert not self.in_handler, "two handlers interleaved"
        self.values.append(message.value)

    @handles(Snapshot)
    def snapshot(self, message: Snapshot) -> tuple[int, ...]:
        return tuple(self.values)

    @handles(SlowAppend)
    async def slow_append(self, message: SlowAppend) -> int:
        self.in_handler = True
        try:
            await message.gate.wait()
        finally:
            self.in_handler = False
        self.values.append(message.value)
        return len(self.values)

    @handles(Divide)
    def divide(self, message: Divide) -> float:
        return 100 / message.by

    @handles(Corrupt)
    def corrupt(self, message: Corrupt) -> None:
        raise ActorFatalError("state is corrupt")


async def test_messages_are_processed_in_order_one_at_a_time() -> None:
    actor = Log()
    await actor.start()
    gate = asyncio.Event()
    slow = asyncio.create_task(actor.ask(SlowAppend(0, gate)))
    await eventually(lambda: actor.in_handler)
    for value in range(1, 4):
        await actor.tell(Append(value))
    snapshot = asyncio.create_task(actor.ask(Snapshot()))
    await eventually(lambda: actor.statistics().depth == 4)
    assert actor.values == []
    gate.set()
    assert await slow == 1
    assert await snapshot == (0, 1, 2, 3)
    await actor.stop()
    stats = actor.statistics()
    assert (stats.processed, stats.failed, stats.depth, stats.running) == (5, 0, 0, False)


async def test_full_mailbox_applies_backpressure_and_try_tell_fails_fast() -> None:
    actor = Log()
    await actor.start()
    gate = asyncio.Event()
    blocker = asyncio.create_task(actor.ask(SlowAppend(0, gate)))
    await eventually(lambda: actor.in_handler)
    for value in range(1, 5):
        actor.try_tell(Append(value))
    with pytest.raises(MailboxFull):
        actor.try_tell(Append(99))
    sender = asyncio.create_task(actor.tell(Append(5)))
    await eventually(lambda: actor.statistics().blocked_senders == 1)
    assert not sender.done(), "tell must wait for room"
    gate.set()
    await sender
    await blocker
    assert await actor.ask(Snapshot()) == (0, 1, 2, 3, 4, 5)
    await actor.stop()


async def test_ask_raises_the_handlers_exception_and_the_actor_keeps_serving() -> None:
    actor = Log()
    await actor.start()
    with pytest.raises(ZeroDivisionError):
        await actor.ask(Divide(0))
    with pytest.raises(UnhandledMessageError, match="Unknown"):
        await actor.ask(Unknown())
    assert await actor.ask(Divide(4)) == 25.0
    assert actor.statistics().failed == 2
    await actor.stop()


async def test_a_failing_tell_is_logged_with_the_actors_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    actor = Log("partition-7")
    await actor.start()
    await actor.tell(Unknown())
    assert await actor.ask(Snapshot()) == ()
    assert "partition-7" in caplog.text
    await actor.stop()


async def test_fatal_error_stops_the_actor_and_notifies_the_supervisor() -> None:
    failures: list[tuple[str, BaseException]] = []
    actor = Log(supervisor=lambda a, e: failures.append((a.name, e)))
    await actor.start()
    gate = asyncio.Event()
    first = asyncio.create_task(actor.ask(SlowAppend(1, gate)))
    await eventually(lambda: actor.in_handler)
    fatal = asyncio.create_task(actor.ask(Corrupt()))
    queued = asyncio.create_task(actor.ask(Snapshot()))
    await eventually(lambda: actor.statistics().depth == 2)
    gate.set()
    assert await first == 1
    with pytest.raises(ActorFatalError):
        await fatal
    with pytest.raises(MailboxClosed):
        await queued
    assert [name for name, _ in failures] == ["log"]
    assert isinstance(actor.failure, ActorFatalError)
    with pytest.raises(MailboxClosed):
        await actor.tell(Append(1))
    await actor.stop()


async def test_stop_drains_by_default() -> None:
    actor = Log()
    await actor.start()
    for value in range(4):
        actor.try_tell(Append(value))
    await actor.stop()
    assert actor.values == [0, 1, 2, 3]
    with pytest.raises(MailboxClosed):
        actor.try_tell(Append(9))
    with pytest.raises(MailboxClosed):
        await actor.ask(Snapshot())


async def test_stop_without_drain_rejects_queued_asks_and_blocked_senders() -> None:
    actor = Log()
    await actor.start()
    gate = asyncio.Event()
    running = asyncio.create_task(actor.ask(SlowAppend(0, gate)))
    await eventually(lambda: actor.in_handler)
    queued = [asyncio.create_task(actor.ask(Snapshot())) for _ in range(4)]
    blocked = asyncio.create_task(actor.ask(Snapshot()))
    await eventually(lambda: actor.statistics().blocked_senders == 1)
    stopping = asyncio.create_task(actor.stop(drain=False))
    await eventually(lambda: all(task.done() for task in [*queued, blocked]))
    for task in [*queued, blocked]:
        with pytest.raises(MailboxClosed):
            await task
    assert not stopping.done(), "the running handler is not cancelled midway"
    gate.set()
    assert await running == 1
    await stopping


async def test_stop_before_start_rejects_everything() -> None:
    actor = Log()
    actor.try_tell(Append(1))
    await actor.stop()
    with pytest.raises(MailboxClosed):
        await actor.tell(Append(2))


async def test_actors_in_a_task_group_leave_no_tasks_behind() -> None:
    before = asyncio.all_tasks()
    async with anyio.create_task_group() as group:
        actors = [Log(f"a{i}") for i in range(3)]
        for actor in actors:
            await actor.start(group)
        for i, actor in enumerate(actors):
            await actor.tell(Append(i))
        for actor in actors:
            await actor.stop()
    assert asyncio.all_tasks() == before
    assert [actor.values for actor in actors] == [[0], [1], [2]]


async def test_cancelling_the_owner_answers_pending_asks() -> None:
    actor = Log()
    gate = asyncio.Event()
    async with anyio.create_task_group() as group:
        await actor.start(group)
        running = asyncio.create_task(actor.ask(SlowAppend(0, gate)))
        await eventually(lambda: actor.in_handler)
        queued = asyncio.create_task(actor.ask(Snapshot()))
        await eventually(lambda: actor.statistics().depth == 1)
        group.cancel_scope.cancel()
    for task in (running, queued):
        with pytest.raises(MailboxClosed):
            await task


async def test_settled_returns_a_later_answer_or_raises_when_the_actor_stops_first() -> None:
    """A handler may return a future it settles later; a caller waiting on it through
    `settled` gets its value, or MailboxClosed once the actor stops without settling it."""
    actor = Log()
    await actor.start()
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[int] = loop.create_future()
    waiting = asyncio.create_task(actor.settled(answered))
    await asyncio.sleep(0)
    answered.set_result(7)
    assert await waiting == 7
    abandoned: asyncio.Future[int] = loop.create_future()
    waiting = asyncio.create_task(actor.settled(abandoned))
    await asyncio.sleep(0)
    assert not waiting.done()
    await actor.stop()
    with pytest.raises(MailboxClosed):
        await waiting
    assert not abandoned.done(), "the future itself is left alone"


async def test_max_wait_is_measured_on_the_injected_clock() -> None:
    from runtime.clock import ManualClock

    clock = ManualClock()
    actor = Log(clock=clock)
    actor.try_tell(Append(1))
    clock.advance(25)
    await actor.start()
    assert await actor.ask(Snapshot()) == (1,)
    assert actor.statistics().max_wait_ms == 25.0
    await actor.stop()


async def test_every_runs_on_the_clock_survives_errors_and_ends_with_the_actor() -> None:
    from runtime.clock import ManualClock

    clock = ManualClock()
    actor = Log(clock=clock)
    rounds: list[int] = []

    def action() -> None:
        rounds.append(clock.monotonic_ms())
        if len(rounds) == 2:
            raise RuntimeError("a failed round")

    await actor.start()
    await actor.ask(Snapshot())
    actor.every(10, action)
    await asyncio.sleep(0)  # the schedule's task arms its first sleep
    for _ in range(4):
        clock.advance(10)
        await eventually(lambda: len(rounds) == clock.monotonic_ms() // 10)
    assert rounds == [10, 20, 30, 40]  # the failure in round 2 did not end the schedule
    await actor.stop()
    clock.advance(100)
    await asyncio.sleep(0)
    assert rounds == [10, 20, 30, 40]
    assert asyncio.all_tasks() == {asyncio.current_task()}


def test_two_handlers_for_one_type_are_refused() -> None:
    with pytest.raises(TypeError, match="two handlers"):

        class Broken(Actor):
            @handles(Append)
            def one(self, message: Append) -> None: ...

            @handles(Append)
            def two(self, message: Append) -> None: ...
