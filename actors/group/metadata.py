"""One consumer group's membership state: its state machine, members, generation and protocol.

This is the model the group coordinator's actor (issue 10) owns; it does no IO and reads no
clock (times are passed in), so every rule here is tested directly.

States (Kafka's names, for DescribeGroups and the CLI) and the moves between them, as a table of
the states each one may be entered from (Kafka's GroupState validPreviousStates):

    Empty                 <- PreparingRebalance        (a rebalance ended with no members)
    PreparingRebalance    <- Empty, Stable, CompletingRebalance
    CompletingRebalance   <- PreparingRebalance        (every member rejoined: await the sync)
    Stable                <- CompletingRebalance       (the leader's assignment is in)
    Dead                  <- every state               (unloaded, or deleted)

An illegal move raises `IllegalGroupTransition`: it is a coordinator bug, never a client error.

Protocol selection is Kafka's: the candidates are the protocols every member supports; each
member votes for the first candidate in its own preference order; the most votes win, and a tie
goes to the candidate the leader prefers (Kafka leaves ties to map order; a fixed rule keeps
ketch deterministic). The leader is the first member to join, or the next oldest once it leaves.

Static members (KIP-345) carry a `group_instance_id`; at most one member holds a given instance id
(`static_member`), and a static member rejoining under a new member id takes the old one's place
in the join order, leadership and assignment (`replace_member_id`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from wire.group_records import GroupValue, MemberValue


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_ENTERED_FROM: Final[Mapping[GroupState, frozenset[GroupState]]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalGroupTransition(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class Protocol:
    """One protocol a member supports (an assignor, for consumers) with its subscription."""

    name: str
    metadata: bytes


@dataclass(slots=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    assignment: bytes = b""
    group_instance_id: str | None = None

    def protocol_names(self) -> list[str]:
        return [p.name for p in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        for candidate in self.protocols:
            if candidate.name == protocol:
                return candidate.metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def same_protocols(self, protocols: Sequence[Protocol]) -> bool:
        return self.protocols == tuple(protocols)

    def vote(self, candidates: set[str]) -> str:
        return next(name for name in self.protocol_names() if name in candidates)


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    state_timestamp_ms: int = -1
    members: dict[str, Member] = field(default_factory=dict)  # join order

    # -- state -----------------------------------------------------------------------------

    def transition(self, target: GroupState, now_ms: int) -> None:
        if self.state not in _ENTERED_FROM[target]:
            raise IllegalGroupTransition(
                f"group {self.group_id}: {self.state.value} -> {target.value}"
            )
        self.state = target
        self.state_timestamp_ms = now_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    # -- members ---------------------------------------------------------------------------

    def supports(self, protocol_type: str, protocols: Sequence[Protocol]) -> bool:
        """Whether a member with these protocols may join: an empty group takes any non-empty
        set; otherwise the type must match and one protocol must be common to every member."""
        if not protocols or not protocol_type:
            return False
        if not self.members:
            return True
        names = {p.name for p in protocols}
        return protocol_type == self.protocol_type and bool(self.candidate_protocols() & names)

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if self.leader is None:
            self.leader = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None and self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return member

    def static_member(self, group_instance_id: str) -> Member | None:
        """The member holding this instance id. A scan: groups are bounded by group.max.size and
        a separate index would be one more thing to keep in step with `members`."""
        for member in self.members.values():
            if member.group_instance_id == group_instance_id:
                return member
        return None

    def replace_member_id(self, old_member_id: str, new_member_id: str) -> Member:
        """Give a member a new id in place: same join order, leadership and assignment."""
        assert new_member_id not in self.members, new_member_id
        member = self.members[old_member_id]
        member.member_id = new_member_id
        self.members = {
            (new_member_id if member_id == old_member_id else member_id): m
            for member_id, m in self.members.items()
        }
        if self.leader == old_member_id:
            self.leader = new_member_id
        return member

    def candidate_protocols(self) -> set[str]:
        names: set[str] | None = None
        for member in self.members.values():
            mine = set(member.protocol_names())
            names = mine if names is None else names & mine
        return names or set()

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        if not candidates:
            raise IllegalGroupTransition(f"group {self.group_id}: no protocol common to members")
        votes: dict[str, int] = dict.fromkeys(candidates, 0)
        for member in self.members.values():
            votes[member.vote(candidates)] += 1
        best = max(votes.values())
        leader = None if self.leader is None else self.members.get(self.leader)
        order = leader.protocol_names() if leader is not None else sorted(candidates)
        return next(name for name in order if votes.get(name) == best)

    def init_next_generation(self, now_ms: int) -> None:
        """End a PreparingRebalance: next generation, protocol chosen, CompletingRebalance (or
        Empty when nobody is left)."""
        self.generation += 1
        if self.members:
            self.protocol = self.select_protocol()
            self.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol = None
            self.transition(GroupState.EMPTY, now_ms)

    def clear_assignments(self) -> None:
        for member in self.members.values():
            member.assignment = b""

    def assign(self, assignments: Mapping[str, bytes]) -> None:
        """The leader's assignment; members it leaves out get an empty one (as Kafka)."""
        for member_id, member in self.members.items():
            member.assignment = assignments.get(member_id, b"")

    # -- the __consumer_offsets record -----------------------------------------------------

    def to_record(self) -> GroupValue:
        protocol = self.protocol
        return GroupValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=protocol,
            leader=self.leader,
            current_state_timestamp=self.state_timestamp_ms,
            members=tuple(
                MemberValue(
                    member_id=m.member_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata_for(protocol) if protocol is not None else b"",
                    assignment=m.assignment,
                    group_instance_id=m.group_instance_id,
                )
                for m in self.members.values()
            ),
        )

    @classmethod
    def from_record(cls, group_id: str, value: GroupValue) -> Group:
        """A loaded group: Stable with its members when it had any, else Empty (Kafka)."""
        group = cls(
            group_id,
            state=GroupState.STABLE if value.members else GroupState.EMPTY,
            generation=value.generation,
            protocol_type=value.protocol_type or None,
            protocol=value.protocol,
            leader=value.leader,
            state_timestamp_ms=value.current_state_timestamp,
        )
        for m in value.members:
            protocols = (
                () if value.protocol is None else (Protocol(value.protocol, m.subscription),)
            )
            group.members[m.member_id] = Member(
                member_id=m.member_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=m.session_timeout,
                rebalance_timeout_ms=m.rebalance_timeout,
                protocol_type=value.protocol_type,
                protocols=protocols,
                assignment=m.assignment,
                group_instance_id=m.group_instance_id,
            )
        return group


def states_named(names: Iterable[str]) -> frozenset[GroupState]:
    """ListGroups' states_filter (Kafka's names, case-insensitive); ValueError for unknown."""
    by_name = {state.value.lower(): state for state in GroupState}
    try:
        return frozenset(by_name[name.lower()] for name in names)
    except KeyError as exc:
        raise ValueError(f"unknown group state {exc.args[0]!r}") from None
