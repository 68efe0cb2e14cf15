"""AlterPartition at the controller (KIP-497, KIP-841): a partition leader proposes a new ISR.

A request from an unknown broker or an earlier incarnation is refused whole
(STALE_BROKER_EPOCH). Each partition in it is checked (`check_alter`), in this order:

- the topic exists and is not being deleted (UNKNOWN_TOPIC_OR_PARTITION);
- the sender leads the partition (NOT_LEADER_OR_FOLLOWER);
- the leader epoch and the partition epoch are the current ones (FENCED_LEADER_EPOCH,
  INVALID_UPDATE_VERSION): a proposal based on an older state of the partition is refused;
- the new ISR is non-empty, without duplicates, within the replicas and contains the sender
  (INVALID_REQUEST);
- every replica joining the ISR is eligible — live and not shutting down (INELIGIBLE_REPLICA,
  KIP-841).

An accepted ISR that differs from the current one is committed with a new partition epoch; the
leader epoch stays (the leader itself proposed it). The answer carries the partition's state as
committed; the leader learns the result from it, the other brokers from UpdateMetadata.

State: none of its own; it works on the controller actor's (actors/controller/context.py), from
the actor's AlterPartition handler.
"""

from __future__ import annotations

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


async def alter_partition(
    ctx: ControllerContext, request: AlterPartitionRequest
) -> AlterPartitionResponse:
    broker = ctx.model.broker(request.broker_id)
    if broker is None or broker.broker_epoch != request.broker_epoch:
        return AlterPartitionResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    eligible = ctx.sessions.eligible()
    change = Change(ctx.model)
    answers: list[tuple[str, bytes, list[AlterPartitionPartitionResult]]] = []
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
                continue
            if tuple(data.new_isr) != p.isr:
                p = change.move(p, isr=list(data.new_isr), bump_leader_epoch=False)
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
    # The leader learns the result from the answer; the other brokers from UpdateMetadata.
    outbox = Outbox()
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
    if partition_epoch != p.partition_epoch:
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


def _refused(partition: int, error: ErrorCode) -> AlterPartitionPartitionResult:
    return AlterPartitionPartitionResult(partition_index=partition, error_code=error)
