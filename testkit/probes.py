"""Looking at a running cluster from outside, through its brokers' native listeners: bounded
polls and the few requests a harness needs (DescribeCluster, Metadata, CreateTopics, and a
one-record Produce).

Each function asks the given addresses in order and takes the first answer, so a caller can
leave out a broker it has just killed. None of them raises for a broker that does not answer:
"nobody answered" is a value (None, {}), and `wait_until` decides how long that may last.
Stateless: every call uses the caller's client on the caller's event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping

from client.client import Client
from client.errors import ClientError
from runtime.net.transport import Address
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.messages import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponsePartition,
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TopicProduceData,
)


async def wait_until(
    condition: Callable[[], Awaitable[bool]], what: str, *, timeout_s: float, poll_s: float = 0.02
) -> float:
    """Poll `condition` until it holds; the monotonic time it first held. Bounded by timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        if await condition():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached within {timeout_s} s")
        await asyncio.sleep(poll_s)


async def ask_any(
    client: Client, addresses: Iterable[Address], request: Request, *, timeout_ms: float = 1_000
) -> Response | None:
    """The first answer from any of `addresses`, tried in order; None when none answers."""
    for address in addresses:
        try:
            return await client.send(address, request, timeout_ms=timeout_ms)
        except ClientError:
            continue
    return None


async def broker_states(client: Client, addresses: Iterable[Address]) -> dict[int, str]:
    """Broker id -> "running" / "shutting_down" / "fenced", as the controller reports it through
    a broker (DescribeCluster is forwarded); empty when no broker or the controller answers."""
    response = await ask_any(client, addresses, DescribeClusterRequest())
    if not isinstance(response, DescribeClusterResponse) or response.error_code != 0:
        return {}
    return {b.broker_id: b.state for b in response.brokers}


async def partitions_of(
    client: Client, addresses: Iterable[Address], topic: str
) -> dict[int, MetadataResponsePartition]:
    """The topic's partitions as one of `addresses` knows them; empty when none answers."""
    request = MetadataRequest(topics=[MetadataRequestTopic(name=topic)])
    response = await ask_any(client, addresses, request)
    if not isinstance(response, MetadataResponse):
        return {}
    return {
        p.partition_index: p
        for t in response.topics
        if t.name == topic and t.error_code == 0
        for p in t.partitions
    }


async def create_topic(
    client: Client,
    addresses: Iterable[Address],
    topic: str,
    *,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str],
) -> None:
    """CreateTopics through a broker (forwarded to the controller)."""
    request = CreateTopicsRequest(
        topics=[
            CreatableTopic(
                name=topic,
                num_partitions=partitions,
                replication_factor=replication_factor,
                configs=[CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
            )
        ],
        timeout_ms=10_000,
    )
    response = await ask_any(client, addresses, request, timeout_ms=15_000)
    assert isinstance(response, CreateTopicsResponse), f"CreateTopics: {response!r}"
    [result] = response.topics
    assert result.error_code == 0, f"CreateTopics {topic}: {ErrorCode.from_code(result.error_code)}"


async def wait_fully_replicated(
    client: Client,
    addresses: Iterable[Address],
    topic: str,
    partitions: int,
    *,
    timeout_s: float,
) -> dict[int, MetadataResponsePartition]:
    """Until every partition has a leader and its whole replica set in the ISR."""
    found: dict[int, MetadataResponsePartition] = {}
    targets = list(addresses)

    async def full() -> bool:
        nonlocal found
        found = await partitions_of(client, targets, topic)
        return len(found) == partitions and all(
            p.leader_id >= 0 and sorted(p.isr_nodes) == sorted(p.replica_nodes)
            for p in found.values()
        )

    await wait_until(full, f"{topic}: every partition led with a full ISR", timeout_s=timeout_s)
    return found


def one_record(
    topic: str, partition: int, value: bytes, *, timeout_ms: int, acks: int = -1
) -> ProduceRequest:
    """A Produce of one record (no key, timestamp 0) to one partition."""
    return ProduceRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            TopicProduceData(
                name=topic,
                partition_data=[
                    PartitionProduceData(
                        index=partition, records=build_batch([(None, value)], base_timestamp=0)
                    )
                ],
            )
        ],
    )


def only_answer(response: object) -> PartitionProduceResponse:
    """The one partition answer of a Produce of one partition."""
    assert isinstance(response, ProduceResponse), response
    [topic] = response.responses
    [answer] = topic.partition_responses
    return answer
