"""`ketch cluster health`'s verdict and text view, as pure functions of a DescribeCluster answer, a
Metadata snapshot and the brokers that did not answer a probe (cli/health.py)."""

from __future__ import annotations

import json

import pytest

from cli import health as cli_health
from cli.health import (
    BrokerDown,
    ClusterHealth,
    by_topic,
    cluster_health,
    partition_ranges,
    render,
)
from wire.messages import (
    DescribeClusterBroker,
    DescribeClusterResponse,
    MetadataResponse,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from wire.topic import TopicPartition

CONTROLLER_ID = 3000


def described(
    states: dict[int, str], controller_id: int = CONTROLLER_ID
) -> DescribeClusterResponse:
    return DescribeClusterResponse(
        cluster_id="c",
        controller_id=controller_id,
        brokers=[
            DescribeClusterBroker(broker_id=b, host="127.0.0.1", port=9092 + b, state=s)
            for b, s in states.items()
        ],
    )


def partition(
    index: int, leader: int, replicas: list[int], isr: list[int]
) -> MetadataResponsePartition:
    return MetadataResponsePartition(
        partition_index=index, leader_id=leader, replica_nodes=replicas, isr_nodes=isr
    )


def metadata(topics: dict[str, list[MetadataResponsePartition]]) -> MetadataResponse:
    return MetadataResponse(
        topics=[MetadataResponseTopic(name=t, partitions=ps) for t, ps in topics.items()]
    )


RUNNING3 = {0: "running", 1: "running", 2: "running"}
FULL = metadata(
    {
        "orders": [partition(0, 0, [0, 1, 2], [0, 1, 2]), partition(1, 1, [1, 2, 0], [1, 2, 0])],
        "solo": [partition(0, 2, [2], [2])],
    }
)


def test_all_up_and_in_sync_is_healthy() -> None:
    health = cluster_health(described(RUNNING3), FULL, {})
    assert health.healthy
    assert health.unhealthy_reasons == ()
    assert health.controller_id == CONTROLLER_ID
    assert health.brokers == (0, 1, 2)
    assert health.brokers_down == ()
    assert health.leaderless == ()
    assert health.under_replicated == ()


def test_a_fenced_broker_is_down() -> None:
    states = {**RUNNING3, 2: "fenced"}
    # What the controller did once broker 2's session expired: 2 left the ISRs, "solo" (only
    # on 2) has no leader.
    snapshot = metadata(
        {
            "orders": [partition(0, 0, [0, 1, 2], [0, 1]), partition(1, 1, [1, 2, 0], [1, 0])],
            "solo": [partition(0, -1, [2], [2])],
        }
    )
    health = cluster_health(described(states), snapshot, {})
    assert not health.healthy
    assert health.brokers_down == (BrokerDown(2, "fenced"),)
    assert health.leaderless == (TopicPartition("solo", 0),)
    assert health.under_replicated == (TopicPartition("orders", 0), TopicPartition("orders", 1))
    assert health.unhealthy_reasons == (
        "brokers_down",
        "leaderless_partitions",
        "under_replicated_partitions",
    )


def test_a_broker_that_does_not_answer_is_down_before_the_controller_knows() -> None:
    # Killed a moment ago: still registered and running, still leader and in the ISRs.
    health = cluster_health(described(RUNNING3), FULL, {2: "cannot connect: connection refused"})
    assert health.brokers_down == (
        BrokerDown(2, "not answering (cannot connect: connection refused)"),
    )
    # Its leadership is as good as none; the others' partitions lack an in-sync replica.
    assert health.leaderless == (TopicPartition("solo", 0),)
    assert health.under_replicated == (TopicPartition("orders", 0), TopicPartition("orders", 1))


def test_a_fenced_broker_is_not_reported_twice() -> None:
    states = {**RUNNING3, 1: "fenced"}
    health = cluster_health(described(states), FULL, {1: "no answer within 3 s"})
    assert health.brokers_down == (BrokerDown(1, "fenced"),)


def test_shutting_down_is_not_down() -> None:
    health = cluster_health(described({**RUNNING3, 1: "shutting_down"}), FULL, {})
    assert health.healthy


def test_out_of_sync_replica_on_a_live_broker_is_under_replicated() -> None:
    snapshot = metadata({"t": [partition(0, 0, [0, 1, 2], [0, 2])]})
    health = cluster_health(described(RUNNING3), snapshot, {})
    assert health.brokers_down == ()
    assert health.leaderless == ()
    assert health.under_replicated == (TopicPartition("t", 0),)
    assert health.unhealthy_reasons == ("under_replicated_partitions",)


def test_leaderless_partition_is_not_also_under_replicated() -> None:
    snapshot = metadata({"t": [partition(0, -1, [0, 1], [0])]})
    health = cluster_health(described(RUNNING3), snapshot, {})
    assert health.leaderless == (TopicPartition("t", 0),)
    assert health.under_replicated == ()


def test_no_controller_is_unhealthy() -> None:
    health = cluster_health(described(RUNNING3, controller_id=-1), FULL, {})
    assert health.controller_id is None
    assert health.unhealthy_reasons == ("no_controller",)


def test_partitions_are_sorted_by_topic_then_number() -> None:
    snapshot = metadata(
        {
            "zeta": [partition(1, -1, [0], [0]), partition(0, -1, [0], [0])],
            "alpha": [partition(10, -1, [0], [0]), partition(2, -1, [0], [0])],
        }
    )
    health = cluster_health(described(RUNNING3), snapshot, {})
    assert [str(tp) for tp in health.leaderless] == ["alpha-2", "alpha-10", "zeta-0", "zeta-1"]


def test_json_shape() -> None:
    health = cluster_health(described({**RUNNING3, 2: "fenced"}), FULL, {})
    document = json.loads(json.dumps(health.to_json()))
    assert document == {
        "healthy": False,
        "unhealthy_reasons": [
            "brokers_down",
            "leaderless_partitions",
            "under_replicated_partitions",
        ],
        "controller_id": CONTROLLER_ID,
        "brokers": [0, 1, 2],
        "brokers_down": [{"id": 2, "reason": "fenced"}],
        "leaderless_partitions": [{"topic": "solo", "partition": 0}],
        "under_replicated_partitions": [
            {"topic": "orders", "partition": 0},
            {"topic": "orders", "partition": 1},
        ],
    }


@pytest.mark.parametrize(
    ("numbers", "text"),
    [
        ([], ""),
        ([4], "4"),
        ([0, 1], "0, 1"),
        ([2, 0, 1], "0-2"),
        ([0, 1, 2, 3, 7, 9, 10, 11, 12], "0-3, 7, 9-12"),
        ([5, 5, 6], "5, 6"),
    ],
)
def test_partition_ranges(numbers: list[int], text: str) -> None:
    assert partition_ranges(numbers) == text


def test_by_topic_groups_in_order() -> None:
    tps = [TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 3)]
    assert by_topic(tps) == ["a: 0, 1", "b: 3"]


def test_render_healthy() -> None:
    lines = render(cluster_health(described(RUNNING3), FULL, {}))
    assert lines[0].split() == ["Healthy:", "yes"]
    assert lines[1].split() == ["Controller:", str(CONTROLLER_ID)]
    assert lines[2].split() == ["Brokers:", "0,", "1,", "2"]
    assert lines[3].split() == ["Brokers", "down", "(0):", "-"]


def test_render_fits_80_columns_with_long_names_and_many_partitions() -> None:
    long_topic = "t" * 249  # the longest legal name
    health = ClusterHealth(
        controller_id=CONTROLLER_ID,
        brokers=tuple(range(40)),
        brokers_down=(BrokerDown(7, "not answering (cannot connect: connection refused)"),),
        leaderless=tuple(TopicPartition(long_topic, p) for p in range(0, 400, 2)),
        under_replicated=tuple(
            TopicPartition(f"topic-{t}", p) for t in range(30) for p in range(0, 9, 2)
        ),
    )
    lines = render(health)
    assert all(len(line) <= cli_health.WIDTH for line in lines), max(lines, key=len)
    text = "\n".join(lines)
    assert lines[0].startswith("Healthy:")
    assert "no (brokers down, leaderless partitions, under-replicated partitions)" in " ".join(
        text.split()
    )
    assert "7: not answering (cannot connect: connection refused)" in " ".join(text.split())
    assert "Under-replicated partitions (150):" in text
    # Every partition number of the long topic is there, once (its name is wrapped too).
    body = text.split("Leaderless partitions (200):", 1)[1].split("Under-replicated", 1)[0]
    numbers = body.replace("t", "").replace(":", "").replace(",", " ").split()
    assert sorted(int(n) for n in numbers) == list(range(0, 400, 2))
