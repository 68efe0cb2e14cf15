"""A replica's role table and its epoch fences (actors/replication/leadership.py), as pure rules;
tests/unit/actors/replication/test_partition.py checks them through the actor."""

from __future__ import annotations

import pytest

from actors.replication.leadership import (
    IllegalRoleTransitionError,
    leader_and_isr_fence,
    next_role,
    read_fence,
)
from actors.replication.partition_messages import NO_EPOCH
from actors.views import Role
from wire.errors import ErrorCode


def test_role_table_rejects_illegal_moves() -> None:
    assert next_role(Role.NONE, Role.FOLLOWER) is Role.FOLLOWER
    assert next_role(Role.LEADER, Role.LEADER) is Role.LEADER
    assert next_role(Role.FOLLOWER, Role.OFFLINE) is Role.OFFLINE
    assert next_role(Role.LEADER, Role.STOPPED) is Role.STOPPED
    for final in (Role.OFFLINE, Role.STOPPED):
        for target in Role:
            with pytest.raises(IllegalRoleTransitionError):
                next_role(final, target)
    with pytest.raises(IllegalRoleTransitionError):
        next_role(Role.LEADER, Role.NONE)


@pytest.mark.parametrize(
    ("applied", "proposed", "expected"),
    [
        (None, (0, 0), None),  # nothing applied yet
        ((3, 7), (4, 0), None),  # a newer leader epoch wins whatever the partition epoch
        ((3, 7), (3, 8), None),  # same leadership, newer ISR or replicas
        ((3, 7), (3, 7), ErrorCode.NONE),  # a repeat
        ((3, 7), (3, 6), ErrorCode.STALE_CONTROLLER_EPOCH),
        ((3, 7), (2, 9), ErrorCode.STALE_CONTROLLER_EPOCH),
    ],
)
def test_leader_and_isr_fence_orders_by_leader_then_partition_epoch(
    applied: tuple[int, int] | None, proposed: tuple[int, int], expected: ErrorCode | None
) -> None:
    assert leader_and_isr_fence(applied, proposed) is expected


@pytest.mark.parametrize(
    ("role", "current_leader_epoch", "leader_only", "expected"),
    [
        (Role.LEADER, 5, True, None),
        (Role.LEADER, NO_EPOCH, True, None),  # no epoch sent: no epoch check
        (Role.LEADER, 4, True, ErrorCode.FENCED_LEADER_EPOCH),
        (Role.LEADER, 6, True, ErrorCode.UNKNOWN_LEADER_EPOCH),
        (Role.FOLLOWER, 5, False, None),  # a read any replica may serve
        (Role.FOLLOWER, 5, True, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (Role.FOLLOWER, 4, False, ErrorCode.FENCED_LEADER_EPOCH),  # the epoch is checked first
        (Role.NONE, NO_EPOCH, False, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (Role.STOPPED, NO_EPOCH, False, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (Role.OFFLINE, NO_EPOCH, False, ErrorCode.NOT_LEADER_OR_FOLLOWER),
    ],
)
def test_read_fence_checks_the_epoch_then_the_role(
    role: Role, current_leader_epoch: int, leader_only: bool, expected: ErrorCode | None
) -> None:
    assert read_fence(role, 5, current_leader_epoch, leader_only=leader_only) is expected
