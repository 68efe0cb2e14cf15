"""A partition leader's ISR and high-watermark rules, as pure functions over its state.

The PartitionActor (actors/replication/partition.py) owns everything these read — the committed
ISR, the pending AlterPartition proposal, each follower's `RemoteReplica` — and applies what they
decide; nothing here keeps state, touches the log or talks to the controller.

* The maximal ISR (KIP-497): while a proposal is pending the leader must act as if both the old
  and the proposed ISR could be the true one until the controller answers, so the high watermark
  and a waiting acks=all produce count committed plus the joining replica during an expansion,
  and the old ISR during a shrink (`PendingIsrChange.maximal_isr`).
* Joining (`isr_expansion`): a follower joins only once it reached both the HW and the start of
  the leader's epoch (KAFKA-7128), and only if its broker is eligible — alive and not shutting
  down (KIP-841; the caller's `is_eligible`, from the metadata cache).
* Leaving (`isr_shrink`): an ISR member not caught up within replica.lag.time.max.ms; the leader
  never removes itself.
* The high watermark (`high_watermark_candidate`, `next_high_watermark`): seed 000's
  maybeIncrementLeaderHW over the maximal ISR, never lower than it was.
* min.insync.replicas before an acks=all append (`enough_replicas_for_append`), over the
  committed ISR.
* The controller's answer to a proposal (`judge_alter_partition`): commit it, ignore it, fall back
  to the committed ISR, wait for LeaderAndIsr, or resubmit.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from actors.replication.alter_partition import IsrProposal, IsrProposalResult
from actors.replication.partition_messages import ACKS_ALL
from actors.replication.replica_state import RemoteReplica
from runtime import reinjected
from runtime.log.offsets import LogOffsetMetadata
from wire.errors import ErrorCode

# -- pending ISR change ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PendingIsrChange:
    proposal: IsrProposal
    # The ISR the leader counts while waiting: committed + joiner (expand), committed (shrink).
    maximal_isr: tuple[int, ...]


def maximal_isr(isr: tuple[int, ...], pending: PendingIsrChange | None) -> tuple[int, ...]:
    return pending.maximal_isr if pending is not None else isr


def enough_replicas_for_append(
    required_acks: int, counted_isr: tuple[int, ...], min_insync_replicas: int
) -> bool:
    """Whether an append with `required_acks` may go ahead: only acks=all needs
    min.insync.replicas members in `counted_isr`. The partition passes its committed ISR, as
    Kafka's appendRecordsToLeader does: a replica whose expansion is still pending may yet be
    refused by the controller, so it must not admit a write."""
    return (
        required_acks != ACKS_ALL
        or len(counted_isr) >= min_insync_replicas
        # The bug (runtime/reinjected.py), looked up only when the append would be refused.
        or reinjected.ISR_SHRINK_IGNORES_MIN_INSYNC_REPLICAS in reinjected.REINJECTED
    )


# -- joining and leaving --------------------------------------------------------------------------


def isr_expansion(
    isr: tuple[int, ...],
    replica: RemoteReplica,
    *,
    high_watermark: int,
    leader_epoch_start_offset: int,
    is_eligible: Callable[[int], bool],
) -> tuple[int, ...] | None:
    """The ISR with `replica` added if it may join now, else None. The caller proposes it only
    while no other change is pending."""
    if replica.broker_id in isr:
        return None
    end = replica.log_end_offset_value
    # KAFKA-7128: reaching the HW is not enough. A follower below the start of this epoch may
    # still hold records of an older epoch that this leader does not have; joining the ISR
    # then could make it an eligible leader with a diverged log.
    if end < high_watermark or end < leader_epoch_start_offset:
        return None
    if not is_eligible(replica.broker_id):
        return None
    return (*isr, replica.broker_id)


def isr_shrink(
    isr: tuple[int, ...],
    leader_id: int,
    remote: Mapping[int, RemoteReplica],
    *,
    leader_end_offset: int,
    now_ms: int,
    max_lag_ms: int,
) -> tuple[int, ...] | None:
    """The ISR without its members not caught up within `max_lag_ms`, or None if all are."""
    out_of_sync = {
        r
        for r in isr
        if r != leader_id  # the leader never removes itself
        and (
            (replica := remote.get(r)) is None
            or not replica.is_caught_up(leader_end_offset, now_ms, max_lag_ms)
        )
    }
    if not out_of_sync:
        return None
    return tuple(r for r in isr if r not in out_of_sync)


# -- high watermark -------------------------------------------------------------------------------


def high_watermark_candidate(
    leader_end: LogOffsetMetadata,
    remote: Iterable[RemoteReplica],
    counted_isr: tuple[int, ...],
    *,
    now_ms: int,
    max_lag_ms: int,
    is_eligible: Callable[[int], bool],
) -> LogOffsetMetadata:
    """Seed 000's maybeIncrementLeaderHW over the maximal ISR (`counted_isr`): the smallest LEO
    among the maximal ISR and the replicas caught up within replica.lag.time.max.ms (a follower
    about to join must not fall behind the HW again by being ignored)."""
    candidate = leader_end
    for replica in remote:
        end = replica.log_end_offset_value
        if end >= candidate.message_offset:
            continue
        if replica.broker_id in counted_isr or (
            replica.is_caught_up(leader_end.message_offset, now_ms, max_lag_ms)
            and is_eligible(replica.broker_id)
        ):
            candidate = replica.log_end_offset
    return candidate


def next_high_watermark(old: LogOffsetMetadata, candidate: LogOffsetMetadata) -> LogOffsetMetadata:
    """The high watermark after `candidate`: never lower than `old`; at the same offset, the one
    that knows its segment position."""
    if candidate.message_offset > old.message_offset:
        return candidate
    if (
        candidate.message_offset == old.message_offset
        and old.message_offset_only
        and not candidate.message_offset_only
    ):
        return candidate
    return old


# -- the controller's answer ----------------------------------------------------------------------

# AlterPartition errors after which the controller guarantees it did not apply the proposal and
# the partition epoch is current: it is safe to fall back to the committed ISR and retry later.
REVERT_ERRORS: Final = frozenset({ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA})
# Errors saying this leader's view is outdated: keep the proposal pending (no further ISR change)
# until newer state arrives in LeaderAndIsr. Any other error is a failed attempt: resubmit.
WAIT_FOR_METADATA_ERRORS: Final = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.INVALID_UPDATE_VERSION,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.NEW_LEADER_ELECTED,
    }
)


class IsrAnswer(enum.Enum):
    """What a leader does with the controller's answer to its pending proposal."""

    COMMIT = "commit"  # take the answered ISR and partition epoch; the proposal is done
    OTHER_LEADER_EPOCH = "other leader epoch"  # ignore: an answer about another leadership
    OLDER_PARTITION_EPOCH = "older partition epoch"  # ignore: older than what was applied
    REVERT = "revert"  # not applied: fall back to the committed ISR, propose again later
    WAIT_FOR_METADATA = "wait for metadata"  # keep it pending until a LeaderAndIsr
    RESUBMIT = "resubmit"  # the sink gave up on one attempt: the proposal goes again


def judge_alter_partition(
    result: IsrProposalResult, *, leader_epoch: int, partition_epoch: int
) -> IsrAnswer:
    """The answer's meaning for a leader at (`leader_epoch`, `partition_epoch`)."""
    if result.error is ErrorCode.NONE:
        if result.leader_epoch != leader_epoch:
            return IsrAnswer.OTHER_LEADER_EPOCH
        if result.partition_epoch < partition_epoch:
            return IsrAnswer.OLDER_PARTITION_EPOCH
        return IsrAnswer.COMMIT
    if result.error in REVERT_ERRORS:
        return IsrAnswer.REVERT
    if result.error in WAIT_FOR_METADATA_ERRORS:
        return IsrAnswer.WAIT_FOR_METADATA
    # A timeout, the controller moved: the proposal is still valid, so it goes again; the sink
    # owns the backoff between attempts.
    return IsrAnswer.RESUBMIT
