"""The consumer-group side of the simulation: the generation-fencing checker over hand-built
histories, and the group member's own pieces (the consumer protocol blobs it writes, its range
assignment)."""

from __future__ import annotations

from testkit.sim.assignor import assignment_blob, range_assignment, subscription_blob
from testkit.sim.checkers import ALL_CHECKERS, group_generations_fenced
from testkit.sim.history import GroupAssignment, History, OffsetCommitted
from wire.kafka.consumer_protocol import read_assignment, read_subscription
from wire.topic import TopicPartition

G = "g"
P0, P1, P2 = (TopicPartition("t", n) for n in range(3))


def assigned(
    member: str, generation: int, at_ns: int, *partitions: TopicPartition
) -> GroupAssignment:
    return GroupAssignment(G, member, generation, partitions, at_ns)


def commit(
    member: str, generation: int, offset: int, sent_ns: int, acked_ns: int | None
) -> list[OffsetCommitted]:
    """The sent event, and the acknowledged one when `acked_ns` is given."""
    events = [OffsetCommitted(G, P0, offset, False, sent_ns, member, generation)]
    if acked_ns is not None:
        events.append(OffsetCommitted(G, P0, offset, True, acked_ns, member, generation))
    return events


def history_of(*events: object) -> History:
    history = History(seed=0)
    for event in events:
        if isinstance(event, GroupAssignment):
            history.append_group_assignment(event)
        elif isinstance(event, list):
            for commit_event in event:
                history.append_offset_commit(commit_event)
    return history


def messages(history: History) -> list[str]:
    return [violation.message for violation in group_generations_fenced(history)]


def test_a_clean_run_of_generations_passes() -> None:
    history = history_of(
        assigned("a", 1, 10, P0, P1),
        assigned("b", 1, 11, P2),
        commit("a", 1, 5, 20, 25),
        assigned("a", 2, 30, P0),
        assigned("b", 2, 31, P1, P2),
        commit("a", 2, 7, 40, 45),
        # A commit of generation 1 sent before generation 2 was assigned, answered after: the
        # coordinator may have taken it while the group prepared the rebalance.
        commit("b", 1, 3, 29, 33),
        # One of generation 1 sent after generation 2 was assigned, refused: not in the history
        # as acknowledged, so nothing to judge.
        commit("b", 1, 4, 35, None),
    )
    assert messages(history) == []
    assert "group_generations_fenced" in ALL_CHECKERS


def test_one_generation_giving_a_partition_to_two_members_is_caught() -> None:
    history = history_of(assigned("a", 3, 10, P0, P1), assigned("b", 3, 11, P1))
    assert messages(history) == ["group g generation 3: t-1 assigned to both a and b"]


def test_an_older_generations_commit_accepted_after_a_newer_one_was_assigned_is_caught() -> None:
    history = history_of(
        assigned("a", 1, 10, P0),
        assigned("b", 2, 30, P0),
        commit("a", 1, 9, 40, 42),  # a zombie of generation 1, sent after generation 2 formed
    )
    assert messages(history) == [
        "group g t-0: commit of 9 by a in generation 1 accepted, though generation 2 had been "
        "assigned before it was sent"
    ]


def test_simple_consumer_commits_are_not_fenced() -> None:
    simple = [OffsetCommitted(G, P0, 0, False, 40), OffsetCommitted(G, P0, 0, True, 41)]
    assert messages(history_of(assigned("a", 4, 10, P0), simple)) == []


def test_the_member_writes_consumer_protocol_blobs_that_kafkas_schema_reads() -> None:
    assert read_subscription(subscription_blob(["orders", "t"])) == ("orders", "t")
    assert read_assignment(assignment_blob([P2, P0, TopicPartition("u", 1)])) == {
        "t": (0, 2),
        "u": (1,),
    }
    assert read_assignment(assignment_blob([])) == {}


def test_range_assignment_splits_each_topic_in_contiguous_ranges_in_member_order() -> None:
    plan = range_assignment({"m2": ("t",), "m1": ("t",), "m3": ("u",)}, {"t": 3, "u": 1})
    assert plan == {
        "m1": [P0, P1],
        "m2": [P2],
        "m3": [TopicPartition("u", 0)],
    }
    assert range_assignment({"m1": ("t",)}, {"t": 0}) == {"m1": []}
