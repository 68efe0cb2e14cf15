"""Purgatory: completion by key, by expiry, exactly once, several keys, bounded watcher lists."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from runtime.clock import ManualClock
from runtime.purgatory import DelayedOperation, Purgatory


class Waiter(DelayedOperation):
    """Completes when `ready()` holds; records how it ended."""

    __slots__ = ("completions", "expirations", "name", "ready")

    def __init__(self, name: str, delay_ms: int, ready: Callable[[], bool]) -> None:
        super().__init__(delay_ms)
        self.name = name
        self.ready = ready
        self.completions = 0
        self.expirations = 0

    def try_complete(self) -> bool:
        return self.ready() and self.force_complete()

    def on_complete(self) -> None:
        self.completions += 1

    def on_expiration(self) -> None:
        self.expirations += 1


def make(clock: ManualClock, **kwargs: int) -> Purgatory[str, Waiter]:
    return Purgatory("test", clock, **kwargs)


async def test_completes_when_its_key_is_checked() -> None:
    clock = ManualClock()
    purgatory = make(clock)
    state = {"hw": 0}
    op = Waiter("produce", 1_000, lambda: state["hw"] >= 10)
    assert not purgatory.try_complete_else_watch(op, ["p0"])
    assert (purgatory.watched, purgatory.delayed) == (1, 1)
    assert purgatory.check_and_complete("p0") == 0
    state["hw"] = 10
    assert purgatory.check_and_complete("p0") == 1
    assert (op.completions, op.expirations) == (1, 0)
    assert (purgatory.watched, purgatory.delayed) == (0, 0)
    clock.advance(2_000)
    assert (op.completions, op.expirations) == (1, 0), "a completed operation never expires"


async def test_completes_at_once_when_already_satisfiable() -> None:
    purgatory = make(ManualClock())
    op = Waiter("fetch", 500, lambda: True)
    assert purgatory.try_complete_else_watch(op, ["p0"])
    assert (op.completions, purgatory.watched, purgatory.delayed) == (1, 0, 0)


async def test_expires_at_its_deadline_exactly_once() -> None:
    clock = ManualClock(start_ms=7)
    purgatory = make(clock)
    op = Waiter("fetch", 500, lambda: False)
    purgatory.try_complete_else_watch(op, ["p0", "p1"])
    clock.advance(499)
    assert op.completions == 0
    clock.advance(1)
    assert (op.completions, op.expirations) == (1, 1)
    assert purgatory.delayed == 0
    assert purgatory.check_and_complete("p0") == 0
    assert purgatory.watched == 1, "p1's stale entry waits for a check or a purge"
    assert purgatory.purge_completed() == 1
    assert purgatory.watched == 0


async def test_operation_on_several_keys_completes_once() -> None:
    purgatory = make(ManualClock())
    ready = {"flag": False}
    op = Waiter("multi", 1_000, lambda: ready["flag"])
    purgatory.try_complete_else_watch(op, ["a", "b", "c"])
    assert purgatory.watched == 3
    ready["flag"] = True
    assert purgatory.check_and_complete("b") == 1
    assert purgatory.check_and_complete("a") == 0
    assert purgatory.check_and_complete("c") == 0
    assert op.completions == 1
    assert purgatory.watched == 0


async def test_operations_watched_from_on_complete_are_kept() -> None:
    purgatory = make(ManualClock())
    follow_up = Waiter("follow-up", 1_000, lambda: False)

    class Chained(Waiter):
        __slots__ = ()

        def on_complete(self) -> None:
            super().on_complete()
            purgatory.try_complete_else_watch(follow_up, ["k"])

    first = Chained("first", 1_000, lambda: True)
    # Watch first while it cannot complete, then let it complete through the key.
    gate = {"open": False}
    first.ready = lambda: gate["open"]
    purgatory.try_complete_else_watch(first, ["k"])
    gate["open"] = True
    assert purgatory.check_and_complete("k") == 1
    assert purgatory.watched == 1
    assert purgatory.delayed == 1


async def test_completion_and_expiry_race_exactly_once() -> None:
    seed = 1122
    rng = random.Random(seed)
    clock = ManualClock()
    purgatory = make(clock, purge_interval=50)
    ready: set[str] = set()
    ops: list[Waiter] = []
    completed_at: dict[str, int] = {}
    keys = [f"tp{i}" for i in range(8)]

    class Tracked(Waiter):
        __slots__ = ()

        def on_complete(self) -> None:
            super().on_complete()
            assert self.name not in completed_at, f"{self.name} completed twice (seed {seed})"
            completed_at[self.name] = clock.monotonic_ms()

    def is_ready(name: str) -> Callable[[], bool]:
        return lambda: name in ready

    for i in range(3_000):
        name = f"op{i}"
        tracked = Tracked(name, rng.randrange(1, 200), is_ready(name))
        ops.append(tracked)
        purgatory.try_complete_else_watch(tracked, rng.sample(keys, rng.randrange(1, 4)))
        for _ in range(rng.randrange(0, 3)):
            ready.add(f"op{rng.randrange(0, i + 1)}")
            purgatory.check_and_complete(rng.choice(keys))
        clock.advance(rng.choice([0, 0, 1, 5]))
    clock.advance(1_000)
    for op in ops:
        assert op.completions == 1, f"{op.name}: {op.completions} completions (seed {seed})"
        assert op.expirations <= 1
        if op.expirations:
            assert completed_at[op.name] == op.deadline_ms, f"{op.name} expired late (seed {seed})"
        else:
            assert completed_at[op.name] <= op.deadline_ms, f"{op.name} (seed {seed})"
    assert purgatory.delayed == 0


async def test_watcher_lists_stay_bounded_when_keys_are_never_checked() -> None:
    purgatory = make(ManualClock(), purge_interval=100)
    largest = 0
    for i in range(5_000):
        op = Waiter(f"op{i}", 60_000, lambda: False)
        purgatory.try_complete_else_watch(op, [f"hot{i}", "cold"])
        op.force_complete()  # completed elsewhere; "cold" is never checked
        largest = max(largest, purgatory.watched)
    assert largest <= 2 * (100 + 2), f"watcher lists grew to {largest}"
    assert purgatory.delayed == 0


async def test_an_operation_needs_a_key() -> None:
    purgatory = make(ManualClock())
    with pytest.raises(ValueError, match="key"):
        purgatory.try_complete_else_watch(Waiter("x", 10, lambda: False), [])
