"""TLS on every listener of a process cluster (listener.security.protocol.map native:SSL,
kafka:SSL, controller:SSL; PEM files from cli/up/certificates.py): confluent-kafka and
kafka-python produce and consume over TLS; a topic of replication factor 2 with acks=all and
min.insync.replicas=2 replicates over the TLS inter-broker listener, which requires client
certificates (the nodes present their keystores); brokers register with the controller over
TLS; a client checking the host name against a certificate for another name is refused; garbage
bytes and a plaintext Kafka request on the TLS port are refused while the broker keeps serving
another client. The random garbage comes from a seeded PRNG, printed on failure."""

from __future__ import annotations

import asyncio
import random
import ssl
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cli.up.certificates import CertificateAuthority, write_private
from client.client import Client
from runtime.clock import SystemClock
from runtime.config import Value
from runtime.net.tcp import TcpTransport
from runtime.net.tls import SslConfig
from runtime.net.transport import Address
from testkit.probes import broker_states, wait_until
from testkit.processes import POLL_CLIENT_CONFIG, READY_TIMEOUT_S, ProcessCluster
from tests.integration.kafka_drivers import ConfluentDriver, KafkaPythonDriver, Sent

SEED = 22
CLOSE_TIMEOUT_S = 15.0  # above the broker's 10 s TLS handshake timeout


class TlsConfluentDriver(ConfluentDriver):
    def __init__(self, bootstrap: str, ca: Path) -> None:
        super().__init__(bootstrap)
        self.ca = ca

    def _common(self) -> dict[str, Any]:
        return {**super()._common(), "security.protocol": "SSL", "ssl.ca.location": str(self.ca)}


class TlsKafkaPythonDriver(KafkaPythonDriver):
    def __init__(self, bootstrap: str, ca: Path) -> None:
        super().__init__(bootstrap)
        self.ca = ca

    def _common(self) -> dict[str, Any]:
        return {**super()._common(), "security_protocol": "SSL", "ssl_cafile": str(self.ca)}


def _tls_client(cluster: ProcessCluster, ca: Path) -> Client:
    """A ketch client of the native listeners, with the nodes' certificate as its own (the
    native listener requires one)."""
    keystore = ca.with_name("node.pem")
    context = SslConfig.from_properties(
        {"ssl.truststore.location": str(ca), "ssl.keystore.location": str(keystore)}
    ).client_context()
    return Client(
        list(cluster.addresses.values()),
        transport=TcpTransport(ssl_client=context),
        clock=SystemClock(),
        config=POLL_CLIENT_CONFIG,
        client_id="tls-test",
    )


@pytest.fixture
async def tls_cluster(tmp_path: Path) -> AsyncIterator[tuple[ProcessCluster, Path]]:
    ca = CertificateAuthority()
    truststore = tmp_path / "ca.pem"
    truststore.write_bytes(ca.certificate_pem)
    keystore = tmp_path / "node.pem"
    # One keystore for every node: the nodes share one config file. Only 127.0.0.1 is named.
    write_private(keystore, ca.issue("ketch-node", ["127.0.0.1"]).keystore_pem)
    properties: dict[str, Value] = {
        "listener.security.protocol.map": "native:SSL,kafka:SSL,controller:SSL",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.location": str(truststore),
        "min.insync.replicas": 2,
        "listener.name.native.ssl.client.auth": "required",
    }
    cluster = ProcessCluster(tmp_path / "cluster", 2, properties, kafka=True)
    try:
        # Not cluster.start(): its readiness probe speaks plaintext to the native listeners.
        await cluster.controller.start()
        for broker_id in range(cluster.brokers):
            await cluster.broker(broker_id).start()
        client = _tls_client(cluster, truststore)
        try:

            async def running() -> bool:
                for child in cluster.children.values():
                    assert not child.exited, f"{child.name} exited:\n{cluster.logs()}"
                states = await broker_states(client, cluster.addresses.values())
                return all(states.get(b) == "running" for b in range(cluster.brokers))

            await wait_until(running, "brokers running over TLS", timeout_s=READY_TIMEOUT_S)
        finally:
            await client.close()
        yield cluster, truststore
    finally:
        try:
            await cluster.kill_all()
        finally:
            cluster.kill_all_now()


async def _closed_by_peer(address: Address, payload: bytes) -> bytes:
    """Send `payload` on a plain TCP connection; what the peer sent back before it closed."""
    reader, writer = await asyncio.open_connection(address.host, address.port)
    try:
        writer.write(payload)
        await writer.drain()
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            return await reader.read()  # until EOF: the broker must close it
    except ConnectionResetError:
        return b""
    finally:
        writer.close()


def _plaintext_api_versions() -> bytes:
    """A Kafka ApiVersions v0 request frame, as a plaintext client would send it."""
    client_id = b"plain"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


async def test_kafka_clients_and_replication_over_tls(
    tls_cluster: tuple[ProcessCluster, Path],
) -> None:
    cluster, ca = tls_cluster
    bootstrap = cluster.kafka_bootstrap()
    confluent = TlsConfluentDriver(bootstrap, ca)
    await confluent.create_topic("tls-topic", 1, 2, {})
    sent = [Sent(0, b"k%d" % i, b"confluent-%d" % i) for i in range(5)]
    # acks=all with min.insync.replicas=2: each ack needs the follower's fetch over TLS.
    acked = await confluent.produce("tls-topic", sent, acks="all", compression="none")
    assert [offset for _, offset in acked] == list(range(5))
    python = TlsKafkaPythonDriver(bootstrap, ca)
    more = [Sent(0, None, b"kafka-python-%d" % i) for i in range(3)]
    acked = await python.produce("tls-topic", more, acks="all", compression="none")
    assert [offset for _, offset in acked] == [5, 6, 7]
    for driver in (confluent, python):
        read = await driver.consume("tls-topic", {0: 0}, 8)
        assert [r.value for r in read] == [s.value for s in [*sent, *more]], driver.name


async def test_hostname_verification_and_hostile_bytes(
    tls_cluster: tuple[ProcessCluster, Path],
) -> None:
    cluster, ca = tls_cluster
    kafka_port = cluster.kafka_addresses[0]
    verifying = SslConfig.from_properties({"ssl.truststore.location": str(ca)}).client_context()
    # The certificate names 127.0.0.1 only: a client that dials another name refuses it.
    wrong_name = TcpTransport(ssl_client=verifying, server_hostname="broker.example")
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        await wrong_name.connect(kafka_port, timeout_s=5.0)
    # A client served before, during and after the hostile connections.
    client = _tls_client(cluster, ca)
    try:
        assert (await broker_states(client, cluster.addresses.values())).get(0) == "running"
        rng = random.Random(SEED)
        garbage = bytes(rng.randrange(256) for _ in range(512))
        replies = await asyncio.gather(
            _closed_by_peer(kafka_port, garbage),
            _closed_by_peer(kafka_port, _plaintext_api_versions()),
            _closed_by_peer(cluster.addresses[0], garbage),
        )
        # At most a TLS alert comes back (content type 21), never a Kafka response.
        for reply in replies:
            assert reply == b"" or reply[0] == 21, (SEED, reply[:16])
        assert (await broker_states(client, cluster.addresses.values())).get(0) == "running"
    finally:
        await client.close()
    python = TlsKafkaPythonDriver(cluster.kafka_bootstrap([0]), ca)
    await python.create_topic("after-garbage", 1, 1, {"min.insync.replicas": "1"})
    acked = await python.produce(
        "after-garbage", [Sent(0, None, b"v")], acks="1", compression="none"
    )
    assert acked == [(0, 0)]
