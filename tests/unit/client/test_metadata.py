"""The client-side metadata cache: views, epoch fencing of stale answers, refresh timing."""

from __future__ import annotations

import pytest

from client.metadata import (
    NO_LEADER,
    BrokerNode,
    MetadataCache,
    PartitionInfo,
    TopicInfo,
)
from runtime.net.transport import Address
from wire.topic import TopicPartition

B0 = BrokerNode(0, Address("127.0.0.1", 9000))
B1 = BrokerNode(1, Address("127.0.0.1", 9001))


def topic(name: str, *leaders: tuple[int, int], topic_id: bytes | None = None) -> TopicInfo:
    return TopicInfo(
        name=name,
        topic_id=topic_id,
        partitions=tuple(
            PartitionInfo(name, i, leader_id=leader, leader_epoch=epoch, replicas=(0, 1))
            for i, (leader, epoch) in enumerate(leaders)
        ),
    )


def test_view_answers_leaders_counts_and_availability() -> None:
    cache = MetadataCache(max_age_ms=1000, refresh_backoff_ms=100)
    view = cache.update([B0, B1], [topic("t", (0, 1), (1, 1), (NO_LEADER, 1), (7, 1))], now_ms=0)
    assert view.leader(TopicPartition("t", 0)) == B0
    assert view.leader(TopicPartition("t", 1)) == B1
    assert view.leader(TopicPartition("t", 2)) is None  # no leader
    assert view.leader(TopicPartition("t", 3)) is None  # leader not among the brokers
    assert view.leader(TopicPartition("t", 9)) is None
    assert view.leader(TopicPartition("other", 0)) is None
    assert view.partition_count("t") == 4
    assert view.partition_count("other") is None
    assert view.available_partitions("t") == [0, 1]
    assert view.available_partitions("other") == []


def test_topic_error_hides_partition_count() -> None:
    cache = MetadataCache(max_age_ms=1000, refresh_backoff_ms=100)
    view = cache.update([B0], [TopicInfo("t", error=3)], now_ms=0)
    assert view.partition_count("t") is None


def test_older_leader_epoch_does_not_roll_back_the_cache() -> None:
    cache = MetadataCache(max_age_ms=1000, refresh_backoff_ms=100)
    cache.update([B0, B1], [topic("t", (1, 5), (0, 2))], now_ms=0)
    # A lagging broker still thinks 0 leads partition 0 at epoch 4; partition 1 really moved.
    view = cache.update([B0, B1], [topic("t", (0, 4), (1, 3))], now_ms=10)
    assert view.leader(TopicPartition("t", 0)) == B1
    assert view.leader(TopicPartition("t", 1)) == B1
    # An answer without an epoch does not win over a known epoch either.
    view = cache.update([B0, B1], [topic("t", (0, -1), (0, 3))], now_ms=20)
    assert view.leader(TopicPartition("t", 0)) == B1
    assert view.leader(TopicPartition("t", 1)) == B0


def test_recreated_topic_replaces_epochs() -> None:
    cache = MetadataCache(max_age_ms=1000, refresh_backoff_ms=100)
    cache.update([B0, B1], [topic("t", (1, 9), topic_id=b"a" * 16)], now_ms=0)
    view = cache.update([B0, B1], [topic("t", (0, 0), topic_id=b"b" * 16)], now_ms=1)
    assert view.leader(TopicPartition("t", 0)) == B0


def test_partial_update_keeps_other_topics_and_replaces_brokers() -> None:
    cache = MetadataCache(max_age_ms=1000, refresh_backoff_ms=100)
    cache.update([B0, B1], [topic("a", (0, 1)), topic("b", (1, 1))], now_ms=0)
    view = cache.update([B1], [topic("a", (1, 2))], now_ms=1)
    assert set(view.topics) == {"a", "b"}
    assert view.brokers == {1: B1}
    assert view.leader(TopicPartition("a", 0)) == B1


def test_refresh_timing_follows_request_backoff_and_max_age() -> None:
    cache = MetadataCache(max_age_ms=1000, refresh_backoff_ms=100)
    assert cache.needs_refresh(0)  # never refreshed
    cache.update([B0], [], now_ms=0)
    assert cache.version == 1
    assert not cache.needs_refresh(999)
    assert cache.ms_until_refresh(400) == 600
    assert cache.needs_refresh(1000)  # expired by age
    cache.request_update()
    assert cache.ms_until_refresh(50) == 50  # requested, but backing off since the last one
    assert cache.needs_refresh(100)
    cache.refresh_failed(now_ms=200)
    assert cache.update_requested()
    assert cache.ms_until_refresh(250) == 50


def test_add_topics_requests_an_update_only_for_new_topics() -> None:
    cache = MetadataCache(max_age_ms=1000, refresh_backoff_ms=100)
    cache.update([B0], [], now_ms=0)
    assert cache.add_topics(["a", "b"])
    assert cache.update_requested()
    cache.update([B0], [], now_ms=1)
    assert not cache.add_topics(["a"])
    assert not cache.update_requested()
    assert cache.topics == {"a", "b"}


def test_topic_info_rejects_misplaced_partitions() -> None:
    with pytest.raises(ValueError, match="partition entry 0"):
        TopicInfo("t", partitions=(PartitionInfo("t", 1, leader_id=0),))
    with pytest.raises(ValueError, match="partition entry 0"):
        TopicInfo("t", partitions=(PartitionInfo("u", 0, leader_id=0),))
