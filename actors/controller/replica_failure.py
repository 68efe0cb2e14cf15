"""Replicas in failed log dirs (Kafka's LogDirFailureHandler and, on the controller's side,
ZooKeeper-era Kafka's onBrokerLogDirFailure with KRaft's OfflineLogDirs heartbeats).

A broker whose log dir fails keeps running with its other dirs (actors/replication/
replica_manager.py) and reports the failed dir's id in its heartbeats. The controller does not
know which partition is in which dir, so, as ZooKeeper-era Kafka did after a
LogDirEventNotification, it sends that broker a LeaderAndIsr for every partition it hosts
(`log_dirs_offline`); the broker answers KAFKA_STORAGE_ERROR for each partition of a failed dir.
Any LeaderAndIsr answer carrying KAFKA_STORAGE_ERROR, whenever it comes (a log that could not
be created at topic creation is one), comes back as a `LeaderAndIsrDone` (the request channels'
callback, actors/controller/outbox.py) and `leader_and_isr_done` takes those replicas offline:

- the liveness table remembers them (actors/controller/sessions.py) until the broker registers
  again, so they are never elected (`elections.electable`) and UpdateMetadata lists them among
  the partition's offline replicas (`ketch topic describe` shows them);
- the replica state machine moves them to OfflineReplica;
- each leaves its ISR (never emptying one: the partition epoch moves, not the leader epoch,
  KAFKA-15021), and a partition it led gets another leader from the ISR, or none
  (OfflinePartition) when no other ISR member is eligible.

A later request to that broker for such a partition answers KAFKA_STORAGE_ERROR again; it changes
nothing more, and `RequestSender.announce` does not send it LeaderAndIsr for a partition it holds
offline, so no exchange repeats itself.

State: none of its own; it works on the controller actor's (actors/controller/context.py), from
the actor's handlers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from actors.controller.context import ControllerContext
from actors.controller.election import offline_election, remove_from_isr
from actors.controller.elections import elect, electable, unclean_allowed
from actors.controller.journal import Change
from actors.controller.messages import LeaderAndIsrDone
from actors.controller.outbox import Outbox
from actors.controller.states import PartitionState, ReplicaKey, ReplicaState
from wire.errors import ErrorCode
from wire.messages import LeaderAndIsrResponse
from wire.topic import TopicPartition

log = logging.getLogger("ketch.controller")


def log_dirs_offline(ctx: ControllerContext, broker_id: int) -> None:
    """A heartbeat reported a newly failed log dir: ask the broker about every partition it
    hosts; its KAFKA_STORAGE_ERROR answers name the replicas in that dir."""
    log.warning(
        "%s: broker %d reports %d offline log dirs: asking which replicas they held",
        ctx.name,
        broker_id,
        len(ctx.sessions.offline_dirs(broker_id)),
    )
    outbox = Outbox()
    for p in ctx.model.partitions_hosted_on(broker_id):
        if not ctx.model.is_queued_for_deletion(p.topic_id):
            outbox.refresh(broker_id, ctx.model.topic_partition(p))
    ctx.sender.flush(outbox)


async def leader_and_isr_done(ctx: ControllerContext, message: LeaderAndIsrDone) -> None:
    """A LeaderAndIsr answer with storage errors: those replicas are offline."""
    broker_id = message.broker_id
    broker = ctx.model.broker(broker_id)
    if (
        broker is None
        or broker.broker_epoch != message.broker_epoch
        or not ctx.sessions.is_live(broker_id)
    ):
        return  # an answer from a previous incarnation: its registration reset everything
    response = message.response
    assert isinstance(response, LeaderAndIsrResponse), response
    failed: list[TopicPartition] = []
    for entry in response.partition_errors:
        if entry.error_code != ErrorCode.KAFKA_STORAGE_ERROR:
            continue
        tp = TopicPartition(entry.topic_name, entry.partition_index)
        p = ctx.model.partition_by_name(tp)
        if (
            p is not None
            and broker_id in p.replicas
            and not ctx.model.is_queued_for_deletion(p.topic_id)
        ):
            failed.append(tp)
    if failed:
        await replicas_offline(ctx, broker_id, failed)


async def replicas_offline(
    ctx: ControllerContext, broker_id: int, tps: Sequence[TopicPartition]
) -> None:
    """Take the broker's replicas of `tps` offline: out of the ISRs, leadership elsewhere."""
    new = [tp for tp in tps if not ctx.sessions.is_replica_offline(broker_id, tp)]
    if new:
        log.warning(
            "%s: replicas on broker %d are in a failed log dir: %s",
            ctx.name,
            broker_id,
            ", ".join(str(tp) for tp in new),
        )
    ctx.sessions.mark_replicas_offline(broker_id, tps)
    ctx.replica_states.transition([ReplicaKey(tp, broker_id) for tp in new], ReplicaState.OFFLINE)
    eligible = ctx.sessions.eligible()
    change = Change(ctx.model)
    led: list[TopicPartition] = []
    for tp in tps:
        record = ctx.model.partition_by_name(tp)
        assert record is not None, tp
        p = change.partition(record)
        if p.leader == broker_id:
            led.append(tp)
        elif broker_id in p.isr and (isr := remove_from_isr(p.isr, broker_id)) != p.isr:
            change.move(p, isr=isr)
    ctx.partition_states.transition(led, PartitionState.OFFLINE)
    elected = []
    for tp in led:
        record = ctx.model.partition_by_name(tp)
        assert record is not None, tp
        p = change.partition(record)
        result = offline_election(
            p.replicas, p.isr, electable(ctx, tp, eligible), unclean_allowed(ctx, p)
        )
        if elect(ctx, change, p, result, (broker_id,)):
            elected.append(tp)
    ctx.partition_states.transition(elected, PartitionState.ONLINE)
    outbox = Outbox()
    if change.changed_partitions():
        await ctx.journal.commit(change)
        ctx.sender.announce(change, outbox)
    # Every broker's metadata lists the newly offline replicas even when no ISR or leader
    # changed (a follower already out of the ISR): clients see them in Metadata, and a leader
    # stops counting such a replica towards its high watermark (Kafka always sends this
    # UpdateMetadata).
    outbox.metadata.update(new)
    if outbox.metadata or outbox.leader_and_isr:
        ctx.sender.flush(outbox)
