"""Followers' incremental fetch sessions (KIP-227) in an in-process cluster (testkit Cluster over
the in-memory network, seed 227, ManualClock): after each fetcher's first (full) fetch, its
requests list only the partitions whose fetch position changed; the leaders answer in their
sessions; and every follower still ends with the leader's data and high watermark.

Each fetcher's session handler is watched by wrapping `FetchSessionHandler.build`: what the
fetcher asked to fetch each round, and what the request listed and forgot (`fetch_request`
turns exactly that into the FetchRequest sent)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

import pytest

from actors.replication.fetch_session_handler import FetchRequestData, FetchSessionHandler
from client.client import Client
from client.config import ProducerConfig
from client.producer import Producer
from testkit.cluster import Cluster
from wire.messages import FetchPartition
from wire.topic import TopicPartition

SEED: Final = 227
TOPIC: Final = "sessions"
PARTITIONS: Final = 6

Round = tuple[int, dict[TopicPartition, FetchPartition], FetchRequestData]


class Recorded:
    """Every round of every fetcher's session: (the handler's id, the partitions asked, the
    request data), in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rounds: list[Round] = []
        build = FetchSessionHandler.build

        def recording(
            handler: FetchSessionHandler, partitions: Mapping[TopicPartition, FetchPartition]
        ) -> FetchRequestData:
            data = build(handler, partitions)
            self.rounds.append((id(handler), dict(partitions), data))
            return data

        monkeypatch.setattr(FetchSessionHandler, "build", recording)


async def produce(cluster: Cluster, partition: int, count: int) -> None:
    assert cluster.network is not None
    client = Client(
        cluster.addresses, transport=cluster.network.transport("producer"), clock=cluster.clock
    )
    producer = Producer(
        client,
        config=ProducerConfig(linger_ms=0, acks=-1, request_timeout_ms=2_000),
        owns_client=True,
    )
    try:
        futures = [
            await cluster.drive(producer.send(TOPIC, None, b"v%d" % i, partition=partition))
            for i in range(count)
        ]
        await cluster.drive(producer.flush())
        assert all(f.done() and f.exception() is None for f in futures)
    finally:
        await cluster.drive(producer.close())


def replicas_match(cluster: Cluster, tps: list[TopicPartition]) -> bool:
    """Every replica of every partition has the leader's log end and high watermark."""
    for tp in tps:
        leader = cluster.leader(tp).replica_manager.partition(tp)
        assert leader is not None
        want = (
            leader.view.log_end_offset.message_offset,
            leader.view.high_watermark.message_offset,
        )
        for broker_id in cluster.broker_ids:
            replica = cluster.node(broker_id).replica_manager.partition(tp)
            assert replica is not None
            got = (
                replica.view.log_end_offset.message_offset,
                replica.view.high_watermark.message_offset,
            )
            if got != want:
                return False
    return True


def check_rounds(rounds: list[Round]) -> tuple[int, int, int, int]:
    """Check that each incremental round listed exactly the partitions new to its session or
    whose fetch position changed; (full rounds, incremental rounds, quiet incremental rounds,
    partitions listed by incremental rounds)."""
    held: dict[int, dict[TopicPartition, FetchPartition]] = {}
    full = incremental = quiet = listed = 0
    for handler, partitions, data in rounds:
        if data.full:
            full += 1
            assert data.to_send == partitions
            held[handler] = dict(partitions)
            continue
        incremental += 1
        session = held[handler]  # a fetcher's first round is always full
        for tp in data.forgotten:
            del session[tp]
        changed = {tp: f for tp, f in partitions.items() if session.get(tp) != f}
        assert data.to_send == changed, (data, session)
        assert set(session) - set(data.forgotten) <= set(partitions)
        session.update(changed)
        quiet += not data.to_send
        listed += len(data.to_send)
    return full, incremental, quiet, listed


async def test_followers_replicate_with_incremental_fetches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = Recorded(monkeypatch)
    cluster = Cluster.in_memory(tmp_path, 3, seed=SEED)
    await cluster.drive(cluster.start())
    try:
        tps = await cluster.drive(cluster.create_topic(TOPIC, PARTITIONS, replication_factor=3))
        # Only partitions 0 and 3 get records (broker 0 leads both): their followers' requests
        # list them when their positions move, and nothing else changes.
        await produce(cluster, 0, 20)
        await cluster.run_until(
            lambda: replicas_match(cluster, tps), max_ms=10_000, what="caught up"
        )
        await produce(cluster, 3, 5)
        await cluster.run_until(
            lambda: replicas_match(cluster, tps), max_ms=10_000, what="caught up"
        )
        await cluster.run_for(2_000)
        assert replicas_match(cluster, tps)
        assert high_watermark(cluster, tps[0]) == 20
        assert high_watermark(cluster, tps[3]) == 5
        sessions = {
            b: cluster.node(b).fetch_sessions.incremental_fetches for b in cluster.broker_ids
        }
    finally:
        await cluster.drive(cluster.stop())

    full, incremental, quiet, listed = check_rounds(recorded.rounds)
    asked = sum(len(p) for _, p, d in recorded.rounds if not d.full)
    print(
        f"seed {SEED}: {full} full and {incremental} incremental fetches ({quiet} quiet), "
        f"{listed} of {asked} partitions listed; leaders served incremental: {sessions}"
    )
    assert all(count > 0 for count in sessions.values()), sessions
    assert incremental > full
    assert quiet > 0  # rounds where nothing moved list nothing
    assert listed < asked / 2


def high_watermark(cluster: Cluster, tp: TopicPartition) -> int:
    leader = cluster.leader(tp).replica_manager.partition(tp)
    assert leader is not None
    return leader.view.high_watermark.message_offset
