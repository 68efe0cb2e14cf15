"""Controlled shutdown (seed 004, Kafka's shutdownBroker; KIP-841 for the ISR rules).

A live broker about to stop sends ControlledShutdown. From then on it is shutting down: no
longer eligible to lead or to join an ISR (the liveness table, actors/controller/sessions.py).
Every live broker is sent UpdateMetadata at once, listing it `in_controlled_shutdown`
(actors/controller/requests.py), so leaders stop proposing it for their ISRs rather than have
the controller refuse each proposal (KIP-841). For each partition it hosts with another replica:

- one it leads moves to the first other live, in-sync replica not shutting down
  (`controlled_shutdown_election`, actors/controller/election.py); with none, it stays;
- one it follows is stopped on it (StopReplica without delete) and it leaves the ISR (never
  emptying it) — a new partition epoch, not a new leader epoch: the leader stays
  (actors/controller/journal.py, `leader_epoch_moves`).

The answer lists the partitions it still leads that another replica could take over
(`still_led_by`); the broker retries until none are left. Its heartbeats then ask to be shut
down, and once nothing is left it is fenced (actors/controller/liveness.py).

State: none of its own; it works on the controller actor's (actors/controller/context.py), from
the actor's handlers.
"""

from __future__ import annotations

import logging

from actors.controller.context import ControllerContext
from actors.controller.election import controlled_shutdown_election, remove_from_isr
from actors.controller.elections import electable
from actors.controller.journal import Change
from actors.controller.outbox import Outbox
from actors.controller.states import ReplicaKey, ReplicaState
from wire.errors import ErrorCode
from wire.messages import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    RemainingPartition,
)
from wire.topic import TopicPartition

log = logging.getLogger("ketch.controller")


async def controlled_shutdown(
    ctx: ControllerContext, request: ControlledShutdownRequest
) -> ControlledShutdownResponse:
    broker_id = request.broker_id
    broker = ctx.model.broker(broker_id)
    if broker is None or not ctx.sessions.is_live(broker_id):
        return ControlledShutdownResponse(error_code=ErrorCode.BROKER_NOT_AVAILABLE)
    if request.broker_epoch != broker.broker_epoch:
        return ControlledShutdownResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    ctx.sessions.begin_shutdown(broker_id)
    log.info("%s: controlled shutdown of broker %d", ctx.name, broker_id)
    eligible = ctx.sessions.eligible()
    shutting_down = ctx.sessions.shutting_down()
    change = Change(ctx.model)
    # Everything, to every live broker: the broker list now flags this one as shutting down.
    outbox = Outbox(metadata_everything=True)
    followed: list[ReplicaKey] = []
    for p in ctx.model.partitions_hosted_on(broker_id):
        if len(p.replicas) < 2 or ctx.model.is_queued_for_deletion(p.topic_id):
            continue
        tp = ctx.model.topic_partition(p)
        if p.leader == broker_id:
            result = controlled_shutdown_election(
                p.replicas, p.isr, electable(ctx, tp, eligible), shutting_down
            )
            if result.leader is not None:
                change.move(p, leader=result.leader, isr=result.isr)
        else:
            followed.append(ReplicaKey(tp, broker_id))
            outbox.stop(broker_id, tp, delete=False)
            if broker_id in p.isr:
                change.move(p, isr=remove_from_isr(p.isr, broker_id))
    await ctx.journal.commit(change)
    ctx.replica_states.transition(followed, ReplicaState.OFFLINE)
    ctx.sender.announce(change, outbox)
    ctx.sender.flush(outbox)
    remaining = [
        RemainingPartition(topic_name=tp.topic, partition_index=tp.partition)
        for tp in still_led_by(ctx, broker_id)
    ]
    return ControlledShutdownResponse(remaining_partitions=remaining)


def still_led_by(ctx: ControllerContext, broker_id: int) -> list[TopicPartition]:
    """Partitions the broker still leads that another replica could take over, now or
    once it has caught up and joined the ISR: one that is live and not shutting down.
    Kafka counts every partition with more than one replica, so the last broker of a
    cluster retries controlled shutdown in vain (controlled.shutdown.max.retries times the
    backoff) when no other replica is left at all; counting only partitions with a live
    peer lets it go at once, while a lagging live peer still earns the retries."""
    eligible = ctx.sessions.eligible()
    return [
        ctx.model.topic_partition(p)
        for p in ctx.model.partitions_led_by(broker_id)
        if len(p.replicas) > 1
        and not ctx.model.is_queued_for_deletion(p.topic_id)
        and any(r in eligible for r in p.replicas if r != broker_id)
    ]
