"""Consumer groups of the new protocol (KIP-848) in one shard, on a manual clock over an in-memory
log: join, a second member's rebalance with revocation before reassignment, fencing, session and
rebalance timeouts, leave, the assignors, offset commits by member epoch, the classic APIs on a
consumer group, ConsumerGroupDescribe, and a new shard continuing the group from the records."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable

import pytest

from actors.group.consumer_describe import ConsumerDescribe
from actors.group.consumer_group import ConsumerGroupState, MemberState
from actors.group.consumer_heartbeat import ConsumerHeartbeat
from actors.group.shard import Beat, DeleteGroups, GroupShard, Join, ListAll
from runtime.clock import ManualClock
from tests.unit.actors.group.shard_harness import (
    CONFIG,
    MemoryOffsetsLog,
    commit,
    join_request,
    result,
    stable_group,
    start_shard,
    turns,
)
from wire.consumer_group_records import ConsumerGroupKey
from wire.errors import ErrorCode
from wire.group_records import iter_group_records
from wire.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupTopicPartitions,
    HeartbeatRequest,
)

ORDERS = b"\x01" * 16
TOPICS = {"orders": (ORDERS, 4)}
REBALANCE_MS = 30_000


def heartbeat(
    member_id: str,
    epoch: int,
    owned: Iterable[int] | None = None,
    *,
    assignor: str | None = None,
    instance_id: str | None = None,
    topics: dict[str, tuple[bytes, int]] | None = None,
) -> ConsumerHeartbeat:
    """A join (epoch 0: the full request) or a heartbeat reporting `owned` partitions."""
    joining = epoch == 0
    partitions = (
        None
        if owned is None
        else [ConsumerGroupTopicPartitions(topic_id=ORDERS, partitions=sorted(owned))]
    )
    request = ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_id=member_id,
        member_epoch=epoch,
        instance_id=instance_id,
        rebalance_timeout_ms=REBALANCE_MS if joining else -1,
        subscribed_topic_names=["orders"] if joining else None,
        server_assignor=assignor,
        topic_partitions=[] if joining else partitions,
    )
    return ConsumerHeartbeat(request, f"client-{member_id}", "/127.0.0.1", topics or TOPICS)


async def send(shard: GroupShard, message: ConsumerHeartbeat) -> ConsumerGroupHeartbeatResponse:
    return await result(await shard.ask(message))


def assigned(response: ConsumerGroupHeartbeatResponse) -> set[int] | None:
    if response.assignment is None:
        return None
    return {p for tp in response.assignment.topic_partitions for p in tp.partitions}


def check_exclusive(shard: GroupShard) -> None:
    """No partition is held (assigned or pending revocation) by two members at once."""
    held: dict[tuple[bytes, int], str] = {}
    for group in shard._state.consumer.groups.values():
        for member in group.members.values():
            for assignment in (member.assigned, member.pending_revocation):
                for topic_id, partitions in assignment.items():
                    for p in partitions:
                        assert (topic_id, p) not in held, f"{p} held by {held[(topic_id, p)]} too"
                        held[(topic_id, p)] = member.member_id


async def test_a_member_joins_and_gets_every_partition(shard: GroupShard) -> None:
    answer = await send(shard, heartbeat("a", 0))
    assert answer.error_code == ErrorCode.NONE
    assert (answer.member_id, answer.member_epoch) == ("a", 1)
    assert answer.heartbeat_interval_ms == CONFIG.group_consumer_heartbeat_interval_ms
    assert assigned(answer) == {0, 1, 2, 3}
    group = shard._state.consumer.groups["g"]
    assert (group.group_epoch, group.assignment_epoch, group.state) == (
        1,
        1,
        ConsumerGroupState.STABLE,
    )
    # Nothing changes on a plain heartbeat: no assignment in the answer, same epoch.
    again = await send(shard, heartbeat("a", 1, {0, 1, 2, 3}))
    assert (again.member_epoch, again.assignment) == (1, None)


async def test_v0_member_gets_its_id_from_the_coordinator(shard: GroupShard) -> None:
    answer = await send(shard, heartbeat("", 0))
    assert answer.error_code == ErrorCode.NONE
    assert answer.member_id
    assert answer.member_id in shard._state.consumer.groups["g"].members


async def test_second_member_gets_partitions_only_after_revocation(shard: GroupShard) -> None:
    await send(shard, heartbeat("a", 0))
    joined = await send(shard, heartbeat("b", 0))
    # b is at the new epoch, but its target partitions are still a's: it gets none yet.
    assert (joined.member_epoch, assigned(joined)) == (2, set())
    check_exclusive(shard)
    b = shard._state.consumer.groups["g"].members["b"]
    assert b.state == MemberState.UNRELEASED_PARTITIONS

    # a is told to keep two partitions: it must revoke the others, at its old epoch.
    told = await send(shard, heartbeat("a", 1, {0, 1, 2, 3}))
    assert told.member_epoch == 1
    keep = assigned(told)
    assert keep is not None
    assert len(keep) == 2
    a = shard._state.consumer.groups["g"].members["a"]
    assert a.state == MemberState.UNREVOKED_PARTITIONS
    check_exclusive(shard)

    # b heartbeats before a acknowledges: still nothing for b.
    waiting = await send(shard, heartbeat("b", 2, set()))
    assert (waiting.member_epoch, waiting.assignment) == (2, None)
    # a still reports the revoked partitions: no progress.
    still = await send(shard, heartbeat("a", 1, {0, 1, 2, 3}))
    assert still.member_epoch == 1
    # a has revoked them: it moves to epoch 2.
    acked = await send(shard, heartbeat("a", 1, keep))
    assert acked.member_epoch == 2
    check_exclusive(shard)
    # Now b gets the released partitions.
    given = await send(shard, heartbeat("b", 2, set()))
    assert assigned(given) == {0, 1, 2, 3} - keep
    check_exclusive(shard)
    assert shard._state.consumer.groups["g"].state == ConsumerGroupState.STABLE


async def test_fenced_and_unknown_members(shard: GroupShard) -> None:
    await send(shard, heartbeat("a", 0))
    ahead = await send(shard, heartbeat("a", 5, {0}))
    assert ahead.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    unknown = await send(shard, heartbeat("z", 1, set()))
    assert unknown.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    await send(shard, heartbeat("b", 0))
    await send(shard, heartbeat("a", 1, {0, 1, 2, 3}))
    keep = shard._state.consumer.groups["g"].members["a"].assigned[ORDERS]
    await send(shard, heartbeat("a", 1, keep))  # a is at epoch 2, its previous epoch 1
    # The previous epoch is accepted while a owns only assigned partitions (a lost answer) ...
    lost = await send(shard, heartbeat("a", 1, keep))
    assert lost.error_code == ErrorCode.NONE
    # ... not with partitions it no longer has.
    stale = await send(shard, heartbeat("a", 1, {0, 1, 2, 3}))
    assert stale.error_code == ErrorCode.FENCED_MEMBER_EPOCH


async def test_invalid_requests(shard: GroupShard) -> None:
    no_timeout = heartbeat("a", 0)
    request = dataclasses.replace(no_timeout.request, rebalance_timeout_ms=-1)
    answer = await send(shard, dataclasses.replace(no_timeout, request=request))
    assert answer.error_code == ErrorCode.INVALID_REQUEST
    unsupported = await send(shard, heartbeat("a", 0, assignor="sticky"))
    assert unsupported.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    bad_epoch = await send(shard, heartbeat("a", -3, set()))
    assert bad_epoch.error_code == ErrorCode.INVALID_REQUEST
    assert "g" not in shard._state.consumer.groups


async def test_session_expiry_removes_member(shard: GroupShard, clock: ManualClock) -> None:
    await send(shard, heartbeat("a", 0))
    await send(shard, heartbeat("b", 0))
    group = shard._state.consumer.groups["g"]
    clock.advance(CONFIG.group_consumer_session_timeout_ms - 1)
    told = await send(shard, heartbeat("a", 1, {0, 1, 2, 3}))  # b does not heartbeat
    keep = assigned(told)
    assert keep is not None
    await turns()
    assert set(group.members) == {"a", "b"}
    clock.advance(1)
    await turns()
    assert set(group.members) == {"a"}  # b's session ran out; a's was renewed
    assert group.group_epoch == 3
    # a acknowledges the revocation it was asked for, and then gets every partition back.
    back = await send(shard, heartbeat("a", 1, keep))
    assert back.member_epoch == 3
    assert assigned(back) == {0, 1, 2, 3}


async def test_member_that_never_revokes_is_removed(shard: GroupShard, clock: ManualClock) -> None:
    await send(shard, heartbeat("a", 0))
    await send(shard, heartbeat("b", 0))
    await send(shard, heartbeat("a", 1, {0, 1, 2, 3}))
    clock.advance(REBALANCE_MS)
    await turns()
    group = shard._state.consumer.groups["g"]
    assert "a" not in group.members
    given = await send(shard, heartbeat("b", 2, set()))
    assert assigned(given) == {0, 1, 2, 3}


async def test_leave_hands_partitions_over(shard: GroupShard) -> None:
    await send(shard, heartbeat("a", 0))
    await send(shard, heartbeat("b", 0))
    left = await send(shard, heartbeat("a", -1))
    assert (left.error_code, left.member_epoch) == (ErrorCode.NONE, -1)
    given = await send(shard, heartbeat("b", 2, set()))
    assert given.member_epoch == 3
    assert assigned(given) == {0, 1, 2, 3}


async def test_static_member_comes_back_with_its_assignment(shard: GroupShard) -> None:
    await send(shard, heartbeat("a", 0, instance_id="i-a"))
    await send(shard, heartbeat("b", 0, instance_id="i-b"))
    taken = await send(shard, heartbeat("c", 0, instance_id="i-a"))
    assert taken.error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    left = await send(shard, heartbeat("a", -2, instance_id="i-a"))
    assert left.member_epoch == -2
    epoch = shard._state.consumer.groups["g"].group_epoch
    back = await send(shard, heartbeat("c", 0, instance_id="i-a"))
    assert back.error_code == ErrorCode.NONE
    group = shard._state.consumer.groups["g"]
    assert set(group.members) == {"b", "c"}
    assert group.group_epoch == epoch  # no rebalance for a returning instance


async def test_range_assignor(shard: GroupShard) -> None:
    await send(shard, heartbeat("a", 0, assignor="range"))
    await send(shard, heartbeat("b", 0, assignor="range"))
    group = shard._state.consumer.groups["g"]
    assert group.target["a"] == {ORDERS: frozenset({0, 1})}
    assert group.target["b"] == {ORDERS: frozenset({2, 3})}


async def test_new_partitions_bump_the_group_epoch(shard: GroupShard) -> None:
    await send(shard, heartbeat("a", 0))
    grown = await send(shard, heartbeat("a", 1, {0, 1, 2, 3}, topics={"orders": (ORDERS, 6)}))
    assert grown.member_epoch == 2
    assert assigned(grown) == set(range(6))


async def test_offset_commits_check_the_member_epoch(shard: GroupShard) -> None:
    await send(shard, heartbeat("a", 0))
    ok = await result(await shard.ask(commit(1, "a", {0: 10})))
    assert ok.topics[0].partitions[0].error_code == ErrorCode.NONE
    stale = await result(await shard.ask(commit(0, "a", {0: 11})))
    assert stale.topics[0].partitions[0].error_code == ErrorCode.STALE_MEMBER_EPOCH
    unknown = await result(await shard.ask(commit(1, "z", {0: 11})))
    assert unknown.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    outside = await result(await shard.ask(commit(-1, "", {0: 11})))
    assert outside.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert "g" not in shard.groups  # no classic placeholder for a consumer group's offsets


async def test_classic_apis_on_a_consumer_group(shard: GroupShard) -> None:
    await send(shard, heartbeat("a", 0))
    joined = await result(await shard.ask(Join(join_request(""), "c", "/127.0.0.1")))
    assert joined.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    beat_ = await shard.ask(Beat(HeartbeatRequest(group_id="g", generation_id=1, member_id="a")))
    assert beat_.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # Once empty, the consumer group gives way to a classic one (Kafka's downgrade path).
    await send(shard, heartbeat("a", -1))
    joined = await result(await shard.ask(Join(join_request(""), "c", "/127.0.0.1")))
    assert joined.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert "g" not in shard._state.consumer.groups
    assert "g" in shard.groups


async def test_classic_group_with_members_is_not_a_consumer_group(
    shard: GroupShard, clock: ManualClock
) -> None:
    await stable_group(shard, clock, ["c1"])
    answer = await send(shard, heartbeat("a", 0))
    assert answer.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert "g" not in shard._state.consumer.groups


async def test_empty_classic_group_becomes_a_consumer_group(shard: GroupShard) -> None:
    await result(await shard.ask(commit(-1, "", {0: 5})))  # a simple consumer's commit
    assert "g" in shard.groups
    answer = await send(shard, heartbeat("a", 0))
    assert answer.error_code == ErrorCode.NONE
    assert "g" not in shard.groups
    assert shard.offsets["g"][("orders", 0)].offset == 5  # its offsets stay the group's


async def test_describe(shard: GroupShard) -> None:
    await send(shard, heartbeat("a", 0))
    described = await shard.ask(ConsumerDescribe(("g", "nope")))
    assert described[0].group_state == "Stable"
    assert (described[0].group_epoch, described[0].assignor_name) == (1, "uniform")
    member = described[0].members[0]
    assert member.assignment.topic_partitions[0].topic_name == "orders"
    assert member.assignment.topic_partitions[0].partitions == [0, 1, 2, 3]
    assert described[1].error_code == ErrorCode.GROUP_ID_NOT_FOUND


async def test_a_new_coordinator_continues_the_group(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    await send(shard, heartbeat("a", 0))
    await send(shard, heartbeat("b", 0))
    told = await send(shard, heartbeat("a", 1, {0, 1, 2, 3}))
    keep = assigned(told)
    assert keep is not None
    await result(await shard.ask(commit(1, "a", {0: 7})))
    kinds = {
        key.record_type
        for _, key, _ in iter_group_records(bytes(offsets_log.log))
        if isinstance(key, ConsumerGroupKey)
    }
    assert kinds == {3, 4, 5, 6, 7, 8}
    before = shard._state.consumer.groups["g"]
    await shard.stop()

    successor = await start_shard(clock, offsets_log)
    try:
        group = successor._state.consumer.groups["g"]
        assert (group.group_epoch, group.assignment_epoch) == (
            before.group_epoch,
            before.assignment_epoch,
        )
        assert group.members == before.members
        assert group.target == before.target
        assert group.subscription_metadata == before.subscription_metadata
        assert "g" not in successor.groups
        # a acknowledges its revocation at the new coordinator, b then gets the rest.
        acked = await send(successor, heartbeat("a", 1, keep))
        assert acked.member_epoch == 2
        given = await send(successor, heartbeat("b", 2, set()))
        assert assigned(given) == {0, 1, 2, 3} - keep
        check_exclusive(successor)
        # Sessions were re-armed on load: a member that never comes back is removed.
        clock.advance(CONFIG.group_consumer_session_timeout_ms)
        await turns()
        assert group.members == {}
    finally:
        await successor.stop()


async def test_failed_write_puts_the_group_back(
    shard: GroupShard, offsets_log: MemoryOffsetsLog
) -> None:
    await send(shard, heartbeat("a", 0))
    offsets_log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    failed = await send(shard, heartbeat("b", 0))
    assert failed.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    group = shard._state.consumer.groups["g"]
    assert set(group.members) == {"a"}
    assert group.group_epoch == 1


async def test_list_groups_shows_types_and_states(shard: GroupShard, clock: ManualClock) -> None:
    await send(shard, heartbeat("a", 0, topics=TOPICS))
    await result(await shard.ask(commit(-1, "", {0: 1}, group="simple")))
    everything = await shard.ask(ListAll())
    assert {(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in everything} == {
        ("g", "consumer", "consumer", "Stable"),
        ("simple", "classic", "", "Empty"),
    }
    consumers = await shard.ask(ListAll(types=("consumer",)))
    assert [g.group_id for g in consumers] == ["g"]
    empty = await shard.ask(ListAll(states=("empty",)))
    assert [g.group_id for g in empty] == ["simple"]
    stable = await shard.ask(ListAll(states=("Stable", "Reconciling")))
    assert [g.group_id for g in stable] == ["g"]


async def test_delete_groups(shard: GroupShard, offsets_log: MemoryOffsetsLog) -> None:
    await send(shard, heartbeat("a", 0))
    await result(await shard.ask(commit(1, "a", {0: 3})))
    busy = await result(await shard.ask(DeleteGroups(("g",))))
    assert busy == {"g": ErrorCode.NON_EMPTY_GROUP}
    await send(shard, heartbeat("a", -1))
    deleted = await result(await shard.ask(DeleteGroups(("g",))))
    assert deleted == {"g": ErrorCode.NONE}
    assert "g" not in shard._state.consumer.groups
    assert "g" not in shard.groups
    assert "g" not in shard.offsets
    # Every key of the group ends with a tombstone: a loading coordinator finds nothing.
    last: dict[object, object] = {}
    for _, key, value in iter_group_records(bytes(offsets_log.log)):
        last[key] = value
    assert [k for k, v in last.items() if v is not None] == []


async def test_expiry_keeps_subscribed_offsets_and_forgets_empty_groups(
    shard: GroupShard, clock: ManualClock
) -> None:
    await send(shard, heartbeat("a", 0))
    await result(await shard.ask(commit(1, "a", {0: 3})))
    step_ms = 10_000
    for _ in range(
        (CONFIG.offsets_retention_ms + CONFIG.offsets_retention_check_interval_ms) // step_ms + 1
    ):
        clock.advance(step_ms)
        await send(shard, heartbeat("a", 1, {0, 1, 2, 3}))  # a stays in the group
    await turns()
    assert shard.offsets["g"][("orders", 0)].offset == 3  # a subscribed topic's offset stays
    await send(shard, heartbeat("a", -1))
    shard._state.consumer.groups["g"].subscription_metadata.clear()
    clock.advance(CONFIG.offsets_retention_check_interval_ms)
    await turns()
    assert "g" not in shard.offsets
    assert "g" not in shard._state.consumer.groups


async def test_regex_subscription(shard: GroupShard) -> None:
    other = b"\x02" * 16
    topics = {"orders": (ORDERS, 2), "ord-x": (other, 1), "refunds": (b"\x03" * 16, 1)}
    topics["__consumer_offsets"] = (b"\x04" * 16, 3)
    join = heartbeat("a", 0, topics=topics)
    request = dataclasses.replace(
        join.request, subscribed_topic_names=None, subscribed_topic_regex="ord.*|__.*"
    )
    answer = await send(shard, dataclasses.replace(join, request=request))
    assert answer.error_code == ErrorCode.NONE
    assert answer.assignment is not None
    got = {(tp.topic_id, p) for tp in answer.assignment.topic_partitions for p in tp.partitions}
    assert got == {(ORDERS, 0), (ORDERS, 1), (other, 0)}  # internal topics never match
    bad = dataclasses.replace(request, member_id="b", subscribed_topic_regex="(")
    refused = await send(shard, dataclasses.replace(join, request=bad))
    assert refused.error_code == ErrorCode.INVALID_REQUEST


async def test_a_failed_removal_is_retried_at_the_next_session_timeout(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    await send(shard, heartbeat("a", 0))
    offsets_log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    clock.advance(CONFIG.group_consumer_session_timeout_ms)
    await turns()
    group = shard._state.consumer.groups["g"]
    assert set(group.members) == {"a"}  # put back: its removal was not written
    assert group.group_epoch == 1
    offsets_log.fail_with = ErrorCode.NONE
    clock.advance(CONFIG.group_consumer_session_timeout_ms)
    await turns()
    # Removed this time; and then forgotten, empty without offsets, by the expiry check.
    assert "g" not in shard._state.consumer.groups


@pytest.mark.parametrize("seed", range(5))
async def test_random_members_never_share_a_partition(shard: GroupShard, seed: int) -> None:
    """Simulated clients that follow the protocol (they own what the last answer assigned,
    after revoking the rest) join, heartbeat and leave at random (seed in the test id); no
    partition is ever held by two members, and once everyone heartbeats, the group settles
    with each partition owned once and the load balanced."""
    rng = random.Random(seed)
    owned: dict[str, set[int]] = {}
    epochs: dict[str, int] = {}
    next_id = 0
    for _ in range(150):
        action = rng.random()
        if action < 0.15 or not owned:
            member_id = f"m{next_id}"
            next_id += 1
            answer = await send(shard, heartbeat(member_id, 0))
        elif action < 0.22 and len(owned) > 1:
            member_id = rng.choice(sorted(owned))
            answer = await send(shard, heartbeat(member_id, -1))
            assert answer.error_code == ErrorCode.NONE, f"seed {seed}"
            del owned[member_id], epochs[member_id]
            check_exclusive(shard)
            continue
        else:
            member_id = rng.choice(sorted(owned))
            answer = await send(shard, heartbeat(member_id, epochs[member_id], owned[member_id]))
        assert answer.error_code == ErrorCode.NONE, f"seed {seed}: {answer}"
        epochs[member_id] = answer.member_epoch
        got = assigned(answer)
        if got is not None:
            owned[member_id] = got  # revoke what is not listed, take what is
        check_exclusive(shard)
    for _ in range(10):
        for member_id in sorted(owned):
            answer = await send(shard, heartbeat(member_id, epochs[member_id], owned[member_id]))
            epochs[member_id] = answer.member_epoch
            got = assigned(answer)
            if got is not None:
                owned[member_id] = got
    assert shard._state.consumer.groups["g"].state == ConsumerGroupState.STABLE, f"seed {seed}"
    everything = [p for ps in owned.values() for p in ps]
    assert sorted(everything) == [0, 1, 2, 3], f"seed {seed}: {owned}"
    loads = [len(ps) for ps in owned.values()]
    assert max(loads) - min(loads) <= 1, f"seed {seed}: {owned}"
