"""SASL on the Kafka listener with real clients and hostile ones, against broker processes.

One broker (and its controller) whose Kafka listener is SASL_PLAINTEXT with PLAIN (a JAAS user)
and SCRAM-SHA-256/512 (a user made by `ketch user create`, through the native listener from
loopback). confluent-kafka and kafka-python each produce and consume with all three mechanisms;
a wrong password is refused, and so is a mechanism `ketch user delete` took away. Then raw
sockets: garbage SaslAuthenticate bytes, a request before
authentication, a message out of order and an oversize pre-authentication frame each get the
connection closed; 200 wrong-password attempts leave the broker's RSS within a few MiB and a
good client is served afterwards.

The processes run on the wall clock: every wait is a bounded poll of a condition; the children
are killed by PID whatever happens (testkit.processes.running_cluster).
"""

from __future__ import annotations

import asyncio
import io
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import confluent_kafka
import confluent_kafka.admin
import kafka
import kafka.errors
import pytest
import pytest_asyncio
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from node.layout import broker_node
from testkit.probes import wait_until
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import PROPERTIES
from tests.integration.kafka_drivers import ConfluentDriver, KafkaPythonDriver, Sent
from tests.integration.ketch_process import ketch
from wire.kafka.codec import schema
from wire.messages import ApiKey

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

WAIT_S: Final = 30.0
PLAIN_USER, PLAIN_PASSWORD = "alice", "alice-secret"
SCRAM_USER, SCRAM_PASSWORD = "bob", "bob-secret"
JAAS: Final = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'user_{PLAIN_USER}="{PLAIN_PASSWORD}";'
)
SASL_PROPERTIES: Final = {
    **PROPERTIES,
    "listener.security.protocol.map": "kafka:SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.kafka.plain.sasl.jaas.config": JAAS,
}
TOPIC: Final = "sasl-topic"
MECHANISMS: Final = (
    ("PLAIN", PLAIN_USER, PLAIN_PASSWORD),
    ("SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD),
    ("SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD),
)
RSS_GROWTH_LIMIT_BYTES: Final = 8 * 1024 * 1024


class SaslConfluent(ConfluentDriver):
    def __init__(self, bootstrap: str, mechanism: str, user: str, password: str) -> None:
        super().__init__(bootstrap)
        self.sasl = {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism,
            "sasl.username": user,
            "sasl.password": password,
        }

    def _common(self) -> dict[str, Any]:
        return {**super()._common(), **self.sasl}


class SaslKafkaPython(KafkaPythonDriver):
    def __init__(self, bootstrap: str, mechanism: str, user: str, password: str) -> None:
        super().__init__(bootstrap)
        self.sasl = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism,
            "sasl_plain_username": user,
            "sasl_plain_password": password,
        }

    def _common(self) -> dict[str, Any]:
        return {**super()._common(), **self.sasl}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("sasl")
    async with running_cluster(root, SASL_PROPERTIES, brokers=1, kafka=True) as started:
        await started.wait_running(range(1), timeout_s=WAIT_S)
        password_file = root / "bob.password"
        password_file.write_text(SCRAM_PASSWORD + "\n")
        code, out, err = await ketch(
            started,
            "user",
            "create",
            SCRAM_USER,
            "--mechanism",
            "SCRAM-SHA-256",
            "--mechanism",
            "SCRAM-SHA-512",
            "--iterations",
            "4096",
            "--password-file",
            str(password_file),
        )
        assert code == 0, (out, err)

        async def listed() -> bool:
            code, out, _ = await ketch(started, "user", "list")
            return code == 0 and out.count(SCRAM_USER) == 2

        await wait_until(listed, "bob's credentials on the broker", timeout_s=WAIT_S)
        await SaslConfluent(started.kafka_bootstrap(), *MECHANISMS[0]).create_topic(TOPIC, 1, 1, {})
        yield started


async def test_user_list_shows_mechanisms_and_iterations(cluster: ProcessCluster) -> None:
    code, out, err = await ketch(cluster, "user", "list")
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()[1:]]
    assert rows == [
        [SCRAM_USER, "SCRAM-SHA-256", "4096"],
        [SCRAM_USER, "SCRAM-SHA-512", "4096"],
    ]
    assert SCRAM_PASSWORD not in out


@pytest.mark.parametrize("driver_class", [SaslConfluent, SaslKafkaPython])
@pytest.mark.parametrize(("mechanism", "user", "password"), MECHANISMS)
async def test_clients_produce_and_consume(
    cluster: ProcessCluster, driver_class: type[Any], mechanism: str, user: str, password: str
) -> None:
    driver = driver_class(cluster.kafka_bootstrap(), mechanism, user, password)
    value = f"{driver.name} {mechanism}".encode()
    [(partition, offset)] = await driver.produce(
        TOPIC, [Sent(0, b"k", value)], acks="all", compression="none"
    )
    [read] = await driver.consume(TOPIC, {partition: offset}, 1)
    assert read.value == value


async def test_wrong_password_is_refused(cluster: ProcessCluster) -> None:
    for mechanism, user, _ in MECHANISMS:
        errors: list[Any] = []
        config = {
            **SaslConfluent(cluster.kafka_bootstrap(), mechanism, user, "wrong")._common(),
            "reconnect.backoff.ms": 500,
            "reconnect.backoff.max.ms": 1000,
            "error_cb": errors.append,
        }
        admin = confluent_kafka.admin.AdminClient(config)
        with pytest.raises(confluent_kafka.KafkaException):
            await asyncio.to_thread(admin.list_topics, timeout=3)
        await asyncio.to_thread(admin.poll, 1)  # error_cb runs on poll
        codes = {e.code() for e in errors}
        assert confluent_kafka.KafkaError._AUTHENTICATION in codes, (mechanism, errors)
        expected = "Invalid username or password" if mechanism == "PLAIN" else mechanism
        assert any(expected in e.str() for e in errors), errors


# -- raw connections ---------------------------------------------------------------------------


def encode_request(api_key: int, version: int, correlation_id: int, **fields: Any) -> bytes:
    request_cls = schema(api_key, version, EntityType.request)
    header_cls = request_cls.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_cls)(
        buffer,
        header_cls(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id="hostile",
        ),
    )
    entity_writer(request_cls)(buffer, request_cls(**fields))
    payload = buffer.getvalue()
    return struct.pack(">i", len(payload)) + payload


class Raw:
    """A blocking Kafka connection for the hostile tests (run in a worker thread)."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive(self, api_key: int, version: int) -> Any:
        """The next response's body; None when the broker closed the connection instead."""
        size = self._exactly(4)
        if size is None:
            return None
        payload = self._exactly(struct.unpack(">i", size)[0])
        assert payload is not None
        response_cls = schema(api_key, version, EntityType.response)
        _, used = entity_reader(response_cls.__header_schema__)(payload, 0)
        body, _ = entity_reader(response_cls)(payload, used)
        return body

    def _exactly(self, count: int) -> bytes | None:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def closed(self) -> bool:
        return self._exactly(1) is None

    def handshake(self, mechanism: str) -> Any:
        self.send(encode_request(ApiKey.SASL_HANDSHAKE, 1, 1, mechanism=mechanism))
        return self.receive(ApiKey.SASL_HANDSHAKE, 1)

    def authenticate(self, token: bytes) -> Any:
        self.send(encode_request(ApiKey.SASL_AUTHENTICATE, 2, 2, auth_bytes=token))
        return self.receive(ApiKey.SASL_AUTHENTICATE, 2)


def refused_attempt(address: str, password: str) -> tuple[int, bool]:
    raw = Raw(address)
    try:
        raw.handshake("PLAIN")
        answer = raw.authenticate(f"\x00{PLAIN_USER}\x00{password}".encode())
        return int(answer.error_code), raw.closed()
    finally:
        raw.close()


def garbage_scram(raw: Raw) -> str:
    raw.handshake("SCRAM-SHA-256")
    answer = raw.authenticate(b"\xff\x00garbage")
    return f"garbage {int(answer.error_code)} {raw.closed()}"


def request_before_authentication(raw: Raw) -> str:
    raw.send(
        encode_request(
            ApiKey.METADATA,
            9,
            1,
            topics=(),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    )
    return f"early {raw.closed()}"


def authenticate_before_handshake(raw: Raw) -> str:
    raw.send(encode_request(ApiKey.SASL_AUTHENTICATE, 2, 2, auth_bytes=b"x"))
    return f"order {raw.closed()}"


def oversize_frame(raw: Raw) -> str:
    # Only the length of a frame over sasl.server.max.receive.size: closed before any body.
    raw.send(struct.pack(">i", 524288 + 1))
    return f"oversize {raw.closed()}"


def hostile_sessions(address: str) -> list[str]:
    """Each hostile session's outcome, as text to compare."""
    outcomes = []
    for session in (
        garbage_scram,
        request_before_authentication,
        authenticate_before_handshake,
        oversize_frame,
    ):
        raw = Raw(address)
        try:
            outcomes.append(session(raw))
        finally:
            raw.close()
    return outcomes


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_hostile_clients_are_closed_and_cost_no_memory(cluster: ProcessCluster) -> None:
    address = str(cluster.kafka_addresses[0])
    outcomes = await asyncio.to_thread(hostile_sessions, address)
    assert outcomes == ["garbage 58 True", "early True", "order True", "oversize True"]
    pid = cluster.broker(0).pid
    assert pid is not None
    for _ in range(20):  # warm-up: buffers and caches a first burst grows once
        await asyncio.to_thread(refused_attempt, address, "wrong")
    before = rss_bytes(pid)
    for attempt in range(200):
        code, closed = await asyncio.to_thread(refused_attempt, address, f"wrong-{attempt}")
        assert (code, closed) == (58, True), attempt
    growth = rss_bytes(pid) - before
    assert growth < RSS_GROWTH_LIMIT_BYTES, f"RSS grew {growth} bytes over 200 refused logins"
    driver = SaslConfluent(cluster.kafka_bootstrap(), *MECHANISMS[1])
    [(partition, offset)] = await driver.produce(
        TOPIC, [Sent(0, None, b"still served")], acks="all", compression="none"
    )
    [read] = await driver.consume(TOPIC, {partition: offset}, 1)
    assert read.value == b"still served"


async def test_kafka_python_wrong_password_is_refused(cluster: ProcessCluster) -> None:
    def connect() -> None:
        driver = SaslKafkaPython(
            cluster.kafka_bootstrap(), "SCRAM-SHA-256", SCRAM_USER, "not-bobs-password"
        )
        # bootstrap_timeout_ms: kafka-python keeps retrying a refused login until it passes.
        consumer = kafka.KafkaConsumer(**driver._common(), group_id=None, bootstrap_timeout_ms=3000)
        consumer.close()

    with pytest.raises(kafka.errors.KafkaError):
        await asyncio.to_thread(connect)
    # Refused for its password, not for anything else: the broker logged why.
    log = cluster.log_path(broker_node(0)).read_text(errors="replace")
    assert f"with SCRAM-SHA-256 (user '{SCRAM_USER}'): invalid client proof" in log


async def test_user_delete_removes_one_mechanism(cluster: ProcessCluster) -> None:
    # Last in this module: it takes SCRAM-SHA-512 away from bob.
    code, out, err = await ketch(
        cluster, "user", "delete", SCRAM_USER, "--mechanism", "SCRAM-SHA-512"
    )
    assert code == 0, (out, err)

    async def one_left() -> bool:
        code, out, _ = await ketch(cluster, "user", "list")
        return code == 0 and out.count(SCRAM_USER) == 1

    await wait_until(one_left, "bob's SCRAM-SHA-512 credential gone", timeout_s=WAIT_S)
    _, out, _ = await ketch(cluster, "user", "list")
    assert "SCRAM-SHA-256" in out
    assert "SCRAM-SHA-512" not in out
    errors: list[Any] = []
    config = {
        **SaslConfluent(cluster.kafka_bootstrap(), *MECHANISMS[2])._common(),
        "reconnect.backoff.ms": 500,
        "reconnect.backoff.max.ms": 1000,
        "error_cb": errors.append,
    }
    admin = confluent_kafka.admin.AdminClient(config)
    with pytest.raises(confluent_kafka.KafkaException):
        await asyncio.to_thread(admin.list_topics, timeout=3)
    await asyncio.to_thread(admin.poll, 1)
    assert confluent_kafka.KafkaError._AUTHENTICATION in {e.code() for e in errors}
