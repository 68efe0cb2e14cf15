"""ACLs on the Kafka listener (issue 22), against a process cluster of one broker with
authorizer.class.name set to Kafka's StandardAuthorizer: two real clients, confluent-kafka and
kafka-python, connect as User:ANONYMOUS (a PLAINTEXT listener), and `ketch acl` (the real
command, a process of its own, with the cluster secret: a super user) grants them rights.

- Without ACLs, every produce, consume and topic creation is refused with Kafka's error
  (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED; the guards' other answers are
  tests/unit/node/broker/test_authorization.py's).
- Write on the topic: both clients produce (idempotently, KIP-679: no IdempotentWrite needed);
  reading still fails: GROUP_AUTHORIZATION_FAILED without Read on the group, then
  TOPIC_AUTHORIZATION_FAILED with Read on the group but not on the topic, then it works.
- A client trying many APIs it has no rights for (CreateTopics, DeleteTopics, CreatePartitions,
  DescribeConfigs of the broker, IncrementalAlterConfigs, DeleteGroups, the ACL APIs, a
  transactional producer, Metadata of a topic it may not see) gets Kafka's error for each while
  the other client goes on producing and consuming.
- `ketch acl list` and `ketch acl remove` show and take back what was granted.
- On a SASL_PLAINTEXT listener, two PLAIN users: alice may write the topic and bob may read it
  through the group; each is refused what the other may do. bob's ACLs are created through the
  Kafka listener (CreateAcls) by a super.users principal; bob himself may not create them.

The processes run on the wall clock: every wait is bounded; the children are killed by PID
whatever happens.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import confluent_kafka
import confluent_kafka.admin
import kafka
import kafka.admin
import kafka.errors
import pytest
import pytest_asyncio
from confluent_kafka.admin._acl import AclBinding
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.cimpl import NewPartitions, NewTopic

from actors.acl.authorizer import STANDARD_AUTHORIZER
from testkit.probes import create_topic
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import CLUSTER_PROPERTIES
from tests.integration.ketch_process import ketch

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

WAIT_S: Final = 30.0
CLIENT_TIMEOUT_S: Final = 15.0
TOPIC: Final = "payments"
GROUP: Final = "billing"
HIDDEN: Final = "hidden"  # a topic no ACL names
ANONYMOUS: Final = "User:ANONYMOUS"
ANY_ACL: Final = kafka.admin.ACLFilter(
    principal=None,
    host="*",
    operation=kafka.admin.ACLOperation.ANY,
    permission_type=kafka.admin.ACLPermissionType.ANY,
    resource_pattern=kafka.admin.ResourcePatternFilter(
        kafka.admin.ResourceType.ANY, None, kafka.admin.ACLResourcePatternType.ANY
    ),
)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("acls")
    properties = {
        **CLUSTER_PROPERTIES,
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "offsets.topic.num.partitions": 1,
    }
    async with running_cluster(root, properties, brokers=1, kafka=True) as started:
        await started.wait_running(range(1), timeout_s=WAIT_S)
        yield started


async def acl(cluster: ProcessCluster, action: str, *argv: str) -> str:
    secret = str(cluster.layout.secret_file)
    code, out, err = await ketch(cluster, "acl", action, *argv, "--secret-file", secret)
    assert code == 0, (action, argv, out, err)
    return out


async def create_topic_as_admin(cluster: ProcessCluster, topic: str) -> None:
    """CreateTopics with the cluster credential (a super user). Not `ketch topic create`: that
    runs as User:ANONYMOUS, whom the native listener's ACLs refuse as the Kafka listener's do."""
    client = cluster.client(credential=True)
    try:
        await create_topic(
            client,
            cluster.addresses.values(),
            topic,
            partitions=1,
            replication_factor=1,
            configs={},
        )
    finally:
        await client.close()


async def grant(cluster: ProcessCluster, *argv: str, principal: str = ANONYMOUS) -> None:
    """`ketch acl add --allow-principal PRINCIPAL ARGV`, then wait until the broker lists it
    (its ACLs follow the controller's with the next UpdateMetadata)."""
    before = await acl(cluster, "list")
    await acl(cluster, "add", "--allow-principal", principal, *argv)
    deadline = time.monotonic() + WAIT_S
    while (await acl(cluster, "list")).count("principal=") == before.count("principal="):
        assert time.monotonic() < deadline, f"the broker never listed the ACL {argv}"
        await asyncio.sleep(0.05)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sasl_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[ProcessCluster]:
    """The same, with a SASL_PLAINTEXT Kafka listener and PLAIN users: admin (a super user),
    alice and bob."""
    root = tmp_path_factory.mktemp("acls-sasl")
    properties = {
        **CLUSTER_PROPERTIES,
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "offsets.topic.num.partitions": 1,
        "listener.security.protocol.map": (
            "native:PLAINTEXT,kafka:SASL_PLAINTEXT,controller:PLAINTEXT"
        ),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.kafka.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
        ),
        "super.users": "User:admin",
    }
    async with running_cluster(root, properties, brokers=1, kafka=True) as started:
        await started.wait_running(range(1), timeout_s=WAIT_S)
        yield started


# -- the clients -----------------------------------------------------------------------------------


def confluent_common(cluster: ProcessCluster, user: str | None = None) -> dict[str, Any]:
    """A client's settings; with `user`, a SASL/PLAIN login as `user` (password USER-secret)."""
    login = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }
    return {
        "bootstrap.servers": cluster.kafka_bootstrap(),
        "socket.timeout.ms": 5000,
        "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 200,
        "topic.metadata.refresh.interval.ms": 500,
        **(login if user is not None else {}),
    }


def kafka_python_common(cluster: ProcessCluster, user: str | None = None) -> dict[str, Any]:
    login = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": user,
        "sasl_plain_password": f"{user}-secret",
    }
    return {
        "bootstrap_servers": cluster.kafka_bootstrap().split(","),
        "request_timeout_ms": 5000,
        "retry_backoff_ms": 50,
        "metadata_max_age_ms": 500,
        **(login if user is not None else {}),
    }


def confluent_produce(
    cluster: ProcessCluster, value: bytes, *, idempotent: bool, user: str | None = None
) -> str | None:
    """One record to partition 0 of TOPIC: None when acknowledged, else the error's name."""
    producer = confluent_kafka.Producer(
        {
            **confluent_common(cluster, user),
            "enable.idempotence": idempotent,
            "linger.ms": 0,
            "message.timeout.ms": int(CLIENT_TIMEOUT_S * 1000),
        }
    )
    outcome: list[Any] = []
    producer.produce(TOPIC, value=value, partition=0, on_delivery=lambda e, m: outcome.append(e))
    deadline = time.monotonic() + CLIENT_TIMEOUT_S + 5
    while not outcome and time.monotonic() < deadline:
        producer.poll(0.1)
    assert outcome, "no delivery report"
    return None if outcome[0] is None else str(outcome[0].name())


def kafka_python_produce(
    cluster: ProcessCluster, value: bytes, *, idempotent: bool, user: str | None = None
) -> str | None:
    producer = kafka.KafkaProducer(
        **kafka_python_common(cluster, user),
        enable_idempotence=idempotent,
        max_in_flight_requests_per_connection=1,
        max_block_ms=int(CLIENT_TIMEOUT_S * 1000),
    )
    try:
        producer.send(TOPIC, value=value, partition=0).get(timeout=CLIENT_TIMEOUT_S)
    except kafka.errors.KafkaError as error:
        return type(error).__name__
    finally:
        producer.close(timeout=5)
    return None


def confluent_consume(
    cluster: ProcessCluster, count: int, user: str | None = None
) -> list[bytes] | str:
    """TOPIC's first `count` values through GROUP, or the first error's name."""
    consumer = confluent_kafka.Consumer(
        {
            **confluent_common(cluster, user),
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([TOPIC])
        values: list[bytes] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            failure = message.error()
            if failure is not None:
                if failure.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    continue
                return str(failure.name())
            value = message.value()
            assert value is not None
            values.append(value)
        return values
    finally:
        consumer.close()


def kafka_python_consume(
    cluster: ProcessCluster, count: int, user: str | None = None
) -> list[bytes] | str:
    consumer = kafka.KafkaConsumer(
        **kafka_python_common(cluster, user),
        group_id=GROUP,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        consumer.subscribe([TOPIC])
        values: list[bytes] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(values) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                values.extend(r.value for r in records)
        return values
    except kafka.errors.KafkaError as error:
        return type(error).__name__
    finally:
        consumer.close()


def confluent_admin_error(cluster: ProcessCluster, call: Callable[[Any], Any]) -> str | None:
    """What an AdminClient call's future ends with: None, or the error's name."""
    admin = confluent_kafka.admin.AdminClient(confluent_common(cluster))
    future = call(admin)
    try:
        future.result(CLIENT_TIMEOUT_S)
    except confluent_kafka.KafkaException as error:
        return str(error.args[0].name())
    return None


async def eventually(what: str, probe: Callable[[], Any], expected: Any) -> None:
    """`probe()` (in a thread) until it returns `expected`, bounded by WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while True:
        result = await asyncio.to_thread(probe)
        if result == expected:
            return
        assert time.monotonic() < deadline, f"{what}: {result!r}, not {expected!r}"
        await asyncio.sleep(0.1)


# -- the tests -------------------------------------------------------------------------------------


async def test_without_acls_everything_is_refused(cluster: ProcessCluster) -> None:
    created = await asyncio.to_thread(
        confluent_admin_error,
        cluster,
        lambda admin: admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC],
    )
    assert created == "TOPIC_AUTHORIZATION_FAILED"
    # The admin (the cluster secret: a super user on the native listener) creates the topics.
    for topic in (TOPIC, HIDDEN):
        await create_topic_as_admin(cluster, topic)

    assert await asyncio.to_thread(confluent_produce, cluster, b"x", idempotent=False) == (
        "TOPIC_AUTHORIZATION_FAILED"
    )
    assert await asyncio.to_thread(kafka_python_produce, cluster, b"x", idempotent=False) == (
        "TopicAuthorizationFailedError"
    )
    assert await asyncio.to_thread(confluent_consume, cluster, 1) == "GROUP_AUTHORIZATION_FAILED"
    assert await asyncio.to_thread(kafka_python_consume, cluster, 1) == (
        "GroupAuthorizationFailedError"
    )


async def test_write_lets_them_produce_and_reading_needs_read_on_topic_and_group(
    cluster: ProcessCluster,
) -> None:
    await grant(cluster, "--operation", "Write", "--topic", TOPIC)
    # Idempotent producers too (KIP-679: Write on a topic is enough for InitProducerId).
    assert await asyncio.to_thread(confluent_produce, cluster, b"c1", idempotent=True) is None
    assert await asyncio.to_thread(kafka_python_produce, cluster, b"k1", idempotent=True) is None

    assert await asyncio.to_thread(confluent_consume, cluster, 2) == "GROUP_AUTHORIZATION_FAILED"
    await grant(cluster, "--operation", "Read", "--group", GROUP)
    assert await asyncio.to_thread(confluent_consume, cluster, 2) == "TOPIC_AUTHORIZATION_FAILED"
    assert await asyncio.to_thread(kafka_python_consume, cluster, 2) == (
        "TopicAuthorizationFailedError"
    )

    await grant(cluster, "--operation", "Read", "--topic", TOPIC)
    assert await asyncio.to_thread(confluent_consume, cluster, 2) == [b"c1", b"k1"]
    assert await asyncio.to_thread(kafka_python_consume, cluster, 2) == [b"c1", b"k1"]


async def test_an_unauthorized_client_gets_errors_while_another_keeps_working(
    cluster: ProcessCluster,
) -> None:
    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    topic_config = ConfigResource(
        ConfigResource.Type.TOPIC,
        TOPIC,
        incremental_configs=[
            ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    attempts: dict[str, tuple[Callable[[Any], Any], str]] = {
        "CreateTopics": (
            lambda a: a.create_topics([NewTopic("other", 1, 1)])["other"],
            "TOPIC_AUTHORIZATION_FAILED",
        ),
        "DeleteTopics": (lambda a: a.delete_topics([TOPIC])[TOPIC], "TOPIC_AUTHORIZATION_FAILED"),
        "CreatePartitions": (
            lambda a: a.create_partitions([NewPartitions(TOPIC, 2)])[TOPIC],
            "TOPIC_AUTHORIZATION_FAILED",
        ),
        "DescribeConfigs": (
            lambda a: a.describe_configs([broker])[broker],
            "CLUSTER_AUTHORIZATION_FAILED",
        ),
        "IncrementalAlterConfigs": (
            lambda a: a.incremental_alter_configs([topic_config])[topic_config],
            "TOPIC_AUTHORIZATION_FAILED",
        ),
        "DeleteGroups": (
            lambda a: a.delete_consumer_groups([GROUP])[GROUP],
            "GROUP_AUTHORIZATION_FAILED",
        ),
    }

    def refused_everywhere() -> dict[str, str | None]:
        got = {name: confluent_admin_error(cluster, call) for name, (call, _) in attempts.items()}
        producer = confluent_kafka.Producer(
            {**confluent_common(cluster), "transactional.id": "payments-tx"}
        )
        try:
            producer.init_transactions(CLIENT_TIMEOUT_S)
            got["InitProducerId"] = None
        except confluent_kafka.KafkaException as error:
            got["InitProducerId"] = str(error.args[0].name())
        # librdkafka 2.16 reads DescribeAcls' top-level error as an empty answer: kafka-python.
        admin = kafka.admin.KafkaAdminClient(**kafka_python_common(cluster))
        try:
            admin.describe_acls(ANY_ACL)
            got["DescribeAcls"] = None
        except kafka.errors.KafkaError as error:
            got["DescribeAcls"] = type(error).__name__
        finally:
            admin.close()
        visible = confluent_kafka.admin.AdminClient(confluent_common(cluster)).list_topics(
            timeout=CLIENT_TIMEOUT_S
        )
        got["Metadata"] = ",".join(sorted(t for t in visible.topics if not t.startswith("__")))
        return got

    def keeps_working() -> list[bytes] | str:
        for n in range(5):
            failed = kafka_python_produce(cluster, f"more-{n}".encode(), idempotent=True)
            assert failed is None, failed
        return kafka_python_consume(cluster, 7)

    refused, consumed = await asyncio.gather(
        asyncio.to_thread(refused_everywhere), asyncio.to_thread(keeps_working)
    )
    assert refused == {
        **{name: code for name, (_, code) in attempts.items()},
        "InitProducerId": "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "DescribeAcls": "ClusterAuthorizationFailedError",
        "Metadata": TOPIC,  # HIDDEN exists, but no ACL lets this principal describe it
    }
    assert consumed == [b"c1", b"k1", *(f"more-{n}".encode() for n in range(5))]


async def test_acl_list_and_remove(cluster: ProcessCluster) -> None:
    listed = await acl(cluster, "list", "--topic", TOPIC)
    assert f"name={TOPIC}, patternType=LITERAL" in listed
    assert f"(principal={ANONYMOUS}, host=*, operation=WRITE, permissionType=ALLOW)" in listed

    removed = await acl(
        cluster, "remove", "--allow-principal", ANONYMOUS, "--operation", "Write", "--topic", TOPIC
    )
    assert "removed ALLOW User:ANONYMOUS from *: WRITE on TOPIC 'payments'" in removed
    await eventually(
        "a produce after Write was removed",
        lambda: confluent_produce(cluster, b"late", idempotent=False),
        "TOPIC_AUTHORIZATION_FAILED",
    )


async def test_two_sasl_users_with_different_acls(sasl_cluster: ProcessCluster) -> None:
    await create_topic_as_admin(sasl_cluster, TOPIC)
    await grant(sasl_cluster, "--operation", "Write", "--topic", TOPIC, principal="User:alice")
    # bob's ACLs come from admin (super.users) through the Kafka listener's CreateAcls.
    bobs = [
        AclBinding(kind, name, "LITERAL", "User:bob", "*", "READ", "ALLOW")
        for kind, name in (("TOPIC", TOPIC), ("GROUP", GROUP))
    ]

    def create_as(user: str) -> list[str | None]:
        admin = confluent_kafka.admin.AdminClient(confluent_common(sasl_cluster, user))
        outcomes: list[str | None] = []
        for future in admin.create_acls(bobs).values():
            try:
                future.result(CLIENT_TIMEOUT_S)
                outcomes.append(None)
            except confluent_kafka.KafkaException as error:
                outcomes.append(str(error.args[0].name()))
        return outcomes

    assert await asyncio.to_thread(create_as, "bob") == ["CLUSTER_AUTHORIZATION_FAILED"] * 2
    assert await asyncio.to_thread(create_as, "admin") == [None, None]
    deadline = time.monotonic() + WAIT_S
    while "User:bob" not in await acl(sasl_cluster, "list", "--group", GROUP):
        assert time.monotonic() < deadline, "the broker never listed bob's ACLs"
        await asyncio.sleep(0.05)

    def described_as_admin() -> list[tuple[str, str, str]]:
        admin = kafka.admin.KafkaAdminClient(**kafka_python_common(sasl_cluster, "admin"))
        try:
            found, _ = admin.describe_acls(ANY_ACL)
        finally:
            admin.close()
        return sorted(
            (a.principal, a.resource_pattern.resource_name, a.operation.name) for a in found
        )

    assert await asyncio.to_thread(described_as_admin) == [
        ("User:alice", TOPIC, "WRITE"),
        ("User:bob", GROUP, "READ"),
        ("User:bob", TOPIC, "READ"),
    ]

    alice_wrote = await asyncio.to_thread(
        confluent_produce, sasl_cluster, b"from-alice", idempotent=True, user="alice"
    )
    assert alice_wrote is None
    assert await asyncio.to_thread(
        kafka_python_produce, sasl_cluster, b"from-bob", idempotent=False, user="bob"
    ) == ("TopicAuthorizationFailedError")
    assert await asyncio.to_thread(kafka_python_consume, sasl_cluster, 1, "bob") == [b"from-alice"]
    assert await asyncio.to_thread(confluent_consume, sasl_cluster, 1, "alice") == (
        "GROUP_AUTHORIZATION_FAILED"
    )
