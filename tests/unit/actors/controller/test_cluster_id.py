"""The cluster id at the controller: written to the metadata log at the first start (cluster.id
when configured, else a new Kafka-style Uuid text), the same after a restart, refused when the
configuration names another; registrations of another cluster's brokers refused with
INCONSISTENT_CLUSTER_ID, a broker that names none told the id."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.controller.messages import ControllerConfig, DescribeCluster, RegisterBroker
from runtime.actor import ActorFatalError, MailboxClosed
from runtime.log.metadata_log import MetadataLog
from tests.unit.actors.controller.harness import HEARTBEAT_MS, SESSION_MS, ControllerHarness
from wire.errors import ErrorCode
from wire.messages import (
    BrokerRegistrationListener,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from wire.metadata_records import ClusterIdRecord, ControllerEpochRecord, encode_record


def with_cluster_id(cluster_id: str) -> ControllerConfig:
    return ControllerConfig(
        cluster_id=cluster_id,
        broker_session_timeout_ms=SESSION_MS,
        broker_heartbeat_interval_ms=HEARTBEAT_MS,
        auto_leader_rebalance_enable=False,
    )


def registration(cluster_id: str, broker_id: int = 0) -> RegisterBroker:
    return RegisterBroker(
        BrokerRegistrationRequest(
            broker_id=broker_id,
            cluster_id=cluster_id,
            incarnation_id=bytes([broker_id + 1]) * 16,
            listeners=[BrokerRegistrationListener(name="native", host="b", port=9092)],
        )
    )


async def test_the_first_start_writes_an_id_and_a_restart_keeps_it(tmp_path: Path) -> None:
    first = ControllerHarness(tmp_path / "controller")
    await first.start()
    status = await first.controller.ask(DescribeCluster())
    cluster_id = status.cluster_id
    assert len(cluster_id) == 22, cluster_id
    assert first.controller.model.cluster_id == cluster_id
    await first.stop()

    second = ControllerHarness(tmp_path / "controller")
    await second.start()
    try:
        restarted = await second.controller.ask(DescribeCluster())
        assert restarted.cluster_id == cluster_id
        assert restarted.controller_epoch == status.controller_epoch + 1
    finally:
        await second.stop()
    # Written once: the second start added only its epoch.
    records, _ = MetadataLog(tmp_path / "controller").load()
    assert [r for r in records if r["type"] == ClusterIdRecord.TYPE] == [
        encode_record(ClusterIdRecord(cluster_id))
    ]


async def test_a_configured_cluster_id_is_used_and_another_later_refused(tmp_path: Path) -> None:
    directory = tmp_path / "controller"
    configured = ControllerHarness(directory, with_cluster_id("prod-1"))
    await configured.start()
    assert (await configured.controller.ask(DescribeCluster())).cluster_id == "prod-1"
    await configured.stop()

    other = ControllerHarness(directory, with_cluster_id("prod-2"))
    with pytest.raises(MailboxClosed):
        await other.start()
    failure = other.controller.failure
    assert isinstance(failure, ActorFatalError), failure
    assert "belongs to cluster prod-1, but cluster.id is prod-2" in str(failure)
    await other.store.close()

    # Unset, the log's id stands.
    unset = ControllerHarness(directory)
    await unset.start()
    try:
        assert (await unset.controller.ask(DescribeCluster())).cluster_id == "prod-1"
    finally:
        await unset.stop()


async def test_a_log_written_without_a_cluster_id_gets_one(tmp_path: Path) -> None:
    """A metadata log from before cluster ids: the next start adds one."""
    directory = tmp_path / "controller"
    store = MetadataLog(directory)
    store.load()
    await store.append([encode_record(ControllerEpochRecord(4))])
    await store.close()
    harness = ControllerHarness(directory)
    await harness.start()
    try:
        status = await harness.controller.ask(DescribeCluster())
        assert len(status.cluster_id) == 22
        assert status.controller_epoch == 5
    finally:
        await harness.stop()


async def test_registrations_of_another_cluster_are_refused(harness: ControllerHarness) -> None:
    cluster_id = harness.controller.model.cluster_id
    assert cluster_id is not None
    # A broker on its first start names none: registered, and told the id.
    first: BrokerRegistrationResponse = await harness.controller.ask(registration(""))
    assert (first.error, first.cluster_id) == (ErrorCode.NONE, cluster_id)
    # One that stored it: registered.
    same: BrokerRegistrationResponse = await harness.controller.ask(registration(cluster_id, 1))
    assert (same.error, same.cluster_id) == (ErrorCode.NONE, cluster_id)
    # One of another cluster: refused, told which cluster this is, and not registered.
    foreign: BrokerRegistrationResponse = await harness.controller.ask(registration("other", 2))
    assert foreign.error is ErrorCode.INCONSISTENT_CLUSTER_ID
    assert foreign.cluster_id == cluster_id
    assert harness.controller.model.broker(2) is None
    assert [b.broker_id for b in harness.controller.model.brokers()] == [0, 1]
