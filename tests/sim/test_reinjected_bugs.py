"""The simulator can fail: with a known bug switched back on (runtime/reinjected.py), the
checkers catch it within a bounded number of seeds, and name the invariant it broke.

* The leader moving its high watermark to its own log end: acks=all answered before the ISR has
  the write; a crash (its unflushed tail torn) then loses it - `acknowledged_writes_kept`.
* A follower truncating to its high watermark instead of by leader epoch (before KIP-101): two
  brokers crashing close together elect a replica that cut acknowledged data.
* A leader whose ISR shrank below min.insync.replicas still taking and answering acks=all
  writes: two brokers crash, the third acknowledges writes it alone holds -
  `acks_all_held_by_min_insync_replicas` (no write need be lost for it to count).
* A broker forgetting an AlterPartition whose answer was lost instead of resending it: the
  leader's proposal stays pending for good - the liveness step "every pending AlterPartition
  resolved". The fault is `lost_alter_partition_answer` (an answer lost on purpose when a broker
  next proposes, faults.py); partitions and isolations make the ISR changes it waits for.

Each search runs only the fault kinds that can expose the bug and the plain producers and
consumers (no transactions, no topic churn: faster seeds), from seed 0 (deterministic: the seed
that catches it is the same on every run), and fails if none does within `WITHIN` seeds; today
they are caught at seeds 0, 3, 0 and 2. `caught_by` is the start of "checker: message" of a
violation the catching seed must report.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Final

import pytest

from runtime.reinjected import (
    HIGH_WATERMARK_AT_LOG_END,
    ISR_SHRINK_IGNORES_MIN_INSYNC_REPLICAS,
    LOST_ALTER_PARTITION_ANSWER,
    TRUNCATE_TO_HIGH_WATERMARK,
    reinjected,
)
from testkit.sim.simulation import Settings, run_seed

WITHIN: Final = 40
LIGHT: Final = functools.partial(Settings, transactional_topic=None, churn=False)
CRASHES: Final = ("crash", "crash_two", "controlled_shutdown")


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("bug", "kinds", "caught_by"),
    [
        (HIGH_WATERMARK_AT_LOG_END, ("partition", "one_way", "drop", "crash"), "acknowledged"),
        (TRUNCATE_TO_HIGH_WATERMARK, CRASHES, "acknowledged"),
        (
            ISR_SHRINK_IGNORES_MIN_INSYNC_REPLICAS,
            ("crash_two",),
            "acks_all_held_by_min_insync_replicas",
        ),
        (
            LOST_ALTER_PARTITION_ANSWER,
            ("lost_alter_partition_answer", "partition", "isolate"),
            "liveness: every pending AlterPartition resolved",
        ),
    ],
)
def test_a_reinjected_bug_is_caught(
    tmp_path: Path, bug: str, kinds: tuple[str, ...], caught_by: str
) -> None:
    logging.disable(logging.CRITICAL)
    try:
        for seed in range(WITHIN):
            with reinjected(bug):
                result = run_seed(seed, tmp_path, LIGHT(kinds=kinds))
            if not result.ok:
                break
        else:
            pytest.fail(f"{bug}: no violation in seeds 0..{WITHIN - 1}")
    finally:
        logging.disable(logging.NOTSET)
    checkers = {violation.checker for violation in result.violations}
    found = [f"{violation.checker}: {violation.message}" for violation in result.violations]
    assert any(violation.startswith(caught_by) for violation in found), (seed, found[:10])
    print(f"{bug}: caught at seed {seed} by {sorted(checkers)}")
