"""Forwarding of clients' topic requests to the controller (KIP-590), against the fake
controller of conftest.py (simulated time, exact)."""

from __future__ import annotations

from tests.unit.node.broker.fake_controller import (
    BROKER,
    REQUEST_TIMEOUT_MS,
    TOPIC_ID,
    Env,
)
from wire.errors import ErrorCode
from wire.messages import (
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)


async def test_create_and_delete_topics_are_forwarded_to_the_controller(env: Env) -> None:
    node = env.node()
    await env.drive(node.start())
    client = env.client()  # a plain client: no cluster credential
    try:
        created = await env.drive(
            client.send(
                BROKER,
                CreateTopicsRequest(
                    topics=[
                        CreatableTopic(name="events", num_partitions=3, replication_factor=2),
                        CreatableTopic(name="taken", num_partitions=1, replication_factor=1),
                    ]
                ),
            )
        )
        deleted = await env.drive(client.send(BROKER, DeleteTopicsRequest(topic_names=["events"])))
    finally:
        await env.drive(client.close())
    assert isinstance(created, CreateTopicsResponse)
    assert [(t.name, t.error_code, t.topic_id, t.num_partitions) for t in created.topics] == [
        ("events", ErrorCode.NONE, TOPIC_ID, 3),
        ("taken", ErrorCode.TOPIC_ALREADY_EXISTS, TOPIC_ID, 1),
    ]
    assert isinstance(deleted, DeleteTopicsResponse)
    assert [(r.name, r.error_code) for r in deleted.responses] == [("events", ErrorCode.NONE)]
    # The controller got them from the broker's credentialed channel.
    assert [member for member, _ in env.controller.forwarded] == [True, True]
    assert isinstance(env.controller.forwarded[0][1], CreateTopicsRequest)
    await env.drive(node.stop())


async def test_forwarding_to_an_unreachable_controller_times_out_per_topic(env: Env) -> None:
    await env.controller.stop()
    node = env.node(lifecycle=False)
    await env.drive(node.start())
    client = env.client()
    try:
        sent_at = env.clock.monotonic_ms()
        created = await env.drive(
            client.send(
                BROKER,
                CreateTopicsRequest(
                    topics=[
                        CreatableTopic(name="a", num_partitions=1, replication_factor=1),
                        CreatableTopic(name="b", num_partitions=1, replication_factor=1),
                    ]
                ),
                timeout_ms=10 * REQUEST_TIMEOUT_MS,
            )
        )
        answered_at = env.clock.monotonic_ms()
        deleted = await env.drive(
            client.send(
                BROKER, DeleteTopicsRequest(topic_names=["a"]), timeout_ms=10 * REQUEST_TIMEOUT_MS
            )
        )
    finally:
        await env.drive(client.close())
    assert isinstance(created, CreateTopicsResponse)
    assert created.error is ErrorCode.NONE
    assert [(t.name, t.error_code) for t in created.topics] == [
        ("a", ErrorCode.REQUEST_TIMED_OUT),
        ("b", ErrorCode.REQUEST_TIMED_OUT),
    ]
    # Resent while the budget (the broker's request.timeout.ms) lasted, then answered.
    assert REQUEST_TIMEOUT_MS // 2 <= answered_at - sent_at <= REQUEST_TIMEOUT_MS
    assert isinstance(deleted, DeleteTopicsResponse)
    assert [(r.name, r.error_code) for r in deleted.responses] == [
        ("a", ErrorCode.REQUEST_TIMED_OUT)
    ]
    await env.drive(node.stop())


# -- configuration --------------------------------------------------------------------------------
