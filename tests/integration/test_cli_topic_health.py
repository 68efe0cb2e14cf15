"""`ketch topic create` with the cluster's defaults, `ketch topic delete` and `ketch cluster
health`, each run as the real command (`python -m cli.main`, a process of its own) against a
process cluster: a controller and three brokers (testkit.processes) whose config sets
num.partitions and default.replication.factor.

Issue 23's stumbles, reproduced: `--replication-factor` had no default, and a 300-character
topic name got "illegal topic name" with no reason. Health: exit 0 on the whole cluster, then
after a kill -9 of broker 2, exit 1 naming broker 2 and the under-replicated partitions, and
exit 0 again once it is back.

The processes run on the wall clock: every wait is a bounded poll, and each poll is one `ketch`
run (no sleeps); the children, the cluster's and the commands', are killed by PID whatever
happens.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import pytest
import pytest_asyncio

from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import PROPERTIES
from tests.integration.ketch_process import ketch

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

DEFAULT_PARTITIONS: Final = 2
DEFAULT_REPLICATION_FACTOR: Final = 3
WAIT_S: Final = 30.0
KILLED: Final = 2  # the broker the health test kills; the commands bootstrap from broker 0


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcessCluster]:
    properties = {
        **PROPERTIES,
        "num.partitions": DEFAULT_PARTITIONS,
        "default.replication.factor": DEFAULT_REPLICATION_FACTOR,
    }
    async with running_cluster(tmp_path_factory.mktemp("topic-health"), properties) as started:
        yield started


async def ketch_json(cluster: ProcessCluster, *argv: str) -> tuple[int, Any]:
    code, out, err = await ketch(cluster, *argv, "--json")
    try:
        return code, json.loads(out)
    except ValueError:
        raise AssertionError(
            f"`ketch {' '.join(argv)} --json` (exit {code}): {out!r} {err!r}"
        ) from None


async def poll_health(
    cluster: ProcessCluster, what: str, done: Callable[[int, dict[str, Any]], bool]
) -> dict[str, Any]:
    """`ketch cluster health --json` until `done(exit code, document)`, bounded by WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    seen: list[tuple[int, Any]] = []
    while time.monotonic() < deadline:
        code, document = await ketch_json(cluster, "cluster", "health")
        seen.append((code, document))
        if done(code, document):
            return dict(document)
    raise AssertionError(f"{what}: not within {WAIT_S} s; last answers {seen[-2:]}")


# ---------------------------------------------------------------------------------------------
# topic create / delete


async def test_create_without_counts_takes_the_cluster_defaults(cluster: ProcessCluster) -> None:
    code, out, err = await ketch(cluster, "topic", "create", "site.page_views")
    assert code == 0, err
    assert out.strip() == (
        f"Created topic 'site.page_views': {DEFAULT_PARTITIONS} partition(s), replication factor "
        f"{DEFAULT_REPLICATION_FACTOR} (the cluster's num.partitions and "
        "default.replication.factor)."
    )
    # Kafka's warning for a name with both '.' and '_'; the topic is created all the same.
    assert "warning: topic 'site.page_views' has both '.' and '_'" in err

    code, described = await ketch_json(cluster, "topic", "describe", "site.page_views")
    assert code == 0
    partitions = described["partitions"]
    assert [p["partition"] for p in partitions] == list(range(DEFAULT_PARTITIONS))
    for p in partitions:
        assert len(p["replicas"]) == DEFAULT_REPLICATION_FACTOR, p
        assert p["leader"] in p["replicas"], p

    # One count given, the other from the cluster.
    code, out, err = await ketch(cluster, "topic", "create", "wide", "--partitions", "5")
    assert code == 0, err
    assert "5 partition(s), replication factor 3 (the cluster's default.replication.factor)" in out


async def test_illegal_name_gets_its_reason(cluster: ProcessCluster) -> None:
    code, out, err = await ketch(cluster, "topic", "create", "n" * 300)
    assert code == 2, (out, err)
    assert "illegal topic name" in err
    assert "a topic name has at most 249 characters; this one has 300" in err


async def test_delete_topics(cluster: ProcessCluster) -> None:
    code, _, err = await ketch(cluster, "topic", "create", "doomed", "--partitions", "1")
    assert code == 0, err

    code, out, err = await ketch(cluster, "topic", "delete", "doomed", "never-was")
    assert code == 1, (out, err)  # one of the two was not deleted
    assert "Deleted topic 'doomed'." in out
    assert "cannot delete topic 'never-was': UNKNOWN_TOPIC_OR_PARTITION" in err
    assert "`ketch topic list` shows the topics" in err

    # The command returned once the broker no longer listed it.
    code, out, err = await ketch(cluster, "topic", "describe", "doomed")
    assert code == 1
    assert "unknown topic 'doomed'" in err
    code, listed = await ketch_json(cluster, "topic", "list")
    assert code == 0
    assert "doomed" not in [t["topic"] for t in listed["topics"]]


# ---------------------------------------------------------------------------------------------
# cluster health


def _partitions(document: dict[str, Any], key: str, topic: str) -> list[int]:
    return sorted(p["partition"] for p in document[key] if p["topic"] == topic)


async def test_health_follows_a_kill_and_a_restart(cluster: ProcessCluster) -> None:
    code, _, err = await ketch(cluster, "topic", "create", "watched", "--partitions", "3")
    assert code == 0, err
    healthy = await poll_health(cluster, "healthy", lambda code, doc: code == 0)
    assert healthy["healthy"] is True
    assert healthy["brokers"] == [0, 1, 2]
    assert healthy["brokers_down"] == []
    assert isinstance(healthy["controller_id"], int)
    code, out, err = await ketch(cluster, "cluster", "health")
    assert code == 0, err
    assert out.splitlines()[0].split() == ["Healthy:", "yes"]

    await cluster.broker(KILLED).kill()
    try:

        def settled(code: int, doc: dict[str, Any]) -> bool:
            # Every partition of `watched` has a replica on the killed broker: once the
            # leaders it held are elected elsewhere, all three are under-replicated.
            return (
                code == 1
                and [b["id"] for b in doc["brokers_down"]] == [KILLED]
                and doc["leaderless_partitions"] == []
                and _partitions(doc, "under_replicated_partitions", "watched") == [0, 1, 2]
            )

        unhealthy = await poll_health(cluster, f"broker {KILLED} down", settled)
        assert unhealthy["healthy"] is False
        assert "brokers_down" in unhealthy["unhealthy_reasons"]
        assert "under_replicated_partitions" in unhealthy["unhealthy_reasons"]

        code, out, err = await ketch(cluster, "cluster", "health")
        assert code == 1, err
        lines = out.splitlines()
        assert all(len(line) <= 80 for line in lines), out
        assert lines[0].startswith("Healthy:")
        assert " no (brokers down" in lines[0]
        down = next(line for line in lines if line.startswith("Brokers down (1):"))
        assert f" {KILLED}: " in down
        assert "watched: 0-2" in out
    finally:
        await cluster.broker(KILLED).start()
        await cluster.wait_running([KILLED], timeout_s=WAIT_S)

    # Back, caught up and in every ISR again: healthy, exit 0.
    await poll_health(cluster, f"broker {KILLED} back in sync", lambda code, doc: code == 0)
