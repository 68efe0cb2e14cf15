"""The async client against scripted servers on the in-memory network, under a manual clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from client.client import Client
from client.config import ClientConfig
from client.connection import ConnectionState
from client.errors import (
    AuthenticationError,
    ClientClosedError,
    ConnectionFailedError,
    ConnectionLostError,
    DeliveryTimeoutError,
    NoBrokersAvailableError,
    RequestTimeoutError,
    UnknownBrokerError,
)
from runtime.clock import ManualClock
from runtime.net.dialect import RequestContext
from runtime.net.transport import Address
from tests.unit.client.scripted_cluster import ScriptedCluster, advance_until, settle
from wire.batch_builder import build_batch
from wire.errors import ErrorCode, KafkaError
from wire.messages import (
    ApiKey,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    MetadataRequest,
    MetadataResponse,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from wire.topic import TopicPartition

SEED = 20261122
SECRET = b"0123456789abcdef-cluster-secret"


def produce_request(tp: TopicPartition, value: bytes = b"v") -> ProduceRequest:
    batch = build_batch([(None, value)], base_timestamp=1)
    data = PartitionProduceData(index=tp.partition, records=batch)
    return ProduceRequest(
        acks=-1,
        timeout_ms=1000,
        topic_data=[TopicProduceData(name=tp.topic, partition_data=[data])],
    )


def client_tasks() -> set[str]:
    prefixes = ("connect ", "read ", "metadata refresh")
    return {t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith(prefixes)}


async def test_bootstrap_then_address_brokers_by_node_id(cluster: ScriptedCluster) -> None:
    client = cluster.client()
    with pytest.raises(UnknownBrokerError):
        await client.send(1, MetadataRequest(topics=[]))  # node ids need metadata first
    view = await client.refresh_metadata(["t"])
    assert sorted(view.brokers) == [0, 1]
    leader, partition = await client.leader_for(TopicPartition("t", 1))
    assert leader.node_id == 1
    assert partition.leader_epoch == 0
    response = await client.send(1, MetadataRequest(topics=[]))
    assert isinstance(response, MetadataResponse)
    assert cluster.count(ApiKey.METADATA, broker=1) == 1
    await client.close()


async def test_bootstrap_skips_unreachable_addresses(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    dead = Address("nobody", 1)
    client = Client(
        [dead, cluster.addresses[1]],
        transport=cluster.network.transport("client"),
        clock=clock,
        seed=SEED,
    )
    view = await client.refresh_metadata()
    assert sorted(view.brokers) == [0, 1]
    await client.close()


async def test_no_reachable_bootstrap_is_a_typed_error(clock: ManualClock) -> None:
    cluster = ScriptedCluster(clock, brokers=1, seed=SEED)
    client = Client(
        [Address("nobody", 1)], transport=cluster.network.transport("client"), clock=clock
    )
    with pytest.raises(NoBrokersAvailableError):
        await client.refresh_metadata()
    await client.close()


async def test_pipelined_requests_share_one_connection_and_answer_in_order(
    cluster: ScriptedCluster,
) -> None:
    release = asyncio.Event()
    arrived: list[int] = []

    async def slow_metadata(broker: int, request: MetadataRequest, ctx: RequestContext) -> Any:
        arrived.append(ctx.correlation_id)
        await release.wait()
        return await cluster.metadata(broker, request, ctx)

    cluster.overrides[ApiKey.METADATA] = slow_metadata
    client = cluster.client()
    tasks = [
        asyncio.create_task(client.send(cluster.addresses[0], MetadataRequest(topics=[])))
        for _ in range(4)
    ]
    await settle()
    # All four reached the server before any was answered: they were pipelined.
    assert len(arrived) == 4, arrived
    assert client.connection_to(cluster.addresses[0]).in_flight == 4
    release.set()
    responses = await asyncio.gather(*tasks)
    assert all(isinstance(r, MetadataResponse) for r in responses)
    assert arrived == sorted(arrived)
    assert cluster.network.open_connections("client") == 1
    await client.close()


async def test_in_flight_cap_holds_back_extra_requests(cluster: ScriptedCluster) -> None:
    release = asyncio.Event()
    arrived: list[int] = []

    async def slow_metadata(broker: int, request: MetadataRequest, ctx: RequestContext) -> Any:
        arrived.append(ctx.correlation_id)
        await release.wait()
        return await cluster.metadata(broker, request, ctx)

    cluster.overrides[ApiKey.METADATA] = slow_metadata
    client = cluster.client(config=ClientConfig(max_in_flight_requests_per_connection=2))
    address = cluster.addresses[0]
    tasks = [
        asyncio.create_task(client.send(address, MetadataRequest(topics=[]))) for _ in range(5)
    ]
    await settle()
    assert len(arrived) == 2
    release.set()
    await asyncio.gather(*tasks)
    assert len(arrived) == 5
    await client.close()


async def test_request_timeout_fails_the_request_and_resets_the_connection(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    never = asyncio.Event()
    calls = 0

    async def stuck_then_ok(broker: int, request: MetadataRequest, ctx: RequestContext) -> Any:
        nonlocal calls
        calls += 1
        if calls <= 2:
            await never.wait()
        return await cluster.metadata(broker, request, ctx)

    cluster.overrides[ApiKey.METADATA] = stuck_then_ok
    client = cluster.client(config=ClientConfig(request_timeout_ms=1000))
    address = cluster.addresses[0]
    first = asyncio.create_task(client.send(address, MetadataRequest(topics=[])))
    await settle()
    second = asyncio.create_task(client.send(address, MetadataRequest(topics=[]), timeout_ms=5000))
    await settle()
    clock.advance(999)
    await settle()
    assert not first.done()
    clock.advance(1)
    await settle()
    with pytest.raises(RequestTimeoutError):
        await first
    # The other request shared the now-reset connection: it fails as lost (retriable).
    with pytest.raises(ConnectionLostError):
        await second
    connection = client.connection_to(address)
    assert connection.state is ConnectionState.DISCONNECTED
    # The next request reconnects after the reconnect backoff (50 ms +/- 20%).
    third = asyncio.create_task(client.send(address, MetadataRequest(topics=[])))
    await advance_until(clock, third.done, step_ms=5, max_steps=20)
    assert isinstance(third.result(), MetadataResponse)
    await client.close()


async def test_reconnects_after_the_server_drops_the_connection(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    never = asyncio.Event()

    async def hang(broker: int, request: MetadataRequest, ctx: RequestContext) -> Any:
        await never.wait()
        raise AssertionError("unreachable")

    client = cluster.client()
    address = cluster.addresses[0]
    await client.send(address, MetadataRequest(topics=[]))
    cluster.overrides[ApiKey.METADATA] = hang
    pending = asyncio.create_task(client.send(address, MetadataRequest(topics=[])))
    await settle()
    assert cluster.network.kill("client") == 1
    await settle()
    with pytest.raises(ConnectionLostError):
        await pending
    del cluster.overrides[ApiKey.METADATA]
    again = asyncio.create_task(client.send(address, MetadataRequest(topics=[])))
    await settle()
    assert not again.done(), "reconnected without waiting for reconnect.backoff.ms"
    clock.advance(39)  # below the smallest jittered backoff (50 ms - 20%)
    await settle()
    assert not again.done()
    await advance_until(clock, again.done, step_ms=1, max_steps=30)
    assert isinstance(again.result(), MetadataResponse)
    assert cluster.network.open_connections("client") == 1
    await client.close()


async def test_failed_connects_back_off_exponentially(clock: ManualClock) -> None:
    cluster = ScriptedCluster(clock, brokers=1, seed=SEED)
    address = Address("broker-0", 9092)
    client = Client(
        [address],
        transport=cluster.network.transport("client"),
        clock=clock,
        config=ClientConfig(reconnect_backoff_ms=100, reconnect_backoff_max_ms=400),
        seed=SEED,
    )
    connection = client.connection_to(address)
    waits = []
    for _ in range(5):
        task = asyncio.create_task(client.send(address, MetadataRequest(topics=[])))
        start = clock.monotonic_ms()
        await advance_until(clock, task.done, step_ms=1, max_steps=1000)
        waits.append(clock.monotonic_ms() - start)
        with pytest.raises(ConnectionFailedError):
            await task
    # First attempt immediately, then 100, 200, 400, 400 ms (each +/- 20%).
    assert waits[0] == 0, f"seed={SEED} waits={waits}"
    for wait, nominal in zip(waits[1:], [100, 200, 400, 400], strict=True):
        assert nominal * 0.8 <= wait <= nominal * 1.2 + 1, f"seed={SEED} waits={waits}"
    assert connection.failed_attempts == 5
    # Once the broker is up, the next attempt (after its backoff) connects and resets the count.
    await cluster.start_broker(0, address)
    task = asyncio.create_task(client.send(address, MetadataRequest(topics=[])))
    await advance_until(clock, task.done, step_ms=5, max_steps=200)
    assert isinstance(task.result(), MetadataResponse)
    assert connection.failed_attempts == 0
    await client.close()
    await cluster.stop()


async def test_not_leader_refreshes_metadata_and_retries_on_the_new_leader(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    client = cluster.client()
    tp = TopicPartition("t", 0)
    await client.refresh_metadata(["t"])
    cluster.move_leader(tp, 1)  # the client still believes broker 0 leads

    async def produce_once() -> ProduceResponse:
        leader, _ = await client.leader_for(tp)
        response = await client.send_expect(leader.node_id, produce_request(tp), ProduceResponse)
        code = response.responses[0].partition_responses[0].error_code
        if code != ErrorCode.NONE:
            raise KafkaError(code)
        return response

    task = asyncio.create_task(client.call(produce_once))
    await advance_until(clock, task.done, step_ms=10, max_steps=100)
    response = task.result()
    assert response.responses[0].partition_responses[0].base_offset == 0
    assert cluster.count(ApiKey.PRODUCE, broker=0) == 1  # answered NOT_LEADER_OR_FOLLOWER
    assert cluster.count(ApiKey.PRODUCE, broker=1) == 1
    assert cluster.count(ApiKey.METADATA) == 2  # the initial one and the refresh
    assert cluster.logs[tp].end_offset == 1
    await client.close()


async def test_retriable_errors_give_up_at_the_delivery_timeout(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    client = cluster.client(config=ClientConfig(delivery_timeout_ms=2000, retry_backoff_ms=100))
    attempts = 0

    async def always_not_enough_replicas() -> None:
        nonlocal attempts
        attempts += 1
        raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS)

    task = asyncio.create_task(client.call(always_not_enough_replicas, what="produce"))
    await advance_until(clock, task.done, step_ms=50, max_steps=100)
    with pytest.raises(DeliveryTimeoutError) as info:
        await task
    assert isinstance(info.value.__cause__, KafkaError)
    assert 1500 <= clock.monotonic_ms() <= 2050
    # Backoff doubles from 100 ms to the 1000 ms cap: 100, 200, 400, 800 fit in 2 s.
    assert 4 <= attempts <= 6, attempts
    await client.close()


async def test_non_retriable_errors_are_raised_at_once(cluster: ScriptedCluster) -> None:
    client = cluster.client()
    attempts = 0

    async def too_large() -> None:
        nonlocal attempts
        attempts += 1
        raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE)

    with pytest.raises(KafkaError) as info:
        await client.call(too_large)
    assert info.value.code is ErrorCode.MESSAGE_TOO_LARGE
    assert attempts == 1
    await client.close()


async def test_close_fails_pending_requests_and_leaves_no_task(cluster: ScriptedCluster) -> None:
    never = asyncio.Event()

    async def hang(broker: int, request: MetadataRequest, ctx: RequestContext) -> Any:
        await never.wait()
        raise AssertionError("unreachable")

    client = cluster.client()
    await client.refresh_metadata(["t"])
    cluster.overrides[ApiKey.METADATA] = hang
    pending = [asyncio.create_task(client.send(b, MetadataRequest(topics=[]))) for b in (0, 1, 1)]
    refresh = asyncio.create_task(client.refresh_metadata(["other"]))
    await settle()
    assert client_tasks()
    await client.close()
    for task in pending:
        with pytest.raises(ClientClosedError):
            await task
    with pytest.raises((ClientClosedError, asyncio.CancelledError)):
        await refresh
    assert client_tasks() == set()
    with pytest.raises(ClientClosedError):
        await client.send(0, MetadataRequest(topics=[]))
    never.set()


async def test_acks_zero_send_only_keeps_the_connection_in_step(cluster: ScriptedCluster) -> None:
    client = cluster.client()
    await client.refresh_metadata(["t"])
    tp = TopicPartition("t", 0)
    # ketch's server answers even acks=0 produces; Kafka's would not. Either way the next
    # request's response must still find its own request.
    await client.send_only(0, produce_request(tp, b"fire-and-forget"))
    response = await client.send(0, MetadataRequest(topics=[]))
    assert isinstance(response, MetadataResponse)
    assert cluster.logs[tp].end_offset == 1
    assert client.connection_to(0).state is ConnectionState.READY
    await client.close()


async def test_cluster_credential_authenticates_control_plane_requests(clock: ManualClock) -> None:
    cluster = ScriptedCluster(clock, brokers=1, seed=SEED)

    async def heartbeat(broker: int, request: BrokerHeartbeatRequest, ctx: RequestContext) -> Any:
        assert ctx.cluster_member
        return BrokerHeartbeatResponse()

    cluster.overrides[ApiKey.BROKER_HEARTBEAT] = heartbeat
    await cluster.start(secret=SECRET)
    address = cluster.addresses[0]
    request = BrokerHeartbeatRequest(broker_id=7, broker_epoch=1)

    member = cluster.client(credential=SECRET)
    response = await member.send_expect(address, request, BrokerHeartbeatResponse)
    assert response.error_code == ErrorCode.NONE
    await member.close()

    outsider = cluster.client()
    with pytest.raises(KafkaError) as info:
        await outsider.send_expect(address, request, BrokerHeartbeatResponse)
    assert info.value.code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    await outsider.close()

    impostor = cluster.client(credential=b"not-the-cluster-secret-at-all")
    with pytest.raises(AuthenticationError):
        await impostor.send(address, request)
    await impostor.close()
    await cluster.stop()


async def test_short_credential_is_rejected_up_front(cluster: ScriptedCluster) -> None:
    with pytest.raises(ValueError, match="at least"):
        cluster.client(credential=b"short")


async def test_out_of_step_response_resets_the_connection(clock: ManualClock) -> None:
    """A server answering with the wrong correlation id: the client must not mis-deliver."""
    from runtime.net.memory import MemoryNetwork
    from runtime.net.transport import Stream
    from wire.envelope import ResponseEnvelope, decode_request, encode_response
    from wire.frames import FrameDecoder, encode_frame

    network = MemoryNetwork(SEED, clock)

    async def liar(stream: Stream) -> None:
        decoder = FrameDecoder()
        while data := await stream.receive():
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                request = decode_request(frame)
                wrong = ResponseEnvelope(request.correlation_id + 7, MetadataResponse().to_body())
                await stream.send(encode_frame(encode_response(wrong)))
        await stream.aclose()

    address = Address("liar", 1)
    listener = await network.transport("liar").listen(address, liar)
    client = Client([address], transport=network.transport("client"), clock=clock)
    with pytest.raises(ConnectionLostError, match="bad response"):
        await client.send(address, MetadataRequest(topics=[]))
    await client.close()
    await listener.aclose()


async def test_concurrent_refresh_for_new_topics_includes_them(cluster: ScriptedCluster) -> None:
    cluster.create_topic("u", [1])
    client = cluster.client()
    first = asyncio.create_task(client.refresh_metadata(["t"]))
    await asyncio.sleep(0)
    # Joins while the first refresh (for "t" only) is in flight: it must still learn "u".
    second = asyncio.create_task(client.wait_for_topic("u"))
    await asyncio.gather(first, second)
    assert second.result().partitions[0].leader_id == 1
    assert cluster.count(ApiKey.METADATA) == 2
    await client.close()


async def test_a_shorter_timeout_sent_later_still_fires_first(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    never = asyncio.Event()

    async def hang(broker: int, request: MetadataRequest, ctx: RequestContext) -> Any:
        await never.wait()
        raise AssertionError("unreachable")

    cluster.overrides[ApiKey.METADATA] = hang
    client = cluster.client()
    address = cluster.addresses[0]
    long = asyncio.create_task(client.send(address, MetadataRequest(topics=[]), timeout_ms=5000))
    await settle()
    short = asyncio.create_task(client.send(address, MetadataRequest(topics=[]), timeout_ms=300))
    await settle()
    clock.advance(299)
    await settle()
    assert not short.done()
    clock.advance(1)
    await settle()
    with pytest.raises(RequestTimeoutError, match="300"):
        await short
    with pytest.raises(ConnectionLostError):
        await long
    never.set()
    await client.close()


async def test_a_caller_cancelled_while_waiting_for_a_slot_frees_its_place(
    cluster: ScriptedCluster,
) -> None:
    release = asyncio.Event()

    async def slow(broker: int, request: MetadataRequest, ctx: RequestContext) -> Any:
        await release.wait()
        return await cluster.metadata(broker, request, ctx)

    cluster.overrides[ApiKey.METADATA] = slow
    client = cluster.client(config=ClientConfig(max_in_flight_requests_per_connection=1))
    address = cluster.addresses[0]
    tasks = [
        asyncio.create_task(client.send(address, MetadataRequest(topics=[]))) for _ in range(3)
    ]
    await settle()
    tasks[1].cancel()
    await settle()
    release.set()
    assert isinstance(await tasks[0], MetadataResponse)
    assert isinstance(await tasks[2], MetadataResponse)
    assert tasks[1].cancelled()
    assert cluster.count(ApiKey.METADATA) == 2
    await client.close()
