"""Known bugs, re-injectable: the switch the simulator's own tests use to show that its
checkers catch real mistakes (issue 20: "prove the simulator can fail").

Each name below turns one fixed bug back on at the one place it lived. `REINJECTED` is empty
in every process except a test that puts a name in it for the length of one simulated run
(`reinjected(name)`); the code paths test membership with one set lookup, off the hot path
(truncation, the HW advance, a refused append, a failed AlterPartition send).

* `TRUNCATE_TO_HIGH_WATERMARK`: a follower truncates to its own high watermark instead of asking
  the leader where its leader epoch ended (Kafka before KIP-101): data the leader acknowledged,
  beyond the follower's lagging HW, is cut and can be lost by a second failure.
* `HIGH_WATERMARK_AT_LOG_END`: the leader moves its high watermark to its own log end without
  waiting for the ISR: acks=all is answered before any follower has the write.
* `ISR_SHRINK_IGNORES_MIN_INSYNC_REPLICAS`: after its ISR shrank below min.insync.replicas the
  leader still appends acks=all writes (`enough_replicas_for_append`) and answers them once its
  high watermark passes them (`acks_outcome`), instead of NOT_ENOUGH_REPLICAS(_AFTER_APPEND):
  an acknowledged write may be held by the leader alone.
* `LOST_ALTER_PARTITION_ANSWER`: the broker's AlterPartition manager forgets a batch whose answer
  never came (the connection was lost, the request timed out, the controller was unreachable)
  instead of resending it: the leaders' proposals in it stay pending for good, so their ISRs
  can never change again (until a LeaderAndIsr supersedes them). ketch once froze partitions
  the same way from the controller's side (issue 18, finding 1: the resent copy of an applied
  proposal was refused and the leader waited for a LeaderAndIsr that never came).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Final

TRUNCATE_TO_HIGH_WATERMARK: Final = "truncate-to-high-watermark"
HIGH_WATERMARK_AT_LOG_END: Final = "high-watermark-at-log-end"
ISR_SHRINK_IGNORES_MIN_INSYNC_REPLICAS: Final = "isr-shrink-ignores-min-insync-replicas"
LOST_ALTER_PARTITION_ANSWER: Final = "lost-alter-partition-answer"
KNOWN: Final = frozenset(
    {
        TRUNCATE_TO_HIGH_WATERMARK,
        HIGH_WATERMARK_AT_LOG_END,
        ISR_SHRINK_IGNORES_MIN_INSYNC_REPLICAS,
        LOST_ALTER_PARTITION_ANSWER,
    }
)

REINJECTED: set[str] = set()


@contextlib.contextmanager
def reinjected(name: str) -> Iterator[None]:
    """Turn the known bug `name` back on until the block ends (tests only)."""
    if name not in KNOWN:
        raise ValueError(f"unknown bug {name!r}; known: {sorted(KNOWN)}")
    REINJECTED.add(name)
    try:
        yield
    finally:
        REINJECTED.discard(name)
