"""The broker's cluster id against the fake controller of fake_controller.py (simulated time): a
broker on its first start registers without one, stores the controller's in its log dir's
meta.properties and serves it in Metadata; after a restart it registers with it; a broker the
controller refuses as of another cluster does not retry and fails its node (the process exits
1); the Kafka listener's gate waits for the id as well as for the first metadata; and the Kafka
listener's DescribeCluster is answered from the broker's own metadata, with the id."""

from __future__ import annotations

import asyncio
import logging

import pytest

from actors.replication.replica_manager_messages import HandleUpdateMetadata
from node.broker.config import KAFKA_LISTENER
from runtime.log.meta_properties import read_if_present
from runtime.net.dialect import RequestContext
from tests.unit.node.broker.fake_controller import BROKER, Env, registered
from wire.errors import ErrorCode
from wire.messages import (
    ApiKey,
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
    MetadataRequest,
    MetadataResponse,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataRequest,
)

CLUSTER: str = "MkU3OEVBNTcwNTJENDM2Qg"
NO_CLUSTER_ID = {"cluster.id": ""}  # the env configures one by default


async def metadata_cluster_id(env: Env) -> str | None:
    client = env.client()
    try:
        response = await env.drive(client.send(BROKER, MetadataRequest(topics=[])))
    finally:
        await env.drive(client.close())
    assert isinstance(response, MetadataResponse), response
    return response.cluster_id


async def test_a_first_start_learns_the_id_stores_it_and_registers_with_it_after(
    env: Env,
) -> None:
    env.controller.cluster_id = CLUSTER
    node = env.node(NO_CLUSTER_ID)
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    (_, request) = env.controller.registrations[0]
    assert request.cluster_id == "", "a new broker names no cluster"
    assert node.log_manager.cluster_id == CLUSTER
    meta = read_if_present(env.tmp_path / "broker-0")
    assert meta is not None
    assert meta.cluster_id == CLUSTER
    assert await metadata_cluster_id(env) == CLUSTER
    await env.drive(node.stop())

    again = env.node(NO_CLUSTER_ID)
    await env.drive(again.start())
    await env.run_until(registered(again), max_ms=10, what="registered again")
    (_, second) = env.controller.registrations[1]
    assert second.cluster_id == CLUSTER, "read back from meta.properties"
    await env.drive(again.stop())


async def test_a_broker_of_another_cluster_refuses_to_join_and_fails(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    env.controller.cluster_id = CLUSTER
    env.controller.refuse_registration = ErrorCode.INCONSISTENT_CLUSTER_ID
    node = env.node()  # cluster.id "test-cluster"
    await env.drive(node.start())
    await env.run_until(node.failed.is_set, max_ms=10, what="node failed")
    assert node.lifecycle is not None
    assert node.lifecycle.refused
    # No retry: the answer needs an operator, not time.
    await env.run_for(2_000)
    assert len(env.controller.registrations) == 1
    assert env.controller.heartbeats == []
    refusals = [r for r in caplog.records if r.levelno == logging.CRITICAL]
    assert len(refusals) == 1
    message = refusals[0].getMessage()
    assert "belongs to cluster test-cluster" in message
    assert f"the controller to cluster {CLUSTER}" in message
    assert "INCONSISTENT_CLUSTER_ID" in message
    # The process main stops the node (exit 1); no controlled shutdown for a broker never in.
    await env.drive(node.stop())
    assert env.controller.shutdowns == []


async def test_an_answer_naming_another_cluster_is_refused_too(env: Env) -> None:
    """A controller that answers NONE but names another cluster than the broker's is not
    joined either (ketch's controller refuses first; this guards the broker's own check)."""
    env.controller.cluster_id = CLUSTER
    node = env.node()  # cluster.id "test-cluster"
    await env.drive(node.start())
    await env.run_until(node.failed.is_set, max_ms=10, what="node failed")
    assert node.broker_epoch == -1, "never took the registration's epoch"
    assert node.log_manager.cluster_id == "test-cluster"
    await env.drive(node.stop())


async def test_the_kafka_gate_waits_for_the_cluster_id(env: Env) -> None:
    env.controller.cluster_id = CLUSTER
    env.controller.hold_registration = asyncio.Event()
    node = env.node({**NO_CLUSTER_ID, "listeners": f"native://{BROKER},kafka://broker-0:19092"})
    await env.drive(node.start())
    await env.run_until(lambda: bool(env.controller.registrations), max_ms=10, what="register")
    # The controller's first UpdateMetadata overtakes the registration's answer.
    await env.drive(
        node.replica_manager.ask(
            HandleUpdateMetadata(
                UpdateMetadataRequest(
                    controller_id=3_000, controller_epoch=1, partition_states=[], live_brokers=[]
                )
            )
        )
    )
    gate = node.metadata_gate
    assert not gate.is_open, "a Kafka client would read a null cluster id"
    env.controller.hold_registration.set()
    await env.run_until(lambda: gate.is_open, max_ms=10, what="the gate opens")
    assert registered(node)()
    await env.drive(node.stop())


def kafka_context(api_version: int = 1) -> RequestContext:
    return RequestContext(
        peer="127.0.0.1:5000",
        client_id="client",
        api_key=ApiKey.DESCRIBE_CLUSTER,
        api_version=api_version,
        correlation_id=1,
        cluster_member=False,
        listener=KAFKA_LISTENER,
    )


async def test_kafka_describe_cluster_is_answered_from_the_brokers_metadata(env: Env) -> None:
    env.controller.cluster_id = CLUSTER
    node = env.node({**NO_CLUSTER_ID, "listeners": f"native://{BROKER},kafka://broker-0:19092"})
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    kafka_endpoint = UpdateMetadataEndpoint(listener=KAFKA_LISTENER, host="k0", port=19092)
    await env.drive(
        node.replica_manager.ask(
            HandleUpdateMetadata(
                UpdateMetadataRequest(
                    controller_id=3_000,
                    controller_epoch=1,
                    partition_states=[],
                    live_brokers=[UpdateMetadataBroker(id=0, endpoints=[kafka_endpoint])],
                )
            )
        )
    )
    answer = await env.drive(node.apis.describe_cluster(DescribeClusterRequest(), kafka_context()))
    assert answer == DescribeClusterResponse(
        cluster_id=CLUSTER,
        controller_id=0,  # the answering broker, as in Metadata
        brokers=[DescribeClusterBroker(broker_id=0, host="k0", port=19092)],
    )
    assert env.controller.forwarded == [], "not forwarded: the controller knows no Kafka address"
    for endpoint_type, error in (
        (2, ErrorCode.MISMATCHED_ENDPOINT_TYPE),
        (7, ErrorCode.UNSUPPORTED_ENDPOINT_TYPE),
    ):
        refused = await env.drive(
            node.apis.describe_cluster(
                DescribeClusterRequest(endpoint_type=endpoint_type), kafka_context()
            )
        )
        assert refused.error is error
    await env.drive(node.stop())
