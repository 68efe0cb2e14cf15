"""Live compaction on a running 3-broker in-process cluster (seeded MemoryNetwork, ManualClock,
the real controller; runtime/log/cleaner/), shared by tests/sim/test_live_cleaner.py and
tests/spark/test_verify_live_cleaned.py: every replica's cleaner compacts its own copy of a
compacted topic while a producer writes with acks=all and a consumer reads; then many commits
of one group's offset to __consumer_offsets (created beforehand with small segments) are cleaned
too. `run_live_cleaning` asserts along the way: each replica's log is smaller and still holds
every key's latest value below the HW, a consumer reading from the start gets the compacted
result, /metrics shows the cleaner's metrics, the group's committed offset survives.
`plain_verify` runs the checks of `ketch verify` that need no Spark on the stopped cluster's
files (each batch's header and CRC, `offline.batch_scan.scan_segment`; offsets increasing; the
replicas agreeing on every key's latest value).

The cleaning passes run in worker threads (as in a broker), so when a pass finishes is real
time; every wait is a bounded `run_until` on a condition, and nothing asserted depends on the
moment a pass ends.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Final

from client.client import Client
from client.config import ClientConfig, ConsumerConfig
from client.consumer import Consumer
from client.group_consumer import GroupConsumer
from client.group_member import GroupConfig
from client.producer import Producer
from offline.batch_scan import scan_segment
from runtime.log.log import Log
from runtime.log.segment import LOG_SUFFIX
from testkit.cluster import Cluster
from tests.unit.runtime.log.cleaner_helpers import latest_by_key, read_all
from wire.group_records import OFFSETS_TOPIC
from wire.topic import TopicPartition

SEED: Final = 2424
TOPIC: Final = "prices"
TP: Final = TopicPartition(TOPIC, 0)
OFFSETS_TP: Final = TopicPartition(OFFSETS_TOPIC, 0)
KEYS: Final = 12
UPDATES: Final = 480
SMALL_SEGMENTS: Final = {"cleanup.policy": "compact", "segment.bytes": "2048"}
PROPERTIES: Final[dict[str, object]] = {
    "log.cleaner.backoff.ms": 100,
    "offsets.topic.num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0,
    "replica.fetch.wait.max.ms": 20,
    "replica.fetch.backoff.ms": 20,
    "request.timeout.ms": 2_000,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 50,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 50,
}
CLIENT: Final = ClientConfig(request_timeout_ms=5_000, reconnect_backoff_ms=10, retry_backoff_ms=20)
GROUP: Final = GroupConfig(
    "pricers",
    session_timeout_ms=6_000,
    heartbeat_interval_ms=300,
    max_poll_interval_ms=60_000,
    auto_commit_interval_ms=1_000_000,
    retry_backoff_ms=20,
    request_timeout_ms=2_000,
)


def _client(cluster: Cluster, name: str) -> Client:
    assert cluster.network is not None
    return Client(
        cluster.addresses,
        transport=cluster.network.transport(name),
        clock=cluster.clock,
        config=CLIENT,
        seed=SEED,
    )


def _logs(cluster: Cluster, tp: TopicPartition) -> list[Log]:
    logs = [cluster.node(b).log_manager.get_log(tp) for b in cluster.broker_ids]
    assert all(log is not None for log in logs)
    return [log for log in logs if log is not None]


async def _read_from_start(cluster: Cluster, upto: int) -> list[tuple[int, bytes, bytes | None]]:
    """What a consumer reading the topic from offset 0 gets, up to `upto`."""
    consumer = Consumer(
        _client(cluster, "late-reader"),
        config=ConsumerConfig(fetch_max_wait_ms=20),
        owns_client=True,
    )
    consumer.assign([TP])
    consumer.seek(TP, 0)
    got: list[tuple[int, bytes, bytes | None]] = []
    while not got or got[-1][0] < upto - 1:
        for record in await cluster.drive(consumer.poll(timeout_ms=200)):
            assert record.key is not None
            got.append((record.offset, record.key, record.value))
    await cluster.drive(consumer.close())
    return [r for r in got if r[0] < upto]


def plain_verify(cluster: Cluster, tp: TopicPartition) -> None:
    """`ketch verify`'s per-batch checks and the replicas' agreement, without Spark."""
    latest: list[dict[bytes, bytes | None]] = []
    for broker_id in cluster.broker_ids:
        directory = cluster.log_dir(broker_id) / tp.dir_name
        last_offset = -1
        for path in sorted(directory.glob(f"*{LOG_SUFFIX}")):
            for row in scan_segment(str(path), 0, path.stat().st_size):
                assert row.reason is None, (path, row)
                assert row.base_offset is not None
                assert row.last_offset is not None
                assert row.base_offset > last_offset, (path, row)
                last_offset = row.last_offset
        log = Log.open(
            directory,
            cluster.node(broker_id).log_manager.config_for(tp.topic),
            cluster.clock,
            had_clean_shutdown=True,
        )
        try:
            assert log.recovery_report.truncation is None
            latest.append(latest_by_key(read_all(log, log.log_end_offset)))
        finally:
            log.close()
    assert all(view == latest[0] for view in latest[1:])


async def run_live_cleaning(data_dir: Path) -> Cluster:
    """The scenario of the module docstring, asserting as it goes; returns the stopped cluster
    (its data dir laid out as `ketch up` lays it out)."""
    cluster = Cluster.in_memory(data_dir, 3, seed=SEED, properties=PROPERTIES)
    await cluster.drive(cluster.start())
    try:
        await cluster.drive(cluster.create_topic(TOPIC, 1, 3, configs=SMALL_SEGMENTS))
        # Created first, with small segments, so that a few hundred commits roll segments the
        # cleaner may take (the coordinator's own creation would ask for 100 MB ones).
        await cluster.drive(cluster.create_topic(OFFSETS_TOPIC, 1, 3, configs=SMALL_SEGMENTS))

        # A consumer reads while the producer writes.
        reader = Consumer(
            _client(cluster, "reader"),
            config=ConsumerConfig(fetch_max_wait_ms=20),
            owns_client=True,
        )
        reader.assign([TP])
        reader.seek(TP, 0)
        seen: list[int] = []

        async def read_along() -> None:
            while True:
                seen.extend(r.offset for r in await reader.poll(timeout_ms=50))

        reading = asyncio.ensure_future(read_along())
        producer = Producer(_client(cluster, "producer"), owns_client=True)
        model: dict[bytes, bytes | None] = {}
        for i in range(UPDATES):
            key, value = b"k%d" % (i % KEYS), b"price-%d" % i
            model[key] = value
            future = await cluster.drive(producer.send(TOPIC, key, value, partition=0))
            if i % 40 == 39:
                await cluster.drive(future)  # acks=all: replicated before we go on
        await cluster.drive(producer.flush())
        await cluster.drive(producer.close())
        logs = _logs(cluster, TP)
        leader = cluster.leader(TP).replica_manager.partition(TP)
        assert leader is not None
        hw = leader.view.high_watermark.message_offset
        assert hw == UPDATES

        def compacted() -> bool:
            return all(
                cluster.node(b).log_cleaner.stats.passes >= 1 for b in cluster.broker_ids
            ) and all(len(read_all(log)) < UPDATES / 2 for log in logs)

        await cluster.run_until(compacted, max_ms=30_000, what="every replica cleaned")
        await cluster.run_until(
            lambda: len(seen) >= UPDATES or (bool(seen) and seen[-1] >= hw - 1),
            max_ms=10_000,
            what="the reader caught up",
        )
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
        await cluster.drive(reader.close())
        for broker_id, log in zip(cluster.broker_ids, logs, strict=True):
            stats = cluster.node(broker_id).log_cleaner.stats
            assert stats.bytes_written < stats.bytes_read  # each replica's copy shrank
            assert latest_by_key(read_all(log)) == model  # every key's latest value
        scraped = (await cluster.node(0).metrics.scrape()).decode()
        assert "kafka_log_logcleaner_cleaner_recopy_percent" in scraped
        assert "kafka_log_logcleanermanager_max_dirty_percent" in scraped
        passes = cluster.node(0).log_cleaner.stats.passes
        assert f"ketch_logcleaner_passes_total {float(passes)}" in scraped
        compacted_read = await _read_from_start(cluster, hw)
        assert len(compacted_read) < UPDATES / 2
        assert latest_by_key(compacted_read) == model
        assert [r[0] for r in compacted_read] == sorted({r[0] for r in compacted_read})

        # __consumer_offsets: many commits of one group's offset, cleaned down to the last.
        group = GroupConsumer(_client(cluster, "group"), [TOPIC], group=GROUP, seed=SEED)
        while not group.assignment() or group.member.generation_id < 0:
            await cluster.drive(group.poll(timeout_ms=200))
        commits = 300
        for offset in range(1, commits + 1):
            await cluster.drive(group.member.commit({TP: offset}))
        offsets_logs = _logs(cluster, OFFSETS_TP)
        await cluster.run_until(
            lambda: all(len(read_all(log)) < commits / 4 for log in offsets_logs),
            max_ms=30_000,
            what="__consumer_offsets cleaned",
        )
        assert await cluster.drive(group.member.committed([TP])) == {TP: commits}
        await cluster.drive(group.close())
    finally:
        await cluster.drive(cluster.stop())
    return cluster
