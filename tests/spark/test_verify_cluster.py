"""`ketch verify` over the data of a real cluster: the controller and 3 brokers in one process
(seeded MemoryNetwork, ManualClock) write a replicated topic with acks=all through a broker
failover, stop cleanly, and the data dir they leave (as `ketch up` does) verifies clean —
including a topic that was created and never written."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from client.client import Client
from client.config import ProducerConfig
from client.producer import Producer
from offline.verify_job import run_verify
from testkit.cluster import Cluster

pytestmark = pytest.mark.spark

SEED = 31
RECORDS = 60


async def write_cluster_data(data_dir: Path) -> Cluster:
    cluster = Cluster.in_memory(data_dir, 3, seed=SEED, properties={"min.insync.replicas": 2})
    await cluster.drive(cluster.start())
    try:
        (tp,) = await cluster.drive(cluster.create_topic("orders", 1, replication_factor=3))
        await cluster.drive(cluster.create_topic("quiet", 2, replication_factor=3))
        assert cluster.network is not None
        producer = Producer(
            Client(
                cluster.addresses, transport=cluster.network.transport("p"), clock=cluster.clock
            ),
            config=ProducerConfig(acks=-1, linger_ms=0),
            owns_client=True,
        )
        try:
            for i in range(RECORDS):
                if i == RECORDS // 2:  # a failover half way: a new leader epoch in the logs
                    old = cluster.record(tp).leader
                    await cluster.drive(cluster.kill(old))
                    await cluster.new_leader(tp, old)
                    await cluster.drive(cluster.restart(old))
                await cluster.drive(
                    producer.send_and_wait("orders", b"k%d" % (i % 7), b"v%d" % i, partition=0)
                )
            await cluster.run_until(
                lambda: len(cluster.record(tp).isr) == 3, max_ms=5_000, what="ISR restored"
            )
        finally:
            await cluster.drive(producer.close())
    finally:
        await cluster.drive(cluster.stop())
    return cluster


async def test_a_clean_clusters_data_verifies(spark: SparkSession, tmp_path: Path) -> None:
    await write_cluster_data(tmp_path)
    report = run_verify(spark, [str(tmp_path)])
    assert report.findings == [], f"seed={SEED}: {report.findings}"
    assert report.ok
    assert report.stats["broker_dirs"] == 3
    assert report.stats["partitions"] == 3  # orders-0, quiet-0, quiet-1
    assert report.stats["partial_dirs"] == []  # every broker stopped cleanly
