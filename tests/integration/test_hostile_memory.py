"""Memory under hostile clients, on real processes: connections that announce near-maximum
frames and send them slowly must not make a node hold all of those bytes (queued.max.request.bytes,
runtime/net/request_pool.py), on the broker's Kafka and native ports and the controller's port,
and the node keeps serving others meanwhile and afterwards.

Before the pool, 8 connections announcing 90 MiB each took a broker from 70 MB to 830 MB. The
attack here sends 40 MiB into each of 8 such frames (320 MiB in all if the node read everything);
with the default pool (256 MiB) only two frames fit, so the node reads at most 80 MiB of them.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import pytest

from runtime.net.transport import Address
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import PROPERTIES

CONNECTIONS: Final = 8
ANNOUNCED: Final = 90 * 1024 * 1024
SENT_PER_CONNECTION: Final = 40 * 1024 * 1024
ATTACK_S: Final = 4.0
# Growth allowed: two admitted frames' 80 MiB, a receive buffer per connection, and the rest of
# a node's working set moving; reading every byte would add 320 MiB.
MAX_GROWTH_BYTES: Final = 160 * 1024 * 1024


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


@contextmanager
def _attack(address: Address) -> Iterator[list[int]]:
    """8 connections, each announcing a 90 MiB frame and sending into it until ATTACK_S has
    passed; yields the bytes each managed to send (the node stopped reading the rest)."""
    sent = [0] * CONNECTIONS
    sockets = [socket.create_connection((address.host, address.port), timeout=2.0)]
    sockets += [
        socket.create_connection((address.host, address.port), timeout=2.0)
        for _ in range(CONNECTIONS - 1)
    ]
    deadline = time.monotonic() + ATTACK_S
    chunk = b"\x00" * (1024 * 1024)

    def push(index: int, sock: socket.socket) -> None:
        sock.settimeout(0.2)
        try:
            sock.sendall(ANNOUNCED.to_bytes(4, "big"))
            while sent[index] < SENT_PER_CONNECTION and time.monotonic() < deadline:
                try:
                    sent[index] += sock.send(chunk)
                except TimeoutError:
                    continue  # the node is not reading this one: keep trying until the deadline
        except OSError:
            return  # the node closed it: fine, as long as it is not holding the bytes

    threads = [
        threading.Thread(target=push, args=(i, s), daemon=True) for i, s in enumerate(sockets)
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join(ATTACK_S + 5)
        yield sent
    finally:
        for sock in sockets:
            sock.close()


def _still_serves(cluster: ProcessCluster) -> None:
    """A Kafka client's metadata answered within seconds while and after the attack."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    metadata = admin.list_topics(timeout=10)
    assert metadata.brokers, "no brokers in the metadata answer"


@pytest.mark.timeout(120)
async def test_slow_huge_frames_do_not_balloon_any_node(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, PROPERTIES, brokers=1, kafka=True) as cluster:
        broker_pid, controller_pid = cluster.broker(0).pid, cluster.controller.pid
        assert broker_pid is not None
        assert controller_pid is not None
        targets = {
            "broker Kafka port": (cluster.kafka_addresses[0], broker_pid),
            "broker native port": (cluster.addresses[0], broker_pid),
            "controller port": (cluster.controller_address, controller_pid),
        }
        for name, (address, pid) in targets.items():
            before = _rss_bytes(pid)
            with _attack(address) as sent:
                during = _rss_bytes(pid)
                _still_serves(cluster)
            growth = during - before
            assert growth < MAX_GROWTH_BYTES, (
                f"{name}: RSS grew by {growth / 2**20:.0f} MiB with {sum(sent) / 2**20:.0f} MiB "
                f"sent over {CONNECTIONS} connections (sent per connection: {sent})"
            )
            # The node did not just refuse everything: two frames' worth got in.
            assert sum(sent) >= 2 * SENT_PER_CONNECTION, (name, sent)
        _still_serves(cluster)
