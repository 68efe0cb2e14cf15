"""Registration of a new process of a broker and its log directories' identities: on the same
directories it fences a live old incarnation at once, otherwise it waits for the old session
(issue 18, finding 10); back without a directory it registered before, it is never elected on
what may be an empty log (finding 9)."""

from __future__ import annotations

from typing import Final

from actors.views import NO_LEADER
from tests.unit.actors.controller.harness import (
    BROKERS,
    HEARTBEAT_MS,
    SESSION_MS,
    ControllerHarness,
)
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


async def test_a_broker_back_without_its_log_dir_is_never_elected_on_an_empty_log(
    harness: ControllerHarness,
) -> None:
    """Issue 18, finding 9: broker 0 is the last ISR member of a leaderless partition; it comes
    back with its directory replaced (a new directory id). It must not lead on an empty log: the
    ISR empties and the partition stays leaderless, where it used to be elected at once."""
    await registered_with_dirs(harness)
    await harness.create_topic("t", 1, 3)
    # Brokers 1 and 2 die first, then 0: the ISR shrinks to [0], which then goes leaderless.
    await harness.pass_time(2 * SESSION_MS, alive=[0])
    assert harness.partition("t", 0).isr == (0,)
    await harness.pass_time(2 * SESSION_MS, alive=[])
    assert harness.partition("t", 0).leader == NO_LEADER
    assert harness.partition("t", 0).isr == (0,)
    replaced = [bytes([77]) * 16]
    assert await harness.register(0, log_dirs=replaced) is ErrorCode.NONE
    p = harness.partition("t", 0)
    assert p.leader == NO_LEADER, p
    assert p.isr == (), p
    # Nothing elects it later either, nor the others when they return out of the ISR.
    for broker_id in (1, 2):
        assert await harness.register(broker_id, log_dirs=DIRS[broker_id]) is ErrorCode.NONE
    await harness.pass_time(2 * HEARTBEAT_MS, alive=BROKERS)
    assert harness.partition("t", 0).leader == NO_LEADER


async def test_a_broker_back_with_its_log_dirs_is_elected_again(
    harness: ControllerHarness,
) -> None:
    """The control: the same directory ids (its data is there) make it electable at once."""
    await registered_with_dirs(harness)
    await harness.create_topic("t", 1, 3)
    await harness.pass_time(2 * SESSION_MS, alive=[0])
    await harness.pass_time(2 * SESSION_MS, alive=[])
    assert await harness.register(0, log_dirs=DIRS[0]) is ErrorCode.NONE
    p = harness.partition("t", 0)
    assert p.leader == 0, p
    assert p.isr == (0,), p
