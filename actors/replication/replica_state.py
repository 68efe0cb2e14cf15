"""What a partition leader knows about each remote replica (Kafka's `Replica` / `ReplicaState`).

The leader learns a follower's position only from the follower's fetches: a fetch from offset N
means the follower holds everything below N. From the fetch times it derives `last_caught_up_ms`,
the latest moment the follower was known to be caught up with the leader, which drives ISR shrink
(replica.lag.time.max.ms) and whether a replica outside the ISR still holds back the high
watermark.

Owned by one PartitionActor and mutated only by its task (the objects never leave it), so no lock
is needed; the actor publishes what others need through `PartitionView`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from runtime.log.offsets import UNKNOWN_OFFSET, LogOffsetMetadata

# last_caught_up_ms of a replica never seen caught up. Kafka uses 0, which a monotonic clock that
# starts near zero (a test's manual clock, a fresh container) would read as "just caught up".
NEVER_MS: Final = -(2**62)


def _unknown_offset() -> LogOffsetMetadata:
    return LogOffsetMetadata(UNKNOWN_OFFSET)


@dataclass(slots=True)
class RemoteReplica:
    broker_id: int
    log_end_offset: LogOffsetMetadata = field(default_factory=_unknown_offset)
    # The leader's LEO when this replica last fetched, and when that was (monotonic ms).
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    last_caught_up_ms: int = NEVER_MS

    @property
    def log_end_offset_value(self) -> int:
        return self.log_end_offset.message_offset

    def update_fetch_state(
        self, fetch_offset: LogOffsetMetadata, fetch_time_ms: int, leader_end_offset: int
    ) -> None:
        """Record a fetch from `fetch_offset` at `fetch_time_ms` while the leader's LEO was
        `leader_end_offset`.

        The replica was caught up at this fetch if it asked for everything the leader had; and it
        was caught up at the *previous* fetch if it has now reached what the leader had then
        (everything written before that fetch arrived). Taking the later of the two times keeps a
        steadily replicating follower under constant load in the ISR although it is never exactly
        at the leader's LEO.
        """
        offset = fetch_offset.message_offset
        if offset >= leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, fetch_time_ms)
        elif offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = fetch_time_ms

    def reset(self, now_ms: int, leader_end_offset: int, *, new_leader: bool, in_isr: bool) -> None:
        """A new leader epoch began with this broker as leader.

        A replica in the ISR gets a fresh lag allowance (it was in sync by the controller's
        account); one outside starts as never caught up. A broker that just became leader knows
        nothing of the followers' positions: what it held about them dates from an earlier
        leadership and may be stale, so it is forgotten until their next fetches.
        """
        self.last_caught_up_ms = now_ms if in_isr else NEVER_MS
        if new_leader:
            self.log_end_offset = _unknown_offset()
            self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_time_ms = 0
        else:
            self.last_fetch_leader_log_end_offset = leader_end_offset
            self.last_fetch_time_ms = now_ms

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return (
            self.log_end_offset_value == leader_end_offset
            or now_ms - self.last_caught_up_ms <= max_lag_ms
        )
