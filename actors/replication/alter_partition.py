"""AlterPartition proposals (KIP-497): what a partition leader asks the controller, and the answer.

A leader never changes its ISR by itself. It proposes the new ISR together with the leader epoch
and partition epoch its view is based on; the controller applies the change only when both still
match, and answers with the partition's resulting state (or an error). The partition actor keeps
at most one proposal in flight (see actors/replication/partition.py).

The actor hands a proposal to an `AlterPartitionSink` together with a callback. The sink (the
broker's AlterPartition manager once the controller exists; a recording sink in tests) batches,
sends, retries transport failures with its own backoff, and finally calls the callback once with
the result. The callback only enqueues a message into the partition actor's mailbox, so the sink
may call it from any task on the event loop, synchronously inside `submit` included.

These are plain values with no owner; they are immutable and need no lock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from wire.errors import ErrorCode
from wire.messages.control import AlterPartitionPartitionData, AlterPartitionPartitionResult
from wire.topic import TopicPartition


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """The leader's request: make `new_isr` the ISR, if the partition is still at
    (`leader_epoch`, `partition_epoch`)."""

    topic_partition: TopicPartition
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]

    def __post_init__(self) -> None:
        # The ISR never becomes empty and the leader never proposes to leave it.
        assert self.leader_id in self.new_isr, self
        assert len(set(self.new_isr)) == len(self.new_isr), self

    def to_partition_data(self) -> AlterPartitionPartitionData:
        return AlterPartitionPartitionData(
            partition_index=self.topic_partition.partition,
            leader_epoch=self.leader_epoch,
            new_isr=list(self.new_isr),
            partition_epoch=self.partition_epoch,
        )


@dataclass(frozen=True, slots=True)
class IsrProposalResult:
    """The controller's answer. When `error` is NONE the other fields are the partition's state
    after the decision (which may differ from the proposal if the controller knew better)."""

    error: ErrorCode
    leader_id: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1

    @classmethod
    def failed(cls, error: ErrorCode) -> IsrProposalResult:
        assert error is not ErrorCode.NONE
        return cls(error)

    @classmethod
    def from_partition_result(cls, result: AlterPartitionPartitionResult) -> IsrProposalResult:
        error = ErrorCode.from_code(result.error_code)
        if error is not ErrorCode.NONE:
            return cls(error)
        return cls(
            ErrorCode.NONE,
            leader_id=result.leader_id,
            leader_epoch=result.leader_epoch,
            isr=tuple(result.isr),
            partition_epoch=result.partition_epoch,
        )


class AlterPartitionSink(Protocol):
    def submit(self, proposal: IsrProposal, on_result: Callable[[IsrProposalResult], None]) -> None:
        """Send `proposal` to the controller; call `on_result` exactly once with the answer."""
        ...
