"""Leader elections the controller runs: for partitions without a leader, and preferred leaders
back (KRaft's ReplicationControlManager elections; Kafka's PartitionStateMachine).

- `elect_offline`: every New or Offline partition gets a leader where one is electable
  (Kafka's triggerOnlinePartitionStateChange), after a broker registers or the controller
  restarts;
- `elect`: writes one election's outcome into the event's `Change` — also for the partitions a
  failed broker led (actors/controller/liveness.py);
- `rebalance`: on each RebalanceTick (auto.leader.rebalance.enable), a broker whose preferred
  partitions are led elsewhere beyond leader.imbalance.per.broker.percentage gets them back;
- `elect_rejoined`: the partitions whose preferred replicas rejoined their ISRs get them back
  as leaders, soon rather than at the next check (when: actors/controller/preferred_leaders.py).

Both run the same preferred election (`elect_preferred`): the first assigned replica leads if it
is eligible and in the ISR — never one outside it — under a new leader epoch, the ISR unchanged.

A replica in a failed log dir (`electable`, actors/controller/replica_failure.py) never leads,
though its broker is live. Which replica may lead is decided by the pure rules in
actors/controller/election.py; this module applies them to the model and the partition state
machine. An unclean election (only when the topic or the controller enables it) is logged and
counted. Controlled shutdown's leader moves are in actors/controller/shutdown.py.

State: none of its own; everything is the controller actor's (actors/controller/context.py),
changed only from the actor's handlers.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from actors.controller.context import ControllerContext
from actors.controller.election import (
    ElectionResult,
    offline_election,
    preferred_election,
    remove_from_isr,
)
from actors.controller.journal import Change
from actors.controller.outbox import Outbox
from actors.controller.states import PartitionState
from actors.controller.topics import unclean_election_enabled
from actors.views import NO_LEADER
from wire.metadata_records import PartitionRecord
from wire.topic import TopicPartition

log = logging.getLogger("ketch.controller")


def elect(
    ctx: ControllerContext,
    change: Change,
    p: PartitionRecord,
    result: ElectionResult,
    gone: Collection[int] = (),
) -> bool:
    """Write an election's outcome; no electable leader leaves the partition leaderless
    with its ISR kept (minus the brokers that just died, never emptied)."""
    if result.leader is None:
        isr = p.isr
        for broker_id in sorted(gone):
            isr = remove_from_isr(isr, broker_id)
        if p.leader != NO_LEADER or isr != p.isr:
            change.move(p, leader=NO_LEADER, isr=isr)
        return False
    if result.unclean:
        ctx.unclean_elections += 1
        log.warning(
            "%s: UNCLEAN election of broker %d for %s (ISR was %s): acknowledged records "
            "may be lost",
            ctx.name,
            result.leader,
            ctx.model.topic_partition(p),
            list(p.isr),
        )
    change.move(p, leader=result.leader, isr=result.isr)
    return True


def electable(ctx: ControllerContext, tp: TopicPartition, eligible: set[int]) -> set[int]:
    """The eligible brokers whose replica of `tp` may lead: not one in a failed log dir."""
    return {b for b in eligible if not ctx.sessions.is_replica_offline(b, tp)}


def elect_offline(ctx: ControllerContext, change: Change) -> None:
    """triggerOnlinePartitionStateChange: elect leaders for New and Offline partitions."""
    eligible = ctx.sessions.eligible()
    elected: list[TopicPartition] = []
    for p in ctx.model.all_partitions():
        tp = ctx.model.topic_partition(p)
        if ctx.model.is_queued_for_deletion(p.topic_id) or ctx.partition_states.state(tp) not in (
            PartitionState.NEW,
            PartitionState.OFFLINE,
        ):
            continue
        current = change.partition(p)
        result = offline_election(
            current.replicas, current.isr, electable(ctx, tp, eligible), unclean_allowed(ctx, p)
        )
        if elect(ctx, change, current, result):
            elected.append(tp)
    ctx.partition_states.transition(elected, PartitionState.ONLINE)


def unclean_allowed(ctx: ControllerContext, p: PartitionRecord) -> bool:
    topic = ctx.model.topic_by_id(p.topic_id)
    assert topic is not None, p
    return unclean_election_enabled(topic.configs, ctx.config.unclean_leader_election_enable)


def elect_preferred(
    ctx: ControllerContext, change: Change, p: PartitionRecord, eligible: set[int]
) -> bool:
    """The preferred (first assigned) replica leads, if it is eligible, electable and in the ISR;
    the ISR stays. False: it cannot, and the partition is left as it is."""
    tp = ctx.model.topic_partition(p)
    result = preferred_election(p.replicas, p.isr, electable(ctx, tp, eligible))
    if result.leader is None:
        return False
    change.move(p, leader=result.leader)
    return True


async def rebalance(ctx: ControllerContext) -> None:
    """Preferred leaders back (auto.leader.rebalance.enable), per broker over the threshold."""
    eligible = ctx.sessions.eligible()
    threshold = ctx.config.leader_imbalance_per_broker_percentage / 100
    preferred_of: dict[int, list[PartitionRecord]] = {}
    for p in ctx.model.all_partitions():
        if not ctx.model.is_queued_for_deletion(p.topic_id):
            preferred_of.setdefault(p.replicas[0], []).append(p)
    change = Change(ctx.model)
    for broker_id, partitions in sorted(preferred_of.items()):
        if broker_id not in eligible:
            continue
        led_elsewhere = [p for p in partitions if p.leader != broker_id]
        if not led_elsewhere or len(led_elsewhere) / len(partitions) <= threshold:
            continue
        for p in led_elsewhere:
            elect_preferred(ctx, change, p, eligible)
    await _commit_preferred(ctx, change, "imbalanced brokers")


async def elect_rejoined(ctx: ControllerContext) -> None:
    """The pass of actors/controller/preferred_leaders.py: each partition whose preferred replica
    rejoined its ISR since the last pass gets it back as leader, if it still can. A partition
    without a leader is left to `elect_offline`, which prefers that replica anyway."""
    eligible = ctx.sessions.eligible()
    change = Change(ctx.model)
    for tp in ctx.preferred_leaders.take():
        p = ctx.model.partition_by_name(tp)
        if (
            p is None  # deleted meanwhile
            or ctx.model.is_queued_for_deletion(p.topic_id)
            or p.leader in (NO_LEADER, p.replicas[0])
        ):
            continue
        elect_preferred(ctx, change, p, eligible)
    await _commit_preferred(ctx, change, "preferred replicas back in their ISRs")


async def _commit_preferred(ctx: ControllerContext, change: Change, why: str) -> None:
    """Write one pass's preferred elections, then tell the brokers (LeaderAndIsr to the
    replicas, UpdateMetadata to all)."""
    if not change.changed_partitions():
        return
    log.info(
        "%s: preferred leaders back for %d partitions (%s)",
        ctx.name,
        len(change.changed_partitions()),
        why,
    )
    await ctx.journal.commit(change)
    outbox = Outbox()
    ctx.sender.announce(change, outbox)
    ctx.sender.flush(outbox)
