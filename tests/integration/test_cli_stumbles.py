"""Two of issue 23's stumbles, reproduced through the command line against a real `ketch up`.

- "After a restart every partition leader sits on one broker until the 5-minute rebalance": a
  broker stopped with `ketch cluster shutdown-broker` and started again gets the partitions it
  is the preferred (first) replica of back within seconds, once it has caught up and rejoined
  their ISR (actors/controller/preferred_leaders.py, leader.imbalance.election.delay.ms).
- "Producing to a partition with no leader waits 30 s and then says 'not acknowledged within
  delivery.timeout.ms' with no reason": `ketch produce` to a partition whose only replica is
  down exits 1 naming LEADER_NOT_AVAILABLE, the reason the producer met (client/sender.py), and
  what to do. The command gives up after `--delivery-timeout-ms` (5 s here; 30 s by default),
  and the test bounds it at PRODUCE_WAIT_S.

Each test has its own `ketch up` in a temporary directory on free ports, started and killed by
PID through tests/integration/test_readme.py's `up` fixture; every `ketch` command runs as a
subprocess that finds the cluster through `./data/cluster.json`, as a user's does. Waits for
the cluster to settle are bounded polls of `ketch topic describe --json`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any, Final

import pytest

from tests.integration.test_readme import BIN, Up, run, up  # noqa: F401  (up: the fixture)

pytestmark = pytest.mark.slow

Partition = dict[str, Any]  # one entry of `ketch topic describe --json`'s "partitions"

RESTARTED: Final = 1  # the broker the first test stops and starts again
SETTLE_S: Final = 15.0  # metadata reaching the broker that answers describe
# The controller elects within leader.imbalance.election.delay.ms (1 s) of the ISR rejoin; the
# restarted broker first has to register and catch up.
RESTORE_S: Final = 30.0
# The record's delivery.timeout.ms, and a bound on the whole command (start-up and exit too).
DELIVERY_TIMEOUT_MS: Final = 5_000
PRODUCE_WAIT_S: Final = 30.0
POLL_INTERVAL_S: Final = 0.2


def ketch(command: str, cluster: Up) -> str:
    """Run `ketch COMMAND` in the cluster's directory; its stdout, once it exited 0."""
    done = run(f"ketch {command}", cluster.cwd)
    assert done.returncode == 0, (
        f"ketch {command} exited {done.returncode}\nstdout:\n{done.stdout}\n"
        f"stderr:\n{done.stderr}\nketch up:\n{cluster.log()}"
    )
    return done.stdout


def describe(cluster: Up, topic: str) -> list[Partition]:
    partitions: list[Partition] = json.loads(ketch(f"topic describe {topic} --json", cluster))[
        "partitions"
    ]
    return sorted(partitions, key=lambda p: int(p["partition"]))


def wait_for(
    cluster: Up,
    topic: str,
    condition: Callable[[list[Partition]], bool],
    what: str,
    timeout_s: float,
) -> list[Partition]:
    """`topic`'s partitions once `condition` holds of them; fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition(partitions := describe(cluster, topic)):
        assert time.monotonic() < deadline, (
            f"not {what} within {timeout_s} s: {leaders(partitions)}\nketch up:\n{cluster.log()}"
        )
        time.sleep(POLL_INTERVAL_S)
    return partitions


def leaders(partitions: list[Partition]) -> dict[int, tuple[int, list[int]]]:
    """partition -> (leader, ISR), for failure messages."""
    return {p["partition"]: (p["leader"], p["isr"]) for p in partitions}


def test_preferred_leaders_return_soon_after_a_broker_restarts(up: Up) -> None:  # noqa: F811
    topic = "spread"
    ketch(f"topic create {topic} --partitions 6 --replication-factor 3", up)
    partitions = wait_for(
        up,
        topic,
        lambda ps: all(p["leader"] == p["replicas"][0] and len(p["isr"]) == 3 for p in ps),
        "led by their preferred replicas with full ISRs",
        SETTLE_S,
    )
    preferred = {p["partition"]: p["replicas"][0] for p in partitions}
    assert len(preferred) == 6
    assert RESTARTED in preferred.values(), preferred  # else the test could not tell

    def without_restarted(ps: list[Partition]) -> bool:
        return all(p["leader"] not in (RESTARTED, -1) and RESTARTED not in p["isr"] for p in ps)

    ketch(f"cluster shutdown-broker {RESTARTED}", up)
    wait_for(
        up,
        topic,
        without_restarted,
        f"led by the live brokers, broker {RESTARTED} out of every ISR",
        SETTLE_S,
    )
    # Records the restarted broker must fetch before it is back in the ISRs (and may lead).
    ketch(f"produce {topic} --count 600 --size 100", up)

    ketch(f"cluster start-broker {RESTARTED}", up)
    up.remember_pids()  # the restarted broker has a new pid
    restarted_at = time.monotonic()
    partitions = wait_for(
        up,
        topic,
        lambda ps: all(p["leader"] == preferred[p["partition"]] for p in ps),
        "led by their preferred replicas again",
        RESTORE_S,
    )
    print(f"preferred leaders restored {time.monotonic() - restarted_at:.1f} s after start-broker")
    led = [p for p in partitions if p["leader"] == RESTARTED]
    assert led, leaders(partitions)  # spread: the restarted broker leads again
    for partition in led:  # elected only once back in the ISR
        assert RESTARTED in partition["isr"], leaders(partitions)


def test_producing_to_a_leaderless_partition_says_why(up: Up) -> None:  # noqa: F811
    topic = "lonely"
    ketch(f"topic create {topic} --partitions 1 --replication-factor 1", up)
    [partition] = wait_for(up, topic, lambda ps: ps[0]["leader"] >= 0, "led", SETTLE_S)
    only_replica = partition["leader"]
    ketch(f"cluster shutdown-broker {only_replica}", up)
    # Its only replica is down: nobody can lead it (the describe may lag the shutdown briefly).
    wait_for(up, topic, lambda ps: ps[0]["leader"] == -1, "leaderless", SETTLE_S)

    env = {k: v for k, v in os.environ.items() if k != "KETCH_BOOTSTRAP"}  # ./data/cluster.json
    started = time.monotonic()
    done = subprocess.run(
        [str(BIN / "ketch"), "produce", topic, "--delivery-timeout-ms", str(DELIVERY_TIMEOUT_MS)],
        input="hello\n",
        cwd=up.cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=PRODUCE_WAIT_S,  # kills the command (its own child) if it hangs
        check=False,
    )
    print(f"ketch produce gave up after {time.monotonic() - started:.1f} s:\n{done.stderr}")
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "last error: LEADER_NOT_AVAILABLE" in done.stderr, done.stderr  # the reason
    assert f"see `ketch topic describe {topic}`" in done.stderr, done.stderr  # what to do
    assert "0 of 1 record(s) acknowledged" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
