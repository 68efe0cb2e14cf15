"""`SwapCleaned`: the broker's log cleaner hands a pass to the partition actor, which swaps it in
on its own task (actors/replication/cleaner_swap.py, runtime/log/cleaner/swap.py); a follower
truncated by its fetcher between the pass and the swap discards it. ManualClock, the pass run
inline."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from actors.replication.cleaner_swap import partition_swap_sink
from actors.replication.partition_messages import (
    BecomeFollower,
    BecomeLeader,
    ReadRecords,
    TruncateTo,
)
from runtime.clock import ManualClock
from runtime.log.cleaner.cleaner import LogCleaner
from runtime.log.cleaner.config import CleanerConfig
from runtime.log.cleaner.swap import SwapOutcome
from runtime.log.cleaner.task import CleanedRange, CleaningTask
from runtime.log.log import Log
from runtime.log.segment import CLEANED_SUFFIX
from tests.unit.actors.replication.partition_harness import (
    MAX_BYTES,
    TP,
    Brokers,
    Replica,
    produce,
    replicate,
    state,
)
from tests.unit.runtime.log.cleaner_helpers import compact_config, inline
from wire.errors import ErrorCode
from wire.record_reader import iter_records
from wire.records import iter_batches
from wire.topic import TopicPartition

BATCHES = 120


@dataclass
class Host:
    log: Log

    def logs_by_dir(self) -> dict[Path, dict[TopicPartition, Log]]:
        return {self.log.directory.parent: {TP: self.log}}

    def is_live(self, directory: Path) -> bool:
        return True

    def fail_dir(self, directory: Path, error: OSError) -> None:
        raise AssertionError(error)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=1_000_000)


@pytest.fixture
async def brokers(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Brokers]:
    opened = Brokers(tmp_path, clock)
    yield opened
    await opened.close()


async def _fill(leader: Replica) -> None:
    for i in range(BATCHES):  # 15 keys, each updated many times
        await produce(leader, 3, tag=i % 5)


async def test_the_partition_actor_swaps_a_pass_in(brokers: Brokers, clock: ManualClock) -> None:
    leader = await brokers.open(1, log_config=compact_config())
    assert (await leader.actor.ask(BecomeLeader(state(1, 0, (1,), replicas=(1,))))).changed
    await _fill(leader)
    segments_before = len(leader.log.segments)
    cleaner = LogCleaner(
        Host(leader.log),
        CleanerConfig(),
        clock,
        swap=partition_swap_sink(lambda tp: leader.actor),
        run_blocking=inline,
    )
    result = await cleaner.clean_once()
    assert result is not None
    assert result.swapped, result.reason
    assert len(leader.log.segments) < segments_before
    hw = leader.actor.view.high_watermark.message_offset
    latest: dict[bytes, int] = {}
    offset = 0
    while offset < hw:  # a consumer's fetches from the start
        fetched = await leader.actor.ask(ReadRecords(offset, MAX_BYTES, replica_id=-1))
        assert fetched.error is ErrorCode.NONE
        data = bytes(fetched.records)
        for position, header in iter_batches(data):
            latest.update((r.key, r.offset) for r in iter_records(data, position) if r.key)
            offset = header.next_offset
    # Batch i holds offsets 3i..3i+2 with keys k<i mod 5>-0..2: each key's last write stays.
    last = BATCHES - 5
    assert latest == {b"k%d-%d" % (t, j): 3 * (last + t) + j for t in range(5) for j in range(3)}


async def test_a_follower_truncated_before_the_swap_discards_the_pass(
    brokers: Brokers, clock: ManualClock
) -> None:
    config = compact_config()
    leader = await brokers.open(1, log_config=config)
    follower = await brokers.open(2, log_config=config)
    both = state(1, 0, (1, 2), replicas=(1, 2))
    await leader.actor.ask(BecomeLeader(both))
    await follower.actor.ask(BecomeFollower(both))
    await _fill(leader)
    for _ in range(3):  # catch up, then carry the advanced HW over
        while follower.log.log_end_offset < leader.log.log_end_offset:
            await replicate(leader, follower)
        await replicate(leader, follower)
    assert follower.log.high_watermark == leader.log.log_end_offset
    cut = follower.log.segments[2].base_offset
    sink = partition_swap_sink(lambda tp: follower.actor)

    async def truncated_meanwhile(task: CleaningTask, cleaned: CleanedRange) -> SwapOutcome:
        # The fetcher's truncation (after a leader change) reaches the actor first.
        assert await follower.actor.ask(TruncateTo(cut)) is ErrorCode.NONE
        return await sink(task, cleaned)

    cleaner = LogCleaner(
        Host(follower.log), CleanerConfig(), clock, swap=truncated_meanwhile, run_blocking=inline
    )
    result = await cleaner.clean_once()
    assert result is not None
    assert not result.swapped
    assert follower.log.log_end_offset == cut
    assert not [p for p in follower.directory.iterdir() if p.name.endswith(CLEANED_SUFFIX)]
