"""The broker's quota layer (node/broker/quotas.py) around stand-in handlers, on a ManualClock:
Produce bytes throttle a client id over its producer_byte_rate (not another, not a cluster
member); a consumer's Fetch is cut to one window's bytes, and once over its rate answered empty
with the throttle time and its bytes taken back (a follower's never); UpdateMetadata's quotas
replace the set only when the request was accepted; DescribeClientQuotas filters as Kafka."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from actors.quota.entities import (
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    QuotaEntity,
)
from actors.quota.manager import ClientQuotaManager
from node.broker.quotas import describe_quotas, with_quotas
from runtime.clock import ManualClock
from runtime.net.dialect import RequestContext
from wire.errors import ErrorCode
from wire.messages import (
    ApiKey,
    FetchableTopicResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    FetchTopic,
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
    UpdateMetadataClientQuota,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from wire.messages.quotas import (
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    ComponentData,
    EntityData,
    ValueData,
)

KB = 1000


def context(client_id: str, *, member: bool = False, principal: str = "User:ANONYMOUS") -> Any:
    return RequestContext(
        peer="client:1",
        client_id=client_id,
        api_key=0,
        api_version=0,
        correlation_id=1,
        cluster_member=member,
        listener="kafka",
        principal=principal,
    )


def produce(size: int) -> ProduceRequest:
    partition = PartitionProduceData(index=0, records=b"x" * size)
    topic = TopicProduceData(name="t", partition_data=[partition])
    return ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[topic])


class Stand:
    """Stand-in handlers: Produce succeeds, Fetch returns `fetch_bytes` of records (at most the
    request's max_bytes), UpdateMetadata answers `metadata_error`."""

    def __init__(self) -> None:
        self.fetch_bytes = 0
        self.fetches: list[FetchRequest] = []
        self.metadata_error = ErrorCode.NONE

    async def produce(self, request: ProduceRequest, ctx: RequestContext) -> ProduceResponse:
        partition = PartitionProduceResponse(index=0)
        return ProduceResponse(
            responses=[TopicProduceResponse(name="t", partition_responses=[partition])]
        )

    async def fetch(self, request: FetchRequest, ctx: RequestContext) -> FetchResponse:
        self.fetches.append(request)
        size = min(self.fetch_bytes, request.max_bytes)
        partition = FetchResponsePartition(partition_index=0, records=b"r" * size)
        topic = FetchableTopicResponse(topic="t", partitions=[partition])
        return FetchResponse(responses=[topic])

    async def update_metadata(
        self, request: UpdateMetadataRequest, ctx: RequestContext
    ) -> UpdateMetadataResponse:
        return UpdateMetadataResponse(error_code=self.metadata_error)


def layer() -> tuple[ManualClock, ClientQuotaManager, Stand, dict[int, Any]]:
    clock = ManualClock()
    manager = ClientQuotaManager(clock)
    stand = Stand()
    handlers = with_quotas(
        {
            ApiKey.PRODUCE: stand.produce,
            ApiKey.FETCH: stand.fetch,
            ApiKey.UPDATE_METADATA: stand.update_metadata,
        },
        manager,
    )
    return clock, manager, stand, handlers


def fetch_request(replica_id: int = -1, max_bytes: int = 50 * 1024 * 1024) -> FetchRequest:
    partition = FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=max_bytes)
    return FetchRequest(
        replica_id=replica_id,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=max_bytes,
        topics=[FetchTopic(topic="t", partitions=[partition])],
    )


async def test_produce_bytes_throttle_the_client_id_over_its_quota_only() -> None:
    _, manager, _, handlers = layer()
    manager.set_quotas({QuotaEntity(client_id="slow"): {PRODUCER_BYTE_RATE: 100 * KB}})
    produce_handler = handlers[ApiKey.PRODUCE]
    first = await produce_handler(produce(1000 * KB), context("slow"))
    assert first.throttle_time_ms == 0  # exactly the bound over the 10 s window
    second = await produce_handler(produce(500 * KB), context("slow"))
    assert second.throttle_time_ms == 5000  # 150 KB/s over 10 s for 100 KB/s
    assert second.responses == first.responses  # the answer itself is unchanged
    other = await produce_handler(produce(5000 * KB), context("fast"))
    assert other.throttle_time_ms == 0
    member = await produce_handler(produce(5000 * KB), context("slow", member=True))
    assert member.throttle_time_ms == 0


async def test_a_user_quota_applies_to_the_principals_name() -> None:
    _, manager, _, handlers = layer()
    manager.set_quotas({QuotaEntity(user="alice"): {PRODUCER_BYTE_RATE: 10 * KB}})
    alice = await handlers[ApiKey.PRODUCE](produce(200 * KB), context("c", principal="User:alice"))
    assert alice.throttle_time_ms > 0
    bob = await handlers[ApiKey.PRODUCE](produce(200 * KB), context("c", principal="User:bob"))
    assert bob.throttle_time_ms == 0


async def test_a_throttled_fetch_is_answered_empty_and_its_bytes_taken_back() -> None:
    clock, manager, stand, handlers = layer()
    manager.set_quotas({QuotaEntity(client_id=DEFAULT): {CONSUMER_BYTE_RATE: 100 * KB}})
    fetch = handlers[ApiKey.FETCH]
    stand.fetch_bytes = 10_000 * KB
    # One fetch may read at most the bound over 10 windows (1 MB): it is, within the quota.
    answer = await fetch(fetch_request(), context("consumer"))
    assert stand.fetches[-1].max_bytes == 1000 * KB
    assert answer.throttle_time_ms == 0
    assert len(answer.responses[0].partitions[0].records) == 1000 * KB
    clock.advance(1000)
    throttled = await fetch(fetch_request(), context("consumer"))
    assert throttled.throttle_time_ms == 10_000  # 2 MB / 10 s = 200 KB/s for 100 KB/s
    assert throttled.responses == []
    # Taken back: the rate is the first answer's alone.
    assert manager.rate(CONSUMER_BYTE_RATE, "ANONYMOUS", "consumer") == pytest.approx(100 * KB)


async def test_followers_and_cluster_members_are_never_measured() -> None:
    _, manager, stand, handlers = layer()
    manager.set_quotas({QuotaEntity(client_id=DEFAULT): {CONSUMER_BYTE_RATE: 1.0}})
    stand.fetch_bytes = 1000 * KB
    follower = await handlers[ApiKey.FETCH](fetch_request(replica_id=2), context("broker-2"))
    assert follower.throttle_time_ms == 0
    assert stand.fetches[-1].max_bytes == 50 * 1024 * 1024  # not cut either
    member = await handlers[ApiKey.FETCH](fetch_request(), context("c", member=True))
    assert member.throttle_time_ms == 0
    assert manager.rate(CONSUMER_BYTE_RATE, "ANONYMOUS", "broker-2") == 0


async def test_update_metadata_replaces_the_quotas_only_when_accepted() -> None:
    _, manager, stand, handlers = layer()
    quota = UpdateMetadataClientQuota(
        entity=[EntityData(entity_type="client-id", entity_name="c")],
        values=[ValueData(key=PRODUCER_BYTE_RATE, value=1000.0)],
    )
    request = UpdateMetadataRequest(
        controller_id=0, controller_epoch=1, partition_states=[], live_brokers=[]
    )
    stand.metadata_error = ErrorCode.STALE_CONTROLLER_EPOCH
    member = context("controller", member=True)
    await handlers[ApiKey.UPDATE_METADATA](
        dataclasses.replace(request, client_quotas=[quota]), member
    )
    assert manager.quotas() == {}
    stand.metadata_error = ErrorCode.NONE
    await handlers[ApiKey.UPDATE_METADATA](
        dataclasses.replace(request, client_quotas=[quota]), member
    )
    assert manager.quotas() == {QuotaEntity(client_id="c"): {PRODUCER_BYTE_RATE: 1000.0}}
    await handlers[ApiKey.UPDATE_METADATA](request, member)  # None: unchanged
    assert manager.quotas() != {}
    await handlers[ApiKey.UPDATE_METADATA](dataclasses.replace(request, client_quotas=[]), member)
    assert manager.quotas() == {}


# -- DescribeClientQuotas --------------------------------------------------------------------------

QUOTAS = {
    QuotaEntity(user="alice"): {PRODUCER_BYTE_RATE: 1.0},
    QuotaEntity(user=DEFAULT): {PRODUCER_BYTE_RATE: 2.0},
    QuotaEntity(client_id="app"): {CONSUMER_BYTE_RATE: 3.0},
    QuotaEntity(user="alice", client_id="app"): {PRODUCER_BYTE_RATE: 4.0},
}


def described(*components: ComponentData, strict: bool = False) -> list[float]:
    response = describe_quotas(QUOTAS, components, strict)
    assert response.error_code == ErrorCode.NONE, response.error_message
    assert response.entries is not None
    return sorted(v.value for entry in response.entries for v in entry.values)


def component(kind: str, match_type: int, match: str | None = None) -> ComponentData:
    return ComponentData(entity_type=kind, match_type=match_type, match=match)


def test_describe_matches_exact_default_and_any_names() -> None:
    assert described() == [1.0, 2.0, 3.0, 4.0]
    assert described(strict=True) == []
    assert described(component("user", MATCH_EXACT, "alice")) == [1.0, 4.0]
    assert described(component("user", MATCH_EXACT, "alice"), strict=True) == [1.0]
    assert described(component("user", MATCH_DEFAULT)) == [2.0]
    assert described(component("user", MATCH_ANY), strict=True) == [1.0, 2.0]
    assert described(component("client-id", MATCH_ANY)) == [3.0, 4.0]
    assert described(component("user", MATCH_ANY), component("client-id", MATCH_EXACT, "app")) == [
        4.0
    ]


@pytest.mark.parametrize(
    ("components", "code"),
    [
        ([component("user", MATCH_EXACT)], ErrorCode.INVALID_REQUEST),
        ([component("user", MATCH_DEFAULT, "x")], ErrorCode.INVALID_REQUEST),
        ([component("user", MATCH_ANY, "x")], ErrorCode.INVALID_REQUEST),
        ([component("user", MATCH_ANY), component("user", MATCH_ANY)], ErrorCode.INVALID_REQUEST),
        ([component("group", MATCH_ANY)], ErrorCode.UNSUPPORTED_VERSION),
        ([component("user", 7)], ErrorCode.UNSUPPORTED_VERSION),
        ([component("ip", MATCH_ANY), component("user", MATCH_ANY)], ErrorCode.INVALID_REQUEST),
    ],
)
def test_describe_refuses_bad_filters_as_kafka(
    components: list[ComponentData], code: ErrorCode
) -> None:
    response = describe_quotas(QUOTAS, components, False)
    assert response.error_code == code
    assert response.error_message
    assert response.entries is None
