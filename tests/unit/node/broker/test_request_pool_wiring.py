"""A broker's listeners share one queued.max.request.bytes pool (runtime/net/request_pool.py),
as Kafka's SocketServer has one memory pool for all its listeners."""

from __future__ import annotations

from tests.unit.node.broker.fake_controller import Env


def test_the_native_and_kafka_listeners_share_one_pool(env: Env) -> None:
    node = env.node(
        {
            "listeners": "native://broker-0:9092,kafka://broker-0:19092",
            "queued.max.request.bytes": 200_000_000,
        },
        lifecycle=False,
    )
    assert node.kafka_server is not None
    assert node.server.request_pool is node.kafka_server.request_pool
    assert node.server.request_pool.capacity == 200_000_000
