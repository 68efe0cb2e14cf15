"""A partition replica's role and its epoch fences: whether a replica takes a LeaderAndIsr state,
and whether it serves a read.

* The role (`actors.views.Role`) moves only along `ROLE_MOVES`, a transition table; a move it
  forbids raises `IllegalRoleTransitionError`, a bug in the caller or in the partition actor.
* `leader_and_isr_fence` is seed 002's per-partition check of a LeaderAndIsr state against the
  (leader epoch, partition epoch) already applied: newer is applied, a repeat changes nothing
  (NONE), older is refused (STALE_CONTROLLER_EPOCH, the code Kafka answers). The PartitionActor
  applies it authoritatively; the ReplicaManager applies it first to the published view, so a
  stale or repeated request does not touch the fetchers at all.
* `read_fence` is KIP-320's check of a read (Fetch, ListOffsets, OffsetForLeaderEpoch) against
  the replica's role and leader epoch.

Pure functions and constants: no state, no owner.
"""

from __future__ import annotations

from typing import Final

from actors.replication.partition_messages import NO_EPOCH
from actors.views import Role
from wire.errors import ErrorCode


class IllegalRoleTransitionError(RuntimeError):
    """A move the role table forbids: a bug in the caller or in the partition actor."""


# LEADER -> LEADER and FOLLOWER -> FOLLOWER are new epochs of the same role. STOPPED and OFFLINE
# are final: the actor has stopped (by request, or on its log's failure), and a new one is created
# if the replica is hosted again.
ROLE_MOVES: Final[dict[Role, frozenset[Role]]] = {
    Role.NONE: frozenset({Role.LEADER, Role.FOLLOWER, Role.STOPPED, Role.OFFLINE}),
    Role.LEADER: frozenset({Role.LEADER, Role.FOLLOWER, Role.STOPPED, Role.OFFLINE}),
    Role.FOLLOWER: frozenset({Role.LEADER, Role.FOLLOWER, Role.STOPPED, Role.OFFLINE}),
    Role.STOPPED: frozenset(),
    Role.OFFLINE: frozenset(),
}


def next_role(current: Role, target: Role) -> Role:
    if target not in ROLE_MOVES[current]:
        raise IllegalRoleTransitionError(f"role {current.value} -> {target.value} is not allowed")
    return target


def leader_and_isr_fence(
    applied: tuple[int, int] | None, proposed: tuple[int, int]
) -> ErrorCode | None:
    """None when `proposed` (leader epoch, partition epoch) is newer than `applied` (None: nothing
    applied yet) and must be applied; NONE for a repeat; STALE_CONTROLLER_EPOCH for an older
    state."""
    if applied is None or proposed > applied:
        return None
    if proposed == applied:
        return ErrorCode.NONE
    return ErrorCode.STALE_CONTROLLER_EPOCH


def read_fence(
    role: Role, leader_epoch: int, current_leader_epoch: int, *, leader_only: bool
) -> ErrorCode | None:
    """None when a replica in `role` at `leader_epoch` may serve a read sent with
    `current_leader_epoch` (NO_EPOCH skips the epoch check); `leader_only` for reads only a
    leader serves (a follower's fetch, a consumer's unless it may read from followers)."""
    # KIP-320 first: a fetcher with an older epoch is fenced; one with a newer epoch is ahead of
    # this replica, which has not heard of the new leadership yet.
    if current_leader_epoch != NO_EPOCH:
        if current_leader_epoch < leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
    if role is Role.LEADER or (role is Role.FOLLOWER and not leader_only):
        return None
    return ErrorCode.NOT_LEADER_OR_FOLLOWER
