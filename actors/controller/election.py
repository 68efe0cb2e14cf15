"""Leader selection, ISR removal, replica assignment and topic-name validation for the controller.

Pure functions of their arguments: the controller actor's handlers (elections.py, liveness.py,
shutdown.py; topics.py for assignment) pass in the partition's assignment, ISR and the broker sets
they know, and write whatever comes back to the metadata log. Nothing here holds state, so
nothing needs a lock, and every rule can be tested exhaustively.

The rules (Kafka's Election.scala and AdminUtils, with the later fix that the ISR never empties):

- Offline election: the first replica in *assignment* order that is both live and in the ISR
  leads, and the ISR shrinks to its live members. Assignment order, not ISR order, so that
  leadership falls back to the preferred replicas first. Only when no ISR member is live and
  unclean.leader.election.enable is set does the first live assigned replica lead, with an ISR of
  just itself (it may lack acknowledged records: the result is flagged `unclean`). When nothing
  is electable the ISR is left as it is and there is no leader: the last ISR member keeps its place,
  so a clean election is possible again the moment it returns. An empty ISR (its last member came
  back without its data) allows only the unclean election.
- Controlled shutdown: the first assigned replica that is live, in the ISR and not shutting down
  leads; the ISR drops every shutting-down broker. A shutting-down broker never joins an election.
- Preferred replica: the first assigned replica leads, if it is live and in the ISR.
- Removing a replica from the ISR never removes the last member.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from wire.errors import ErrorCode
from wire.topic import validate_topic_name as _check_topic_name


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """What a selector decided. `leader` is None when nobody was electable; then `isr` is the
    ISR given, unchanged. `unclean` is True only for a leader chosen from outside the ISR."""

    leader: int | None
    isr: tuple[int, ...]
    unclean: bool = False

    def __post_init__(self) -> None:
        # An election never empties the ISR; one that finds it empty (its last member lost
        # its data) and elects nobody leaves it so.
        assert self.isr or self.leader is None, "an election never empties the ISR"
        assert self.leader is None or self.leader in self.isr, (self.leader, self.isr)
        assert not self.unclean or self.isr == (self.leader,), self


def _check_partition(assignment: Sequence[int], isr: Sequence[int]) -> None:
    # Callers pass the controller's own committed state; a violation is a controller bug.
    assert assignment, "a partition has at least one replica"
    assert len(set(assignment)) == len(assignment), f"duplicate replicas in {assignment}"
    assert set(isr) <= set(assignment), f"ISR {isr} is not within the assignment {assignment}"


def offline_election(
    assignment: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    unclean_enabled: bool,
) -> ElectionResult:
    """Choose a leader for a partition with none (new, or its leader died)."""
    _check_partition(assignment, isr)
    for replica in assignment:
        if replica in live and replica in isr:
            return ElectionResult(replica, tuple(r for r in isr if r in live))
    if unclean_enabled:
        for replica in assignment:
            if replica in live:
                return ElectionResult(replica, (replica,), unclean=True)
    return ElectionResult(None, tuple(isr))


def controlled_shutdown_election(
    assignment: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> ElectionResult:
    """Move leadership off shutting-down brokers. `leader` None: no other ISR replica can take
    over, and the caller leaves the partition as it is (the broker reports it as still led)."""
    _check_partition(assignment, isr)
    for replica in assignment:
        if replica in live and replica in isr and replica not in shutting_down:
            return ElectionResult(replica, tuple(r for r in isr if r not in shutting_down))
    return ElectionResult(None, tuple(isr))


def preferred_election(
    assignment: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> ElectionResult:
    """Give leadership back to the preferred (first assigned) replica, when it can take it; the
    ISR does not change. `leader` None: it cannot, and the caller leaves the partition alone."""
    _check_partition(assignment, isr)
    preferred = assignment[0]
    if preferred in live and preferred in isr:
        return ElectionResult(preferred, tuple(isr))
    return ElectionResult(None, tuple(isr))


def remove_from_isr(isr: Sequence[int], broker_id: int) -> tuple[int, ...]:
    """The ISR without `broker_id`, except that its last member stays: an empty ISR would lose
    track of which replica has every acknowledged record. When the remaining member is the dead
    broker itself, the caller sets the leader to -1 (Kafka's removeReplicasFromIsr)."""
    if len(isr) <= 1:
        return tuple(isr)
    return tuple(r for r in isr if r != broker_id)


def assign_replicas(
    broker_ids: Collection[int],
    partitions: int,
    replication_factor: int,
    *,
    rng: random.Random,
) -> list[list[int]] | ErrorCode:
    """Kafka's rack-unaware replica assignment: one list of replica ids per partition, its first
    entry the preferred leader; or the validation error.

    With the brokers sorted, partition p's leader is broker (start + p) mod n, so leaders go round
    the brokers evenly from a random start. Follower j of a partition sits `1 + (shift + j) mod
    (n - 1)` places after its leader — never on the leader, never twice — and `shift` grows by one
    after every full round of leaders, so the partitions a broker leads have their followers spread
    over different brokers rather than always the same neighbour. Start and shift come from `rng`,
    so topics created one after another do not all pile their leaders on the lowest broker id.
    """
    if partitions < 1:
        return ErrorCode.INVALID_PARTITIONS
    if replication_factor < 1 or replication_factor > len(broker_ids):
        return ErrorCode.INVALID_REPLICATION_FACTOR
    brokers = sorted(broker_ids)
    assert len(set(brokers)) == len(brokers), f"duplicate broker ids {brokers}"
    count = len(brokers)
    start = rng.randrange(count)
    shift = rng.randrange(count)
    assignment: list[list[int]] = []
    for partition in range(partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (start + partition) % count
        replicas = [brokers[first]]
        for follower in range(replication_factor - 1):
            distance = 1 + (shift + follower) % (count - 1)
            replicas.append(brokers[(first + distance) % count])
        assignment.append(replicas)
    return assignment


def validate_topic_name(name: str) -> ErrorCode:
    """NONE for a legal topic name, else INVALID_TOPIC_EXCEPTION. The rule itself (Kafka's: 1-249
    characters of [a-zA-Z0-9._-], not "." or "..") lives with TopicPartition, which enforces it on
    every partition the broker creates, so the controller and the storage engine cannot disagree."""
    try:
        _check_topic_name(name)
    except ValueError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return ErrorCode.NONE


def topics_collide(a: str, b: str) -> bool:
    """Kafka refuses a topic whose name equals an existing one once "." is read as "_": metric
    names replace one with the other, so the two topics' metrics would merge."""
    return a != b and a.replace(".", "_") == b.replace(".", "_")
