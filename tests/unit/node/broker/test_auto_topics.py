"""Topic auto-creation on Metadata (node/broker/auto_topics.py): which unknown topics are created
and what the answer says meanwhile (Kafka's AutoTopicCreationManager); its properties; and,
through a broker node and the fake controller, the CreateTopics a client's Metadata causes."""

from __future__ import annotations

import asyncio
import logging

import pytest

from node.broker.auto_topics import (
    MAX_IN_FLIGHT,
    AutoTopicCreationConfig,
    AutoTopicCreationManager,
)
from node.broker.config import BrokerConfig
from tests.unit.node.broker.fake_controller import BROKER, Env
from wire.errors import ErrorCode
from wire.messages import (
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponseTopic,
)

KNOWN_ID = bytes(range(16))


class FakeForwarder:
    """Records each CreateTopics and answers it when the test says (`answer`)."""

    def __init__(self) -> None:
        self.requests: list[CreateTopicsRequest] = []
        self._answers: asyncio.Queue[dict[str, ErrorCode]] = asyncio.Queue()

    async def create_topics(self, request: CreateTopicsRequest) -> CreateTopicsResponse:
        self.requests.append(request)
        errors = await self._answers.get()
        return CreateTopicsResponse(
            topics=[
                CreatableTopicResult(
                    name=t.name,
                    error_code=errors.get(t.name, ErrorCode.NONE),
                    error_message="too few brokers" if t.name in errors else None,
                )
                for t in request.topics
            ]
        )

    def answer(self, **errors: ErrorCode) -> None:
        self._answers.put_nowait({k.replace("_", "-"): v for k, v in errors.items()})


@pytest.fixture
def forwarder() -> FakeForwarder:
    return FakeForwarder()


def manager(forwarder: FakeForwarder, **settings: object) -> AutoTopicCreationManager:
    config = AutoTopicCreationConfig.from_properties(settings)
    return AutoTopicCreationManager(config, forwarder.create_topics)


def ask(*names: str, allow: bool = True) -> MetadataRequest:
    return MetadataRequest(
        topics=[MetadataRequestTopic(name=n) for n in names], allow_auto_topic_creation=allow
    )


def cache_answer(request: MetadataRequest, known: frozenset[str] = frozenset()) -> MetadataResponse:
    """What the metadata cache answers: known topics NONE, the others UNKNOWN_TOPIC_OR_PARTITION."""
    assert request.topics is not None
    return MetadataResponse(
        cluster_id="c",
        topics=[
            MetadataResponseTopic(
                name=t.name or "",
                topic_id=KNOWN_ID if t.name in known else bytes(16),
                error_code=(
                    ErrorCode.NONE if t.name in known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                ),
            )
            for t in request.topics
        ],
    )


def errors(manager: AutoTopicCreationManager, request: MetadataRequest) -> dict[str, ErrorCode]:
    response = manager.answer(request, cache_answer(request, frozenset({"known"})))
    assert response.cluster_id == "c", "the rest of the answer stands"
    return {t.name: ErrorCode.from_code(t.error_code) for t in response.topics}


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_an_unknown_topic_is_created_once_while_clients_retry(
    forwarder: FakeForwarder,
) -> None:
    auto = manager(forwarder, **{"num.partitions": 3, "default.replication.factor": 2})
    assert errors(auto, ask("known", "orders")) == {
        "known": ErrorCode.NONE,
        "orders": ErrorCode.LEADER_NOT_AVAILABLE,
    }
    await settle()
    [request] = forwarder.requests
    assert [(t.name, t.num_partitions, t.replication_factor) for t in request.topics] == [
        ("orders", 3, 2)
    ]
    assert auto.in_flight == {"orders"}
    # Asked again while the controller works on it: Kafka's answer for a topic in flight.
    assert errors(auto, ask("orders")) == {"orders": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    await settle()
    assert len(forwarder.requests) == 1, "one creation at a time per topic"
    forwarder.answer()
    await settle()
    assert auto.in_flight == frozenset()
    # Not in this broker's metadata yet: asked once more (the controller says it exists).
    assert errors(auto, ask("orders")) == {"orders": ErrorCode.LEADER_NOT_AVAILABLE}
    forwarder.answer(orders=ErrorCode.TOPIC_ALREADY_EXISTS)
    await settle()
    assert len(forwarder.requests) == 2
    await auto.stop()


async def test_nothing_is_created_when_creation_is_off(forwarder: FakeForwarder) -> None:
    off = manager(forwarder, **{"auto.create.topics.enable": "false"})
    assert errors(off, ask("orders")) == {"orders": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    on = manager(forwarder)
    assert errors(on, ask("orders", allow=False)) == {
        "orders": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    }
    await settle()
    assert forwarder.requests == []


async def test_internal_and_illegal_names_are_never_created(forwarder: FakeForwarder) -> None:
    auto = manager(forwarder)
    off = manager(forwarder, **{"auto.create.topics.enable": False})
    request = ask("__consumer_offsets", "__transaction_state", "bad name", "x" * 250, "..")
    expected = {
        "__consumer_offsets": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        "__transaction_state": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        "bad name": ErrorCode.INVALID_TOPIC_EXCEPTION,
        "x" * 250: ErrorCode.INVALID_TOPIC_EXCEPTION,
        "..": ErrorCode.INVALID_TOPIC_EXCEPTION,
    }
    assert errors(auto, request) == expected
    assert errors(off, request) == expected, "an illegal name is answered so either way"
    await settle()
    assert forwarder.requests == []


async def test_every_topic_and_topics_by_id_are_left_as_they_are(
    forwarder: FakeForwarder,
) -> None:
    auto = manager(forwarder)
    everything = MetadataResponse(topics=[MetadataResponseTopic(name="known")])
    assert auto.answer(MetadataRequest(topics=None), everything) is everything
    by_id = MetadataRequest(topics=[MetadataRequestTopic(topic_id=b"\x01" * 16)])
    unknown_id = MetadataResponse(
        topics=[
            MetadataResponseTopic(
                name="", topic_id=b"\x01" * 16, error_code=ErrorCode.UNKNOWN_TOPIC_ID
            )
        ]
    )
    assert auto.answer(by_id, unknown_id).topics == unknown_id.topics
    await settle()
    assert forwarder.requests == []


async def test_a_refused_creation_is_logged_and_tried_again_on_the_next_request(
    forwarder: FakeForwarder, caplog: pytest.LogCaptureFixture
) -> None:
    auto = manager(forwarder, **{"default.replication.factor": 3})
    assert errors(auto, ask("orders")) == {"orders": ErrorCode.LEADER_NOT_AVAILABLE}
    forwarder.answer(orders=ErrorCode.INVALID_REPLICATION_FACTOR)
    await settle()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "auto-creation of topic orders failed: INVALID_REPLICATION_FACTOR (too few brokers)"
    ]
    assert auto.in_flight == frozenset()
    assert errors(auto, ask("orders")) == {"orders": ErrorCode.LEADER_NOT_AVAILABLE}
    await auto.stop()


async def test_creations_in_flight_are_bounded(forwarder: FakeForwarder) -> None:
    auto = manager(forwarder)
    names = [f"t{i}" for i in range(MAX_IN_FLIGHT + 5)]
    answered = errors(auto, ask(*names))
    assert sum(e is ErrorCode.LEADER_NOT_AVAILABLE for e in answered.values()) == MAX_IN_FLIGHT
    assert all(answered[n] is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for n in names[MAX_IN_FLIGHT:])
    await settle()
    assert sum(len(r.topics) for r in forwarder.requests) == MAX_IN_FLIGHT
    await auto.stop()


async def test_stop_cancels_creations_and_starts_no_more(forwarder: FakeForwarder) -> None:
    auto = manager(forwarder)
    errors(auto, ask("orders"))
    await settle()
    assert len(forwarder.requests) == 1  # waiting for an answer that never comes
    await auto.stop()
    assert auto.in_flight == frozenset()
    assert errors(auto, ask("audit")) == {"audit": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    await settle()
    assert len(forwarder.requests) == 1


def test_properties_have_kafkas_names_defaults_and_checks() -> None:
    assert BrokerConfig.from_properties({"broker.id": 0}).auto_topics == AutoTopicCreationConfig(
        auto_create_topics_enable=True, num_partitions=1, default_replication_factor=1
    )
    config = BrokerConfig.from_properties(
        {
            "broker.id": 0,
            "auto.create.topics.enable": "false",
            "num.partitions": "6",
            "default.replication.factor": 3,
        }
    ).auto_topics
    assert config == AutoTopicCreationConfig(False, 6, 3)
    for bad in (
        {"num.partitions": 0},
        {"default.replication.factor": 0},
        {"default.replication.factor": 40_000},
        {"auto.create.topics.enable": "yes"},
        {"num.partitions": True},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            BrokerConfig.from_properties({"broker.id": 0, **bad})


async def test_a_brokers_metadata_forwards_the_creation_to_the_controller(env: Env) -> None:
    node = env.node({"num.partitions": 4, "default.replication.factor": 1})
    await env.drive(node.start())
    client = env.client()
    try:
        response = await env.drive(client.send(BROKER, ask("fresh")))
        assert isinstance(response, MetadataResponse)
        [topic] = response.topics
        assert (topic.name, topic.error_code) == ("fresh", ErrorCode.LEADER_NOT_AVAILABLE)
        await env.run_until(
            lambda: not node.auto_topics.in_flight, max_ms=100, what="creation answered"
        )
        [(member, request)] = env.controller.forwarded
        assert member, "over the broker's credentialed control channel"
        assert isinstance(request, CreateTopicsRequest)
        assert [(t.name, t.num_partitions, t.replication_factor) for t in request.topics] == [
            ("fresh", 4, 1)
        ]
        # Without allow_auto_topic_creation nothing is forwarded.
        response = await env.drive(client.send(BROKER, ask("other", allow=False)))
        assert isinstance(response, MetadataResponse)
        assert response.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert len(env.controller.forwarded) == 1
    finally:
        await env.drive(client.close())
    await env.drive(node.stop())
