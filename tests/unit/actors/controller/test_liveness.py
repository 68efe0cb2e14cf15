"""Registration of a new process of a live broker (issue 18, finding 10): on the same log
directories it fences the old incarnation at once; otherwise it waits for the old session."""

from __future__ import annotations

from typing import Final

from tests.unit.actors.controller.harness import BROKERS, ControllerHarness
from wire.errors import ErrorCode

DIRS: Final = {b: [bytes([b + 1]) * 16] for b in BROKERS}


async def registered_with_dirs(harness: ControllerHarness) -> None:
    for broker_id in BROKERS:
        assert await harness.register(broker_id, log_dirs=DIRS[broker_id]) is ErrorCode.NONE
    harness.channels.take()


async def test_a_restart_on_the_same_log_dirs_fences_the_old_incarnation_at_once(
    harness: ControllerHarness,
) -> None:
    await registered_with_dirs(harness)
    await harness.create_topic("t", 3, 3)
    led_by_0 = [i for i in range(3) if harness.partition("t", i).leader == 0]
    assert led_by_0, "broker 0 leads some partition"
    old_epoch = harness.epochs[0]
    before = {i: harness.partition("t", i) for i in range(3)}
    # No time passes: the old session is still alive when the new process registers.
    assert await harness.register(0, log_dirs=DIRS[0]) is ErrorCode.NONE
    assert harness.epochs[0] > old_epoch
    for i in range(3):
        p = harness.partition("t", i)
        if i in led_by_0:
            assert p.leader != 0, p
            assert p.leader_epoch > before[i].leader_epoch, p
        # The dead incarnation left every ISR; the new one rejoins only by catching up.
        assert 0 not in p.isr, p
    # The old incarnation's heartbeats are refused.
    new_epoch = harness.epochs[0]
    harness.epochs[0] = old_epoch
    assert (await harness.heartbeat(0)).error is ErrorCode.STALE_BROKER_EPOCH
    harness.epochs[0] = new_epoch
    assert (await harness.heartbeat(0)).error is ErrorCode.NONE


async def test_a_new_process_on_other_log_dirs_waits_for_the_old_session(
    harness: ControllerHarness,
) -> None:
    await registered_with_dirs(harness)
    other = [bytes([99]) * 16]
    assert await harness.register(0, log_dirs=other) is ErrorCode.DUPLICATE_BROKER_REGISTRATION
    # A broker that registered no dirs proves nothing either.
    assert await harness.register(1, log_dirs=()) is ErrorCode.DUPLICATE_BROKER_REGISTRATION
