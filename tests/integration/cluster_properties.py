"""The process clusters' properties: short timeouts, so that a killed node is noticed in well
under a second (the native failover test, test_cluster_processes.py), and for the group tests
(test_kafka_clients.py, test_native_groups.py) the same with few offsets partitions and no
initial rebalance delay. Constants only."""

from __future__ import annotations

from typing import Final

from runtime.config import Value

# Short timeouts, so a kill is noticed in well under a second and the test stays fast.
PROPERTIES: Final[dict[str, Value]] = {
    "broker.session.timeout.ms": 600,
    "broker.heartbeat.interval.ms": 100,
    "replica.lag.time.max.ms": 1_000,
    "request.timeout.ms": 1_000,
    "replica.fetch.wait.max.ms": 50,
    "replica.fetch.backoff.ms": 50,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 100,
    "retry.backoff.ms": 20,
    "retry.backoff.max.ms": 100,
    # The last broker to stop cannot hand its leaderships to anyone; do not wait 5 s per retry.
    "controlled.shutdown.retry.backoff.ms": 50,
    "controlled.shutdown.max.retries": 2,
}
# Few offsets partitions (each a group shard to load) and no initial rebalance delay, so the
# group tests do not wait Kafka's 3 s for more members.
OFFSETS_PARTITIONS: Final = 3
CLUSTER_PROPERTIES: Final = {
    **PROPERTIES,
    "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
    "group.initial.rebalance.delay.ms": 0,
}
