"""AlterPartition at the controller (KIP-497, KIP-841): a partition leader proposes a new ISR.

A request from an unknown broker or an earlier incarnation is refused whole
(STALE_BROKER_EPOCH). Each partition in it is checked (`check_alter`), in this order:

- the topic exists and is not being deleted (UNKNOWN_TOPIC_OR_PARTITION);
- the sender leads the partition (NOT_LEADER_OR_FOLLOWER);
- the leader epoch and the partition epoch are the current ones (FENCED_LEADER_EPOCH,
  INVALID_UPDATE_VERSION): a proposal based on an older state of the partition is refused —
  unless it is a repeat of the change that made the current state (`is_applied_repeat`: same
  leader, leader epoch and ISR, an older partition epoch; Kafka's
  LeaderAndIsr.equalsAllowStalePartitionEpoch). The broker's AlterPartition manager resends a
  batch whose answer was lost; refusing the repeat would leave its leader waiting for a state
  it already has, so the repeat is answered with the current state and nothing is written;
- the new ISR is non-empty, without duplicates, within the replicas and contains the sender
  (INVALID_REQUEST);
- every replica joining the ISR is eligible — live and not shutting down (INELIGIBLE_REPLICA,
  KIP-841).

An accepted ISR that differs from the current one is committed with a new partition epoch; the
leader epoch stays (the leader itself proposed it). The answer carries the partition's state as
committed; the leader learns the result from it, the other brokers from UpdateMetadata. An ISR
that takes the partition's preferred replica back while another broker leads is handed, once
committed, to the preferred-leader schedule (`rejoins_preferred`;
actors/controller/preferred_leaders.py), which gives it the leadership back soon.

A leader refused because its view is behind (INVALID_UPDATE_VERSION, or FENCED_LEADER_EPOCH
while it still leads under a newer epoch) keeps its proposal pending until a LeaderAndIsr tells
it the committed state; ketch pushes metadata rather than letting brokers read a metadata log as
KRaft does, so that LeaderAndIsr is sent to it at once (`is_behind`), not left to some later
event.

State: none of its own; it works on the controller actor's (actors/controller/context.py), from
the actor's AlterPartition handler.
"""

from __future__ import annotations

from collections.abc import Sequence

from actors.controller.context import ControllerContext
from actors.controller.journal import Change
from actors.controller.outbox import Outbox
from wire.errors import ErrorCode
from wire.messages import (
    AlterPartitionPartitionResult,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionTopicResult,
)
from wire.metadata_records import PartitionRecord
from wire.topic import TopicPartition


async def alter_partition(
    ctx: ControllerContext, request: AlterPartitionRequest
) -> AlterPartitionResponse:
    broker = ctx.model.broker(request.broker_id)
    if broker is None or broker.broker_epoch != request.broker_epoch:
        return AlterPartitionResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    eligible = ctx.sessions.eligible()
    change = Change(ctx.model)
    outbox = Outbox()
    answers: list[tuple[str, bytes, list[AlterPartitionPartitionResult]]] = []
    rejoined: list[TopicPartition] = []
    for topic_data in request.topics:
        topic = ctx.model.topic_by_name(topic_data.topic_name)
        results = []
        for data in topic_data.partitions:
            p = (
                None
                if topic is None or ctx.model.is_queued_for_deletion(topic.topic_id)
                else ctx.model.partition(topic.topic_id, data.partition_index)
            )
            if p is None:
                results.append(_refused(data.partition_index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            error = check_alter(
                request.broker_id,
                p,
                data.leader_epoch,
                data.partition_epoch,
                list(data.new_isr),
                eligible,
            )
            if error is not None:
                results.append(_refused(data.partition_index, error))
                if is_behind(request.broker_id, p, data.leader_epoch, error):
                    outbox.refresh(request.broker_id, ctx.model.topic_partition(p))
                continue
            if tuple(data.new_isr) != p.isr:
                if rejoins_preferred(p, data.new_isr):
                    rejoined.append(ctx.model.topic_partition(p))
                p = change.move(p, isr=list(data.new_isr))
            results.append(
                AlterPartitionPartitionResult(
                    partition_index=p.partition,
                    leader_id=p.leader,
                    leader_epoch=p.leader_epoch,
                    isr=list(p.isr),
                    partition_epoch=p.partition_epoch,
                )
            )
        answers.append(
            (topic_data.topic_name, topic.topic_id if topic else topic_data.topic_id, results)
        )
    await ctx.journal.commit(change)
    ctx.preferred_leaders.rejoined(rejoined)
    # The leader learns the result from the answer; the other brokers from UpdateMetadata.
    for p in change.changed_partitions():
        outbox.metadata.add(ctx.model.topic_partition(p))
    ctx.sender.flush(outbox)
    return AlterPartitionResponse(
        topics=[
            AlterPartitionTopicResult(topic_name=name, topic_id=topic_id, partitions=results)
            for name, topic_id, results in answers
        ]
    )


def check_alter(
    sender: int,
    p: PartitionRecord,
    leader_epoch: int,
    partition_epoch: int,
    new_isr: list[int],
    eligible: set[int],
) -> ErrorCode | None:
    """Why the proposed ISR is refused, or None when it may be committed."""
    if p.leader != sender:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if leader_epoch != p.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if partition_epoch != p.partition_epoch and not is_applied_repeat(
        p, sender, leader_epoch, partition_epoch, new_isr
    ):
        return ErrorCode.INVALID_UPDATE_VERSION
    if (
        not new_isr
        or len(set(new_isr)) != len(new_isr)
        or not set(new_isr) <= set(p.replicas)
        or sender not in new_isr
    ):
        return ErrorCode.INVALID_REQUEST
    joining = set(new_isr) - set(p.isr)
    if not joining <= eligible:
        return ErrorCode.INELIGIBLE_REPLICA
    return None


def rejoins_preferred(p: PartitionRecord, new_isr: Sequence[int]) -> bool:
    """Whether the accepted ISR takes the preferred (first assigned) replica back while another
    broker leads. It joins as an eligible replica (`check_alter` refused it otherwise): alive,
    unfenced and not shutting down."""
    preferred = p.replicas[0]
    return p.leader != preferred and preferred not in p.isr and preferred in new_isr


def is_applied_repeat(
    p: PartitionRecord, sender: int, leader_epoch: int, partition_epoch: int, new_isr: list[int]
) -> bool:
    """Whether a proposal from an older partition epoch asks for exactly the current state: the
    repeat of a change already applied, whose answer the leader did not get. ISRs compare in
    order, as Kafka's equalsAllowStalePartitionEpoch compares them; a resend is the same
    proposal, and the controller commits a proposed ISR as given."""
    return (
        sender == p.leader
        and leader_epoch == p.leader_epoch
        and partition_epoch < p.partition_epoch
        and tuple(new_isr) == p.isr
    )


def is_behind(sender: int, p: PartitionRecord, leader_epoch: int, error: ErrorCode) -> bool:
    """Whether a refusal says the sender, still the partition's leader, has an outdated view of
    it — the case where it waits for a LeaderAndIsr with the committed state."""
    if error is ErrorCode.INVALID_UPDATE_VERSION:
        return True  # the sender leads under the current leader epoch (checked before)
    # A leader epoch newer than the controller's is no view to correct.
    return (
        error is ErrorCode.FENCED_LEADER_EPOCH
        and sender == p.leader
        and (leader_epoch < p.leader_epoch)
    )


def _refused(partition: int, error: ErrorCode) -> AlterPartitionPartitionResult:
    return AlterPartitionPartitionResult(partition_index=partition, error_code=error)
