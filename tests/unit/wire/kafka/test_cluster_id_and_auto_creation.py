"""The Kafka listener's conversions for issue 22: Metadata's allow_auto_topic_creation (the
client's flag from v4, and true before: the field did not exist, and Kafka reads its absence as
allowing it), and DescribeCluster v0 with its cluster id, as a Kafka client reads them."""

from __future__ import annotations

import dataclasses

from kio.static.constants import EntityType

from wire.kafka.apis import APIS, METADATA_AUTO_CREATION_FLAG
from wire.kafka.codec import schema
from wire.messages import (
    ApiKey,
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
    MetadataRequest,
    MetadataResponse,
)

from .test_codec import TOPICS, kafka_answer


def native(version: int, **fields: object) -> MetadataRequest:
    request_cls = schema(ApiKey.METADATA, version, EntityType.request)
    flags = {
        f.name: False
        for f in dataclasses.fields(request_cls)
        if f.name.startswith("include_") and f.name not in fields
    }
    body = request_cls(topics=(), **flags, **fields)
    request, _ = APIS[ApiKey.METADATA].native_request(body, version, TOPICS)
    assert isinstance(request, MetadataRequest)
    return request


def test_before_v4_every_metadata_request_allows_auto_creation() -> None:
    for version in range(1, METADATA_AUTO_CREATION_FLAG):  # v0's empty list asks for everything
        assert native(version).allow_auto_topic_creation, version


def test_from_v4_the_clients_flag_decides() -> None:
    for version in range(METADATA_AUTO_CREATION_FLAG, APIS[ApiKey.METADATA].high + 1):
        for allowed in (True, False):
            request = native(version, allow_auto_topic_creation=allowed)
            assert request.allow_auto_topic_creation is allowed, version


def test_describe_cluster_carries_the_cluster_id_and_the_brokers() -> None:
    api = APIS[ApiKey.DESCRIBE_CLUSTER]
    answer = DescribeClusterResponse(
        cluster_id="MkU3OEVBNTcwNTJENDM2Qg",
        controller_id=1,
        brokers=[
            DescribeClusterBroker(broker_id=1, host="h1", port=19092, rack="r"),
            DescribeClusterBroker(broker_id=2, host="h2", port=19093),
        ],
    )
    for version in range(api.low, api.high + 1):
        request_cls = schema(ApiKey.DESCRIBE_CLUSTER, version, EntityType.request)
        fields = {f.name for f in dataclasses.fields(request_cls)}
        given: dict[str, object] = {"include_cluster_authorized_operations": True}
        if "include_fenced_brokers" in fields:
            given["include_fenced_brokers"] = True
        if "endpoint_type" in fields:
            given["endpoint_type"] = 2
        request, note = api.native_request(request_cls(**given), version, TOPICS)
        # v0 has no endpoint type: brokers, always.
        expected_type = 2 if "endpoint_type" in fields else 1
        assert request == DescribeClusterRequest(endpoint_type=expected_type), version
        assert kafka_answer(ApiKey.DESCRIBE_CLUSTER, version, answer, note) == answer, version


def test_metadata_carries_the_cluster_id_from_v2() -> None:
    answer = MetadataResponse(cluster_id="MkU3OEVBNTcwNTJENDM2Qg", controller_id=0)
    for version in range(APIS[ApiKey.METADATA].high + 1):
        read = kafka_answer(ApiKey.METADATA, version, answer, None)
        assert isinstance(read, MetadataResponse)
        assert read.cluster_id == (answer.cluster_id if version >= 2 else None), version
