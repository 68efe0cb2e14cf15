"""Replication's settings (actors/replication/config.py): Kafka's property names and defaults, and
the range checks of each config."""

from __future__ import annotations

import pytest

from actors.replication.config import PartitionConfig, ReplicaFetcherConfig, ReplicaManagerConfig


def test_replica_manager_config_reads_kafka_property_names() -> None:
    config = ReplicaManagerConfig.from_properties(
        3,
        {
            "replica.lag.time.max.ms": 4000,
            "replica.high.watermark.checkpoint.interval.ms": "250",
            "min.insync.replicas": 2,
            "log.segment.bytes": 1024,
        },
    )
    assert config == ReplicaManagerConfig(3, 4000, 250, 2)
    assert config.partition_config.min_insync_replicas == 2
    with pytest.raises(ValueError, match=r"replica\.lag\.time\.max\.ms"):
        ReplicaManagerConfig.from_properties(3, {"replica.lag.time.max.ms": "soon"})
    with pytest.raises(ValueError, match="must be >= 2"):
        ReplicaManagerConfig.from_properties(3, {"replica.lag.time.max.ms": 1})


def test_partition_config_from_kafka_property_names() -> None:
    config = PartitionConfig.from_properties(
        {"replica.lag.time.max.ms": "500", "min.insync.replicas": 2, "log.segment.bytes": 1}
    )
    assert config == PartitionConfig(replica_lag_time_max_ms=500, min_insync_replicas=2)
    with pytest.raises(ValueError, match=r"min\.insync\.replicas"):
        PartitionConfig.from_properties({"min.insync.replicas": 0})
    with pytest.raises(ValueError, match="integer"):
        PartitionConfig.from_properties({"replica.lag.time.max.ms": True})


def test_replica_fetcher_config_reads_kafka_property_names() -> None:
    config = ReplicaFetcherConfig.from_properties(
        {
            "replica.fetch.wait.max.ms": "250",
            "replica.fetch.min.bytes": 10,
            "replica.fetch.max.bytes": 2048,
            "replica.fetch.response.max.bytes": 4096,
            "replica.fetch.backoff.ms": 50,
            "num.replica.fetchers": 4,
            "log.dirs": "/elsewhere",
        }
    )
    assert config == ReplicaFetcherConfig(250, 10, 2048, 4096, 50, 4)
    assert ReplicaFetcherConfig() == ReplicaFetcherConfig(500, 1, 1_048_576, 10_485_760, 1000, 1)
    with pytest.raises(ValueError, match=r"num\.replica\.fetchers"):
        ReplicaFetcherConfig.from_properties({"num.replica.fetchers": "many"})
    with pytest.raises(ValueError, match="num_replica_fetchers"):
        ReplicaFetcherConfig(num_replica_fetchers=0)
    with pytest.raises(ValueError, match="replica_fetch_backoff_ms"):
        ReplicaFetcherConfig(replica_fetch_backoff_ms=-1)
