"""DelayedProduce: an acks=all produce waiting for the high watermark (Kafka's DelayedProduce).

The ReplicaManager appends a produce request's batches through the partition actors, then builds
one `DelayedProduce` holding, per partition, either the offset the high watermark must reach
(last appended offset + 1) or the error the append already got. It hands the operation to the
produce purgatory under the `PRODUCE` keys of the partitions still waiting; a partition actor's
high-watermark advance (or leadership change) triggers `check_and_complete` on its key.

A partition stops waiting when its latest `PartitionView` shows that

* the replica is gone, no longer leader, or leads under another leadership than the append's
  (`PartitionView.leadership`: this broker stopped leading at some moment since the append):
  NOT_LEADER_OR_FOLLOWER. As in Kafka's DelayedProduce, leader epochs are never compared: a
  leader that stays leader through a leader-epoch bump (the controller removed a replica) keeps
  its waiting produces. The leadership check covers what Kafka gets by failing the waiting
  produces at the moment its broker becomes follower: a replica that lost and regained
  leadership between the append and a check may have truncated the batch, and a high watermark
  of the new leadership says nothing about it;
* its high watermark reached the required offset: NONE, unless the ISR the leader uses for the
  high watermark (the maximal ISR) has fewer than min.insync.replicas members, then
  NOT_ENOUGH_REPLICAS_AFTER_APPEND (the data is committed, but not as durably as asked; Kafka's
  checkEnoughReplicasReachOffset also counts the maximal ISR here).

The operation completes once no partition waits. Partitions still waiting when the timeout fires
answer REQUEST_TIMED_OUT: their answer holds that code from the start and only a finished wait
replaces it, so the same `on_complete` serves both endings, as in Kafka.

Ownership and why no lock: the operation is created, checked, completed and expired on the event
loop thread only (by the ReplicaManager and the purgatory's timer), and reads nothing but frozen
`PartitionView` values through the lookup it was given; none of its methods awaits. The purgatory
guarantees `on_complete` runs once, so the response callback runs once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from actors.views import NO_LEADERSHIP, PartitionView, Role, TopicPartitionKey, WatchKind
from runtime import reinjected
from runtime.purgatory import DelayedOperation
from wire.errors import ErrorCode
from wire.messages import PartitionProduceResponse, ProduceResponse, TopicProduceResponse
from wire.topic import TopicPartition

ViewLookup = Callable[[TopicPartition], PartitionView | None]


@dataclass(frozen=True, slots=True)
class ProducePartitionStatus:
    """One partition of an acks=all produce, as the local append left it.

    `required_offset` is the last appended offset + 1; `leadership` the leadership the leader
    appended under (`PartitionView.leadership`); `min_insync_replicas` the topic's
    min.insync.replicas at append time. When `error` is not NONE the append failed and the
    partition does not wait (the other fields are then ignored, except the offsets, which are
    answered as given).
    """

    topic_partition: TopicPartition
    error: ErrorCode = ErrorCode.NONE
    required_offset: int = -1
    leadership: int = NO_LEADERSHIP
    min_insync_replicas: int = 1
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None

    def __post_init__(self) -> None:
        if self.error is ErrorCode.NONE:
            assert self.required_offset > self.base_offset >= 0, self
            assert self.leadership != NO_LEADERSHIP, self
            assert self.min_insync_replicas >= 1, self


ProduceResults = Mapping[TopicPartition, PartitionProduceResponse]


def acks_outcome(status: ProducePartitionStatus, view: PartitionView | None) -> ErrorCode | None:
    """The answer for a waiting partition given its latest view, or None while it must wait."""
    if view is None or view.role is not Role.LEADER or view.leadership != status.leadership:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if view.high_watermark.message_offset < status.required_offset:
        return None
    if (
        len(view.maximal_isr) < status.min_insync_replicas
        and reinjected.ISR_SHRINK_IGNORES_MIN_INSYNC_REPLICAS not in reinjected.REINJECTED
    ):  # the bug (runtime/reinjected.py), looked up only when the answer would be refused
        return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    return ErrorCode.NONE


class DelayedProduce(DelayedOperation):
    """An acks=all produce; `respond` receives every partition's answer exactly once."""

    __slots__ = ("_answers", "_pending", "_respond", "_statuses", "_views")

    def __init__(
        self,
        timeout_ms: int,
        statuses: Sequence[ProducePartitionStatus],
        views: ViewLookup,
        respond: Callable[[ProduceResults], None],
    ) -> None:
        super().__init__(timeout_ms)
        tps = [status.topic_partition for status in statuses]
        if len(set(tps)) != len(tps):
            raise ValueError(f"a partition appears twice in a delayed produce: {tps}")
        self._statuses = {status.topic_partition: status for status in statuses}
        self._views = views
        self._respond = respond
        # The answer so far per partition: the append's error, or REQUEST_TIMED_OUT while the
        # partition waits, so that expiry needs no code path of its own.
        self._answers: dict[TopicPartition, ErrorCode] = {}
        self._pending: list[TopicPartition] = []
        for status in statuses:
            if status.error is ErrorCode.NONE:
                self._answers[status.topic_partition] = ErrorCode.REQUEST_TIMED_OUT
                self._pending.append(status.topic_partition)
            else:
                self._answers[status.topic_partition] = status.error

    def watch_keys(self) -> list[TopicPartitionKey]:
        """The purgatory keys to watch: PRODUCE keys of the partitions still waiting."""
        return [TopicPartitionKey(tp, WatchKind.PRODUCE) for tp in self._pending]

    @property
    def pending_partitions(self) -> tuple[TopicPartition, ...]:
        return tuple(self._pending)

    def try_complete(self) -> bool:
        still_pending: list[TopicPartition] = []
        for tp in self._pending:
            outcome = acks_outcome(self._statuses[tp], self._views(tp))
            if outcome is None:
                still_pending.append(tp)
            else:
                self._answers[tp] = outcome
        self._pending = still_pending
        return not still_pending and self.force_complete()

    def on_complete(self) -> None:
        results: dict[TopicPartition, PartitionProduceResponse] = {}
        for tp, status in self._statuses.items():
            error = self._answers[tp]
            results[tp] = PartitionProduceResponse(
                index=tp.partition,
                error_code=error,
                base_offset=status.base_offset,
                log_append_time_ms=status.log_append_time_ms,
                log_start_offset=status.log_start_offset,
                error_message=status.error_message if error is status.error else None,
            )
        self._respond(results)

    def on_expiration(self) -> None:
        # The answers of partitions still waiting were REQUEST_TIMED_OUT all along and have
        # already been sent by on_complete; nothing is left to do but note it.
        pass

    def __repr__(self) -> str:
        return f"DelayedProduce(partitions={list(self._statuses)}, pending={self._pending})"


def build_produce_response(
    results: Iterable[tuple[TopicPartition, PartitionProduceResponse]],
) -> ProduceResponse:
    """Group per-partition answers by topic, topics and partitions in first-seen order."""
    by_topic: dict[str, list[PartitionProduceResponse]] = {}
    for tp, answer in results:
        assert answer.index == tp.partition, (tp, answer)
        by_topic.setdefault(tp.topic, []).append(answer)
    return ProduceResponse(
        responses=[
            TopicProduceResponse(name=topic, partition_responses=answers)
            for topic, answers in by_topic.items()
        ]
    )
