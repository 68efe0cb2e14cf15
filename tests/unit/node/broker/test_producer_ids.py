"""ProducerIdManager on a ManualClock against a scripted controller: ids unique and increasing
across blocks, the prefetch at 90% (without making anyone wait), one fetch shared by concurrent
callers, retry after a backoff, the bounded wait and its error, refused blocks, stop(); and the
InitProducerId rules (new ids, KIP-360 epoch bumps, transactional ids refused)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from node.broker.producer_ids import (
    MAX_PRODUCER_EPOCH,
    ProducerIdManager,
    ProducerIdsUnavailableError,
)
from runtime.clock import ManualClock
from wire.errors import ErrorCode
from wire.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)

BACKOFF_MS = 100
WAIT_MS = 1_000
SEED = 20261122

Answer = Callable[[AllocateProducerIdsRequest], AllocateProducerIdsResponse]


@dataclass
class FakeController:
    """Allocates consecutive blocks of `block_size`; `gate`, when cleared, holds every answer
    until it is set; `script` answers (or raises) for the next requests before that."""

    block_size: int = 1_000
    next_start: int = 0
    requests: list[AllocateProducerIdsRequest] = field(default_factory=list)
    script: list[Answer | Exception] = field(default_factory=list)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: int = 0

    def __post_init__(self) -> None:
        self.gate.set()

    async def send(self, request: AllocateProducerIdsRequest) -> AllocateProducerIdsResponse:
        self.requests.append(request)
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.script:
            step = self.script.pop(0)
            if isinstance(step, Exception):
                raise step
            return step(request)
        start, self.next_start = self.next_start, self.next_start + self.block_size
        return AllocateProducerIdsResponse(producer_id_start=start, producer_id_len=self.block_size)


def answer(code: ErrorCode = ErrorCode.NONE, start: int = -1, length: int = 0) -> Answer:
    return lambda request: AllocateProducerIdsResponse(
        error_code=code, producer_id_start=start, producer_id_len=length
    )


@dataclass
class Setup:
    clock: ManualClock
    controller: FakeController
    manager: ProducerIdManager
    broker_epoch: list[int]


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    clock = ManualClock()
    controller = FakeController()
    epoch = [5]
    manager = ProducerIdManager(
        controller.send,
        broker_id=1,
        broker_epoch=lambda: epoch[0],
        clock=clock,
        retry_backoff_ms=BACKOFF_MS,
        block_wait_ms=WAIT_MS,
    )
    yield Setup(clock, controller, manager, epoch)
    await manager.stop()


async def turns(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


# -- blocks ----------------------------------------------------------------------------------------


async def test_ids_are_unique_and_increasing_across_blocks(setup: Setup) -> None:
    ids = [await setup.manager.generate() for _ in range(2_500)]
    assert ids == list(range(2_500))
    # The first block on demand, then one prefetch per block at 90%: 900 and 1900.
    assert len(setup.controller.requests) == 3
    assert {(r.broker_id, r.broker_epoch) for r in setup.controller.requests} == {(1, 5)}


async def test_the_next_block_is_prefetched_at_90_percent_without_waiting(setup: Setup) -> None:
    s = setup
    s.controller.next_start = 7_000
    assert await s.manager.generate() == 7_000
    s.controller.gate.clear()  # the prefetch will hang: ids must still flow from the block
    for expected in range(7_001, 7_900):
        assert await s.manager.generate() == expected
    await turns()
    assert len(s.controller.requests) == 1, "no prefetch before 90% of the block is used"
    assert await s.manager.generate() == 7_900  # the 901st id of the block
    await until(lambda: len(s.controller.requests) == 2, "the prefetch")
    for expected in range(7_901, 8_000):
        assert await s.manager.generate() == expected
    assert len(s.controller.requests) == 2, "one fetch at a time"
    s.controller.gate.set()
    await turns()
    # The prefetched block is used once the current one is exhausted, not before.
    assert [await s.manager.generate() for _ in range(3)] == [8_000, 8_001, 8_002]
    assert len(s.controller.requests) == 2


async def test_concurrent_callers_share_the_first_fetch_and_get_distinct_ids(
    setup: Setup,
) -> None:
    s = setup
    s.controller.block_size = 10  # fewer ids than callers: they need a second block too
    s.controller.gate.clear()
    callers = [asyncio.ensure_future(s.manager.generate()) for _ in range(25)]
    await turns()
    assert len(s.controller.requests) == 1
    assert not any(c.done() for c in callers)
    s.controller.gate.set()
    ids = await asyncio.gather(*callers)
    assert sorted(ids) == list(range(30))[: len(ids)]
    assert len(set(ids)) == 25
    assert len(s.controller.requests) == 3  # blocks [0, 10), [10, 20), [20, 30)


# -- failures --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "failure",
    [ConnectionError("controller unreachable"), answer(ErrorCode.STALE_BROKER_EPOCH)],
    ids=["transport", "stale-epoch"],
)
async def test_a_failed_fetch_is_retried_after_the_backoff(
    setup: Setup, failure: Answer | Exception
) -> None:
    s = setup
    s.controller.script = [failure]
    caller = asyncio.ensure_future(s.manager.generate())
    await until(lambda: len(s.controller.requests) == 1, "the first fetch")
    await turns()
    assert not caller.done()
    s.clock.advance(BACKOFF_MS - 1)
    await turns()
    assert len(s.controller.requests) == 1, "no retry before the backoff"
    s.broker_epoch[0] = 6  # re-registered meanwhile: the retry carries the new epoch
    s.clock.advance(1)
    await until(caller.done, "the retry")
    assert caller.result() == 0
    assert [r.broker_epoch for r in s.controller.requests] == [5, 6]


async def test_no_block_within_the_bound_is_a_retriable_error(setup: Setup) -> None:
    s = setup
    s.controller.script = [ConnectionError("down")] * 100
    caller = asyncio.ensure_future(s.manager.init_producer_id(init()))
    for _ in range(WAIT_MS // BACKOFF_MS):
        await turns()
        assert not caller.done()
        s.clock.advance(BACKOFF_MS)
    await until(caller.done, "the bound")
    response = caller.result()
    assert response.error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert response.error.retriable
    assert (response.producer_id, response.producer_epoch) == (-1, -1)
    # One attempt per backoff while someone waited (the last one starting as the caller gave
    # up, for the client's retry), and none while nobody needs a block.
    await turns()
    attempts = len(s.controller.requests)
    assert attempts == WAIT_MS // BACKOFF_MS + 1, attempts
    s.clock.advance(10 * BACKOFF_MS)
    await turns()
    assert len(s.controller.requests) == attempts
    # Once the controller answers again, the next caller gets an id.
    s.controller.script = []
    assert await s.manager.generate() == 0


@pytest.mark.parametrize(
    "bad",
    [
        answer(start=-5, length=1_000),
        answer(start=0, length=0),
        answer(start=2**63 - 10, length=1_000),
        answer(start=500, length=1_000),  # overlaps the first block [0, 1000)
    ],
    ids=["negative", "empty", "past-int64", "overlapping"],
)
async def test_an_unusable_block_is_refused_like_a_failure(setup: Setup, bad: Answer) -> None:
    s = setup
    assert [await s.manager.generate() for _ in range(901)] == list(range(901))
    await until(lambda: len(s.controller.requests) == 2, "the first prefetch")
    await turns()
    # That prefetch got [1000, 2000); the controller spoils the answer to the next one.
    s.controller.script = [bad]
    ids = [await s.manager.generate() for _ in range(1_000)]
    assert ids == list(range(901, 1_901))
    await until(lambda: len(s.controller.requests) == 3, "the second prefetch")
    await turns()
    s.clock.advance(BACKOFF_MS)
    ids = [await s.manager.generate() for _ in range(200)]
    assert ids == list(range(1_901, 2_101)), "the spoiled block was never used"
    assert len(s.controller.requests) == 4


async def test_stop_cancels_the_fetch_and_fails_the_waiters(setup: Setup) -> None:
    s = setup
    s.controller.gate.clear()
    caller = asyncio.ensure_future(s.manager.generate())
    await until(lambda: len(s.controller.requests) == 1, "the first fetch")
    await s.manager.stop()
    await until(caller.done, "the waiter to fail")
    with pytest.raises(ProducerIdsUnavailableError) as failed:
        caller.result()
    assert failed.value.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert s.controller.cancelled == 1
    with pytest.raises(ProducerIdsUnavailableError):
        await s.manager.generate()
    assert len(s.controller.requests) == 1


# -- InitProducerId --------------------------------------------------------------------------------


def init(
    producer_id: int = -1, producer_epoch: int = -1, transactional_id: str | None = None
) -> InitProducerIdRequest:
    return InitProducerIdRequest(
        transactional_id=transactional_id,
        transaction_timeout_ms=60_000,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )


async def test_new_producers_get_fresh_ids_with_epoch_zero(setup: Setup) -> None:
    responses = [await setup.manager.init_producer_id(init()) for _ in range(3)]
    assert [(r.error, r.producer_id, r.producer_epoch) for r in responses] == [
        (ErrorCode.NONE, 0, 0),
        (ErrorCode.NONE, 1, 0),
        (ErrorCode.NONE, 2, 0),
    ]


@pytest.mark.parametrize(
    ("producer_id", "producer_epoch", "expected"),
    [
        (42, 0, (ErrorCode.NONE, 42, 1)),
        (42, 7, (ErrorCode.NONE, 42, 8)),
        (42, MAX_PRODUCER_EPOCH - 1, (ErrorCode.NONE, 42, MAX_PRODUCER_EPOCH)),
        (42, MAX_PRODUCER_EPOCH, (ErrorCode.NONE, 0, 0)),  # exhausted: a new id
        (42, -1, (ErrorCode.INVALID_REQUEST, -1, -1)),
        (-1, 3, (ErrorCode.INVALID_REQUEST, -1, -1)),
        (-2, -1, (ErrorCode.INVALID_REQUEST, -1, -1)),
        (5, -2, (ErrorCode.INVALID_REQUEST, -1, -1)),
    ],
)
async def test_epoch_bumps(
    setup: Setup, producer_id: int, producer_epoch: int, expected: tuple[ErrorCode, int, int]
) -> None:
    response = await setup.manager.init_producer_id(init(producer_id, producer_epoch))
    assert (response.error, response.producer_id, response.producer_epoch) == expected
    # Only a new id costs a block.
    assert len(setup.controller.requests) == (1 if expected[1] == 0 else 0)


@pytest.mark.parametrize(
    ("transactional_id", "code"),
    [
        ("payments", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ("", ErrorCode.INVALID_REQUEST),
    ],
)
async def test_transactional_producers_are_refused_for_good(
    setup: Setup, transactional_id: str, code: ErrorCode
) -> None:
    response = await setup.manager.init_producer_id(init(transactional_id=transactional_id))
    assert response == InitProducerIdResponse.error_response(code)
    assert not code.retriable
    assert setup.controller.requests == []


async def test_random_interleavings_never_repeat_an_id() -> None:
    """Callers arrive in random bursts while the controller answers late or fails; every id
    handed out is distinct and ids come from the controller's blocks only."""
    rng = random.Random(SEED)
    clock = ManualClock()
    controller = FakeController(block_size=7)
    manager = ProducerIdManager(
        controller.send, 0, lambda: 1, clock, BACKOFF_MS, block_wait_ms=1_000 * BACKOFF_MS
    )
    seen: list[int] = []
    try:
        for _ in range(60):
            if rng.random() < 0.2:
                controller.script.append(ConnectionError("flaky"))
            callers = [asyncio.ensure_future(manager.generate()) for _ in range(rng.randint(1, 6))]
            await turns(rng.randint(0, 5))
            clock.advance(rng.choice([0, BACKOFF_MS]))
            for caller in callers:
                for _ in range(100):
                    if caller.done():
                        break
                    clock.advance(BACKOFF_MS)
                    await turns()
                assert caller.done(), f"seed={SEED}"
                seen.append(caller.result())
    finally:
        await manager.stop()
    assert len(seen) == len(set(seen)), f"seed={SEED}: repeated ids"
    assert max(seen) < controller.next_start, f"seed={SEED}"
