"""`Client.send_any()` with `reach_timeout_ms`: like Kafka's clients polling their bootstrap
list, it keeps trying every address (each after its reconnect backoff) until one answers or the
time is up, on the in-memory network under a manual clock."""

from __future__ import annotations

import asyncio

import pytest

from client.client import Client
from client.config import ClientConfig
from client.errors import NoBrokersAvailableError, is_retriable
from runtime.clock import ManualClock
from runtime.net.transport import Address
from tests.unit.client.scripted_cluster import ScriptedCluster, advance_until, settle
from wire.messages import MetadataRequest, MetadataResponse

SEED = 2323
CONFIG = ClientConfig(reconnect_backoff_ms=50, reconnect_backoff_max_ms=400)


def client_of(
    cluster: ScriptedCluster, bootstrap: list[Address], reach_timeout_ms: float, seed: int = SEED
) -> Client:
    return Client(
        bootstrap,
        transport=cluster.network.transport("client"),
        clock=cluster.clock,
        config=CONFIG,
        seed=seed,
        reach_timeout_ms=reach_timeout_ms,
    )


async def test_a_dead_first_address_is_skipped(cluster: ScriptedCluster) -> None:
    """Broker 0 is down: the list that starts with it still reaches broker 1 at once."""
    await cluster.servers[0].stop()
    dead, live = cluster.addresses[0], cluster.addresses[1]
    # Seed 1 makes the client start at the first address of the two (a seeded random start).
    client = client_of(cluster, [dead, live], 0, seed=1)
    response = await client.send_any(MetadataRequest(topics=[]))
    assert isinstance(response, MetadataResponse)
    assert client.connection_to(dead).failed_attempts == 1, "the dead address was tried first"
    await client.close()


async def test_keeps_trying_until_a_broker_comes_back(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    """Every broker down, as while `ketch up` restarts them: the request waits for the first
    broker that listens again instead of failing at the first refusal."""
    for server in cluster.servers.values():
        await server.stop()
    client = client_of(cluster, list(cluster.addresses.values()), 5_000)
    request = asyncio.create_task(client.send_any(MetadataRequest(topics=[])))
    await advance_until(clock, lambda: clock.monotonic_ms() >= 1_200, step_ms=25, max_steps=100)
    assert not request.done(), "gave up before reach_timeout_ms"
    await cluster.start_broker(1, cluster.addresses[1])
    await advance_until(clock, request.done, step_ms=25, max_steps=40)  # within the max backoff
    assert isinstance(request.result(), MetadataResponse)
    await client.close()


async def test_gives_up_after_reach_timeout_naming_every_address(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    for server in cluster.servers.values():
        await server.stop()
    client = client_of(cluster, list(cluster.addresses.values()), 2_000)
    request = asyncio.create_task(client.send_any(MetadataRequest(topics=[])))
    await advance_until(clock, request.done, step_ms=25, max_steps=200)
    assert 1_500 <= clock.monotonic_ms() <= 2_000, "bounded by reach_timeout_ms"
    with pytest.raises(NoBrokersAvailableError) as info:
        request.result()
    assert "broker-0:9092" in str(info.value)
    assert "broker-1:9092" in str(info.value)
    assert "nothing listens at" in str(info.value.__cause__)
    # Retriable: a caller's own retry loop (Client.call) may try again within its timeout.
    assert is_retriable(info.value)
    await client.close()


async def test_without_reach_timeout_one_round_fails_at_once(cluster: ScriptedCluster) -> None:
    """The default (brokers, the controller): one round, their own retries decide."""
    for server in cluster.servers.values():
        await server.stop()
    client = client_of(cluster, list(cluster.addresses.values()), 0)
    request = asyncio.create_task(client.send_any(MetadataRequest(topics=[])))
    await settle()
    # Both addresses were refused without the clock moving (no backoff waited).
    assert request.done()
    with pytest.raises(NoBrokersAvailableError):
        request.result()
    await client.close()
