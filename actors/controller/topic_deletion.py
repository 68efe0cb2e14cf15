"""Topic deletion (Kafka's TopicDeletionManager): DeleteTopics, the replicas' deletion, and
forgetting a topic once every replica is gone.

1. DeleteTopics queues each named topic for deletion (a TopicDeletionRecord, written first) and
   answers at once. Brokers stop serving the topic straight away: UpdateMetadata announces it
   with leader -2 (actors/controller/requests.py) and its partitions go Offline.
2. Each live replica is sent StopReplica(delete) and becomes ReplicaDeletionStarted; a replica on
   a dead broker waits as ReplicaDeletionIneligible and is retried when its broker registers
   again (`resume_deletions`, also run when the controller restarts).
3. The brokers' answers come back as `StopReplicaDone` messages: success moves a replica to
   ReplicaDeletionSuccessful, an error to ReplicaDeletionIneligible — also a request refused
   whole, whose answer lists no partitions. An answer from an earlier incarnation of the broker
   is ignored (the new one gets its own request).
4. A live broker that failed a deletion gets it again after a backoff
   (actors/controller/deletion_retries.py decides when; `retry_replica_deletion` resends), until
   it succeeds or the broker dies — then step 2's re-registration takes over. Without this, a
   failed deletion on a broker that stays up would wait for its next registration or a
   controller restart.
5. A topic whose every replica succeeded is removed (a RemoveTopicRecord) and its partitions and
   replicas leave the state machines.

State: the queue of deletions is durable in the model (actors/controller/model.py); the replica
states are the controller actor's in-memory state machine, and so are the retries' alarms. All
are changed only from the actor's handlers (actors/controller/context.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from actors.controller.channel import applied_code
from actors.controller.context import ControllerContext
from actors.controller.journal import Change
from actors.controller.messages import RetryReplicaDeletion, StopReplicaDone
from actors.controller.outbox import Outbox
from actors.controller.states import PartitionState, ReplicaKey, ReplicaState
from wire.errors import ErrorCode
from wire.messages import (
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    StopReplicaResponse,
)
from wire.metadata_records import RemoveTopicRecord, TopicDeletionRecord, TopicRecord
from wire.topic import TopicPartition

log = logging.getLogger("ketch.controller")


async def delete_topics(
    ctx: ControllerContext, request: DeleteTopicsRequest
) -> DeleteTopicsResponse:
    change = Change(ctx.model)
    results = []
    queued: list[TopicRecord] = []
    for name in request.topic_names:
        topic = ctx.model.topic_by_name(name)
        if topic is None or any(t.topic_id == topic.topic_id for t in queued):
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if topic is None else ErrorCode.NONE
            results.append(DeletableTopicResult(name=name, error_code=error))
            continue
        results.append(DeletableTopicResult(name=name, topic_id=topic.topic_id))
        if not ctx.model.is_queued_for_deletion(topic.topic_id):
            change.add(TopicDeletionRecord(topic.topic_id))
            queued.append(topic)
    await ctx.journal.commit(change)
    if queued:
        # Brokers stop serving the topics now (leader -2), before their replicas go.
        outbox = Outbox(metadata_everything=True)
        for topic in queued:
            log.info("%s: deleting topic %s", ctx.name, topic.name)
            tps = [ctx.model.topic_partition(p) for p in ctx.model.partitions_of(topic.topic_id)]
            ctx.partition_states.transition(tps, PartitionState.OFFLINE)
            start_replica_deletion(ctx, topic, outbox)
        ctx.sender.flush(outbox)
    return DeleteTopicsResponse(responses=results)


def start_replica_deletion(
    ctx: ControllerContext, topic: TopicRecord, outbox: Outbox, only: Iterable[int] | None = None
) -> None:
    """StopReplica(delete) to the live replicas of the topic (all, or those on `only`);
    replicas on dead brokers wait as ReplicaDeletionIneligible."""
    live = ctx.sessions.live()
    brokers = None if only is None else set(only)
    for p in ctx.model.partitions_of(topic.topic_id):
        tp = ctx.model.topic_partition(p)
        for r in p.replicas:
            if brokers is not None and r not in brokers:
                continue
            key = ReplicaKey(tp, r)
            if r in live:
                ctx.replica_states.transition([key], ReplicaState.OFFLINE)
                if ctx.replica_states.transition([key], ReplicaState.REPLICA_DELETION_STARTED):
                    outbox.stop(r, tp, delete=True)
            else:
                ctx.replica_states.transition([key], ReplicaState.OFFLINE)
                ctx.replica_states.transition([key], ReplicaState.REPLICA_DELETION_INELIGIBLE)


async def resume_deletions(ctx: ControllerContext, brokers: Iterable[int]) -> None:
    """Deletions waiting on `brokers` (just registered, or all live after a restart) go on."""
    outbox = Outbox()
    for topic in ctx.model.topics_queued_for_deletion():
        start_replica_deletion(ctx, topic, outbox, only=brokers)
    ctx.sender.flush(outbox)
    await complete_deletions(ctx)


async def stop_replica_done(ctx: ControllerContext, message: StopReplicaDone) -> None:
    broker_id = message.broker_id
    broker = ctx.model.broker(broker_id)
    if broker is None or broker.broker_epoch != message.broker_epoch:
        return  # answered by an earlier incarnation; the new one gets its own request
    response = message.response
    outcomes: dict[ReplicaKey, bool] = {}
    if response is None:
        return  # the channel gave up (broker removed): the replicas stay as they are
    if not isinstance(response, StopReplicaResponse):
        return
    for entry in response.partition_errors:
        key = ReplicaKey(TopicPartition(entry.topic_name, entry.partition_index), broker_id)
        # A resent request fenced as stale was applied by its earlier copy.
        outcomes[key] = applied_code(entry.error_code, message.attempts)
    # A partition the answer does not list (a request refused whole) has the request's outcome;
    # with no error code that is a broker's omission, and an unconfirmed deletion is not done.
    whole = response.error_code != ErrorCode.NONE and applied_code(
        response.error_code, message.attempts
    )
    for tp in message.partitions:
        outcomes.setdefault(ReplicaKey(tp, broker_id), whole)
    for key, ok in outcomes.items():
        if ctx.replica_states.state(key) is not ReplicaState.REPLICA_DELETION_STARTED:
            continue
        target = (
            ReplicaState.REPLICA_DELETION_SUCCESSFUL
            if ok
            else ReplicaState.REPLICA_DELETION_INELIGIBLE
        )
        ctx.replica_states.transition([key], target)
    _schedule_retry(ctx, broker_id, broker.broker_epoch)
    await complete_deletions(ctx)


def _schedule_retry(ctx: ControllerContext, broker_id: int, broker_epoch: int) -> None:
    """A live broker with replicas whose deletion failed gets them again after a backoff."""
    failed = ctx.replica_states.replicas_on_broker(
        broker_id, ReplicaState.REPLICA_DELETION_INELIGIBLE
    )
    if not failed:
        ctx.deletion_retries.done(broker_id)
    elif ctx.sessions.is_live(broker_id):
        delay_ms = ctx.deletion_retries.schedule(broker_id, broker_epoch)
        if delay_ms is not None:
            log.warning(
                "%s: %d replica deletions failed on broker %d; retrying in %.0f ms",
                ctx.name,
                len(failed),
                broker_id,
                delay_ms,
            )


async def retry_replica_deletion(ctx: ControllerContext, message: RetryReplicaDeletion) -> None:
    """Send the broker's failed deletions again, if it is still the same live incarnation (a
    dead or re-registered one gets them from `resume_deletions` when it registers)."""
    broker_id = message.broker_id
    broker = ctx.model.broker(broker_id)
    if (
        broker is None
        or broker.broker_epoch != message.broker_epoch
        or not ctx.sessions.is_live(broker_id)
    ):
        return
    failed = ctx.replica_states.replicas_on_broker(
        broker_id, ReplicaState.REPLICA_DELETION_INELIGIBLE
    )
    outbox = Outbox()
    for key in ctx.replica_states.transition(failed, ReplicaState.OFFLINE):
        if ctx.replica_states.transition([key], ReplicaState.REPLICA_DELETION_STARTED):
            outbox.stop(broker_id, key.partition, delete=True)
    if not outbox.stop_replica:
        ctx.deletion_retries.done(broker_id)
        return
    log.info("%s: retrying %d replica deletions on broker %d", ctx.name, len(failed), broker_id)
    # The backoff keeps growing until an answer leaves nothing failed (`_schedule_retry`).
    ctx.sender.flush(outbox)


async def complete_deletions(ctx: ControllerContext) -> None:
    """A topic whose every replica confirmed deletion is forgotten."""
    change = Change(ctx.model)
    done = []
    for topic in ctx.model.topics_queued_for_deletion():
        if ctx.replica_states.all_replicas_in_state(
            topic.name, ReplicaState.REPLICA_DELETION_SUCCESSFUL
        ):
            change.add(RemoveTopicRecord(topic.topic_id))
            done.append(topic)
    if not done:
        return
    tps = [ctx.model.topic_partition(p) for t in done for p in ctx.model.partitions_of(t.topic_id)]
    keys = [k for t in done for k in ctx.replica_states.replicas_of_topic(t.name)]
    await ctx.journal.commit(change)
    ctx.replica_states.transition(keys, ReplicaState.NON_EXISTENT)
    ctx.partition_states.transition(tps, PartitionState.NON_EXISTENT)
    for topic in done:
        log.info("%s: topic %s deleted", ctx.name, topic.name)
