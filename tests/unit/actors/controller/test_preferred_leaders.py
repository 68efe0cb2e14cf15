"""Preferred leaders back soon after their replicas return (issue 23), on a ManualClock: a
returning broker leads its preferred partitions again within leader.imbalance.election.delay.ms
of rejoining their ISRs — never before it is in the ISR, never while fenced or shutting down,
never when auto.leader.rebalance.enable is off or the delay is -1, never twice within one delay
(no ping-pong), with the partitions of one window elected in one pass, and nothing carried over
a controller restart."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actors.controller.messages import (
    ControlledShutdown,
    ControllerConfig,
    ElectPreferredLeaders,
)
from actors.controller.preferred_leaders import PreferredLeaderSchedule
from runtime.clock import ManualClock
from tests.unit.actors.controller.harness import (
    HEARTBEAT_MS,
    SESSION_MS,
    ControllerHarness,
    cluster,
    kill,
    of_type,
)
from wire.errors import ErrorCode
from wire.messages import ControlledShutdownRequest, LeaderAndIsrRequest
from wire.topic import TopicPartition

DELAY_MS = 4 * HEARTBEAT_MS  # harness.pass_time moves in heartbeat-sized steps
ALL = (0, 1, 2)


def config(*, enabled: bool = True, delay_ms: int = DELAY_MS) -> ControllerConfig:
    return ControllerConfig(
        broker_session_timeout_ms=SESSION_MS,
        broker_heartbeat_interval_ms=HEARTBEAT_MS,
        auto_leader_rebalance_enable=enabled,
        leader_imbalance_election_delay_ms=delay_ms,
    )


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[ControllerHarness]:
    harness = ControllerHarness(tmp_path / "controller", config())
    await harness.start()
    yield harness
    await harness.stop()


async def returned(h: ControllerHarness, partitions: int = 1) -> None:
    """Broker 0, the preferred leader of every partition of `t`, dies (broker 1 or 2 leads) and
    registers again: live, but out of every ISR until it catches up."""
    await cluster(h)
    assignments = [[0, 1 + p % 2, 2 - p % 2] for p in range(partitions)]
    await h.create_topic("t", assignments=assignments)
    await kill(h, 0, alive=(1, 2))
    assert await h.register(0) is ErrorCode.NONE
    for p in range(partitions):
        record = h.partition("t", p)
        assert record.leader != 0, record
        assert 0 not in record.isr, record
    h.channels.take()


async def test_a_returning_replica_leads_again_within_the_delay_once_in_the_isr(
    h: ControllerHarness,
) -> None:
    await returned(h)
    await h.pass_time(5 * DELAY_MS, alive=ALL)
    assert h.partition("t").leader == 1, "live but out of the ISR: never elected"

    await h.alter_isr("t", [1, 2, 0])  # broker 1 saw it catch up
    rejoined = h.partition("t")
    await h.pass_time(DELAY_MS - HEARTBEAT_MS, alive=ALL)
    assert h.partition("t").leader == 1, "one pass at the end of the delay"
    await h.pass_time(HEARTBEAT_MS, alive=ALL)

    p = h.partition("t")
    assert (p.leader, p.isr) == (0, rejoined.isr)  # the ISR does not change
    assert p.leader_epoch == rejoined.leader_epoch + 1
    sent = h.channels.take()
    for broker_id in ALL:
        (request,) = of_type(sent, LeaderAndIsrRequest, broker_id)
        (state,) = request.partition_states
        assert (state.leader, state.leader_epoch) == (0, p.leader_epoch)


@pytest.mark.parametrize(
    ("enabled", "delay_ms"),
    [(False, DELAY_MS), (True, -1)],
    ids=["auto.leader.rebalance.enable=false", "leader.imbalance.election.delay.ms=-1"],
)
async def test_no_prompt_election_when_turned_off(
    tmp_path: Path, enabled: bool, delay_ms: int
) -> None:
    h = ControllerHarness(tmp_path / "controller", config(enabled=enabled, delay_ms=delay_ms))
    await h.start()
    try:
        await returned(h)
        await h.alter_isr("t", [1, 2, 0])
        assert not h.controller._ctx.preferred_leaders.armed
        await h.pass_time(3 * DELAY_MS, alive=ALL)
        assert h.partition("t").leader == 1
    finally:
        await h.stop()


async def test_no_election_for_a_replica_fenced_before_the_pass(h: ControllerHarness) -> None:
    await returned(h)
    await h.alter_isr("t", [1, 2, 0])
    assert (await h.heartbeat(0, want_fence=True)).is_fenced
    await h.pass_time(2 * DELAY_MS, alive=(1, 2))
    p = h.partition("t")
    assert (p.leader, p.isr) == (1, (1, 2))
    assert h.controller.statistics().failed == 0  # the pass wrote nothing it could not apply


async def test_no_election_for_a_replica_shutting_down(h: ControllerHarness) -> None:
    await returned(h)
    await h.alter_isr("t", [1, 2, 0])
    response = await h.controller.ask(
        ControlledShutdown(ControlledShutdownRequest(broker_id=0, broker_epoch=h.epochs[0]))
    )
    assert response.error is ErrorCode.NONE
    await h.pass_time(2 * DELAY_MS, alive=ALL)
    p = h.partition("t")
    assert (p.leader, p.isr) == (1, (1, 2))
    assert h.controller.statistics().failed == 0  # the pass wrote nothing it could not apply


async def test_a_replica_that_left_again_is_elected_only_a_delay_after_its_next_return(
    h: ControllerHarness,
) -> None:
    """No ping-pong: a replica that drops out of the ISR before the pass is not elected, and its
    next return waits a whole delay again."""
    await returned(h)
    await h.alter_isr("t", [1, 2, 0])
    await h.pass_time(DELAY_MS // 2, alive=ALL)
    await h.alter_isr("t", [1, 2])  # fell behind again
    await h.pass_time(DELAY_MS, alive=ALL)  # the pass came and went
    assert h.partition("t").leader == 1
    await h.alter_isr("t", [1, 2, 0])
    back_ms = h.clock.monotonic_ms()
    await h.pass_time(DELAY_MS - HEARTBEAT_MS, alive=ALL)
    assert h.partition("t").leader == 1
    await h.pass_time(HEARTBEAT_MS, alive=ALL)
    assert h.partition("t").leader == 0
    assert h.clock.monotonic_ms() - back_ms == DELAY_MS


async def test_two_preferred_elections_of_a_partition_are_a_delay_apart(
    h: ControllerHarness,
) -> None:
    """The preferred replica leads, dies, and is back in the ISR at once: it leads again only a
    whole delay after its return, however quick that was."""
    await returned(h)
    await h.alter_isr("t", [1, 2, 0])
    await h.pass_time(DELAY_MS, alive=ALL)
    assert h.partition("t").leader == 0
    elected_ms = h.clock.monotonic_ms()
    assert (await h.heartbeat(0, want_fence=True)).is_fenced
    assert await h.register(0) is ErrorCode.NONE
    await h.alter_isr("t", [1, 2, 0])
    p = h.partition("t")
    assert (p.leader, p.isr) == (1, (1, 2, 0))
    await h.pass_time(DELAY_MS - HEARTBEAT_MS, alive=ALL)
    assert h.partition("t").leader == 1
    await h.pass_time(HEARTBEAT_MS, alive=ALL)
    assert h.partition("t").leader == 0
    assert h.clock.monotonic_ms() - elected_ms >= DELAY_MS


async def test_returns_within_one_delay_are_elected_in_one_pass(h: ControllerHarness) -> None:
    await returned(h, partitions=3)
    for index in range(3):
        leader = h.partition("t", index).leader
        await h.alter_isr("t", [leader, 3 - leader, 0], index=index)
        await h.pass_time(HEARTBEAT_MS, alive=ALL)
    assert {h.partition("t", i).leader for i in range(3)} == {1, 2}
    h.channels.take()
    await h.pass_time(DELAY_MS - 3 * HEARTBEAT_MS, alive=ALL)
    assert [h.partition("t", i).leader for i in range(3)] == [0, 0, 0]
    # One pass: one LeaderAndIsr to the new leader, naming all three partitions.
    (request,) = of_type(h.channels.take(), LeaderAndIsrRequest, 0)
    assert sorted(s.partition_index for s in request.partition_states) == [0, 1, 2]


async def test_a_restarted_controller_does_not_elect_what_its_predecessor_had_pending(
    tmp_path: Path,
) -> None:
    """The new controller's brokers are on a grace session, not yet known to be alive: nothing
    pending before the restart is elected by it (the periodic check remains)."""
    first = ControllerHarness(tmp_path / "controller", config())
    await first.start()
    await returned(first)
    await first.alter_isr("t", [1, 2, 0])
    assert first.controller._ctx.preferred_leaders.pending == (TopicPartition("t", 0),)
    await first.stop()

    second = ControllerHarness(tmp_path / "controller", config())
    second.epochs, second.incarnations = first.epochs, first.incarnations
    await second.start()
    try:
        await second.pass_time(3 * DELAY_MS, alive=ALL)
        p = second.partition("t")
        assert (p.leader, p.isr) == (1, (1, 2, 0))
    finally:
        await second.stop()


# -- the schedule alone ----------------------------------------------------------------------------


async def test_the_schedule_keeps_one_window_until_its_pass_has_run() -> None:
    clock = ManualClock()
    told: list[ElectPreferredLeaders] = []
    schedule = PreferredLeaderSchedule(clock, 100, told.append)
    a, b, c = (TopicPartition("t", i) for i in range(3))
    schedule.rejoined([])
    assert not schedule.armed
    schedule.rejoined([a])
    clock.advance(60)
    schedule.rejoined([b, a])  # joins the open window; a second return changes nothing
    clock.advance(39)
    assert told == []
    clock.advance(1)
    assert told == [ElectPreferredLeaders()]
    schedule.rejoined([c])  # between the ring and the pass: joins that pass, arms nothing
    clock.advance(1_000)
    assert len(told) == 1
    assert schedule.take() == [a, b, c]
    assert (schedule.take(), schedule.armed) == ([], False)
    schedule.rejoined([a])  # a new window, a whole delay from now
    clock.advance(99)
    assert len(told) == 1
    clock.advance(1)
    assert len(told) == 2
    schedule.close()
    assert schedule.pending == ()


def test_the_delay_is_a_property_and_is_checked() -> None:
    read = ControllerConfig.from_properties({"leader.imbalance.election.delay.ms": "250"})
    assert read.leader_imbalance_election_delay_ms == 250
    assert ControllerConfig().leader_imbalance_election_delay_ms == 1_000
    for bad in (0, -2):
        with pytest.raises(ValueError, match=r"leader\.imbalance\.election\.delay\.ms"):
            ControllerConfig(leader_imbalance_election_delay_ms=bad)
