"""Where a follower cuts its log before fetching from a new leader: the leader-epoch truncation
decision (KIP-101, KIP-279; Kafka's `AbstractFetcherThread.getOffsetTruncationState`).

The fetcher asks the leader, with OffsetForLeaderEpoch, where the follower's latest epoch ends
there; the answer is the largest leader epoch <= the one asked for and its end offset. The cut
goes to that end offset, never above the follower's own end of that epoch nor above its log end.
When the leader answers with an epoch the follower never held, the cut is intermediate — to the
follower's end of the largest epoch below it — and the fetcher asks again next round with its
new, older latest epoch. Without epochs to compare (an empty follower log, a leader holding no
epoch <= the follower's, an answer without an epoch) only offsets are trusted.

Pure functions over offsets and epochs; the fetcher (actors/replication/fetcher.py) asks the
questions and makes the cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

UNDEFINED_EPOCH: Final = -1  # OffsetForLeaderEpoch's "no such epoch"
UNDEFINED_EPOCH_OFFSET: Final = -1  # ... and its "no end offset"


@dataclass(frozen=True, slots=True)
class TruncationTarget:
    offset: int
    # False: an intermediate cut; the partition asks the leader again with its older epoch.
    complete: bool = True


def truncation_without_epochs(fetch_offset: int, local_end: int) -> TruncationTarget:
    """The follower holds no epochs (an empty log), or the leader holds no epoch <= the
    follower's (its log starts later): Kafka falls back to the initial fetch offset (the HW); an
    out-of-range fetch then moves to the leader's log start."""
    return TruncationTarget(min(fetch_offset, local_end))


def needs_local_epoch_end(leader_epoch: int, leader_end_offset: int) -> bool:
    """Whether the leader's answer is compared with the follower's own end of that epoch (both
    its parts are defined)."""
    return leader_end_offset != UNDEFINED_EPOCH_OFFSET and leader_epoch != UNDEFINED_EPOCH


def truncation_by_leader_epoch(
    *,
    fetch_offset: int,
    local_end: int,
    leader_epoch: int,
    leader_end_offset: int,
    local_epoch_end: tuple[int, int] | None,
) -> TruncationTarget:
    """The cut for the leader's answer (`leader_epoch`, `leader_end_offset`). `local_epoch_end`
    is the follower's (largest epoch <= `leader_epoch`, its end offset), asked of the follower
    only when `needs_local_epoch_end`."""
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return truncation_without_epochs(fetch_offset, local_end)
    if leader_epoch == UNDEFINED_EPOCH:
        # An answer without an epoch (Kafka: a pre-2.0 leader): trust only the offset.
        return TruncationTarget(min(leader_end_offset, local_end))
    assert local_epoch_end is not None, "asked only when needs_local_epoch_end"
    own_epoch, own_end = local_epoch_end
    if own_epoch == UNDEFINED_EPOCH:
        return TruncationTarget(min(leader_end_offset, local_end))
    if own_epoch != leader_epoch:
        # We never held the leader's epoch: cut to the end of our largest epoch below it, then
        # ask again with that epoch (the next round).
        return TruncationTarget(min(own_end, local_end), complete=False)
    return TruncationTarget(min(own_end, leader_end_offset, local_end))
