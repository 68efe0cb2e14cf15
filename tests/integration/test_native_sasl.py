"""Users and ACLs on the native listener (issue 22), against two broker processes whose native
listener is SASL_PLAINTEXT (PLAIN users alice and bob from sasl.jaas.config) under Kafka's
StandardAuthorizer: the real `ketch` command with `--command-config FILE`.

- alice, with Write and Read on the topic, produces and consumes through the CLI.
- bob, logged in but without ACLs, is refused TOPIC_AUTHORIZATION_FAILED with the CLI's one-line
  reason; a wrong password is an authentication error (exit 1, the broker's message); no
  `--command-config` at all is told the listener wants a login.
- The cluster keeps running on the cluster credential: the controller reaches the brokers, and
  the topic's follower replicates (min.insync.replicas=2, so alice's acks=all produce succeeds
  only once the follower's fetcher, a cluster member, has the records).

The processes run on the wall clock: every wait is bounded; the children are killed by PID
whatever happens.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest
import pytest_asyncio

from actors.acl.authorizer import STANDARD_AUTHORIZER
from testkit.probes import create_topic, wait_fully_replicated
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import CLUSTER_PROPERTIES
from tests.integration.ketch_process import ketch

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

WAIT_S: Final = 30.0
TOPIC: Final = "ledger"
RECORDS: Final = 5
PROPERTIES: Final = {
    **CLUSTER_PROPERTIES,
    "offsets.topic.num.partitions": 1,
    "authorizer.class.name": STANDARD_AUTHORIZER,
    "listener.security.protocol.map": "native:SASL_PLAINTEXT,controller:PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "sasl.jaas.config": (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_alice="alice-secret" user_bob="bob-secret";'
    ),
}


def login_file(root: Path, user: str, password: str) -> str:
    path = root / f"{user}-{password}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=PLAIN\n"
        f"sasl.username={user}\n"
        f"sasl.password={password}\n"
    )
    return str(path)


async def acl(cluster: ProcessCluster, action: str, *argv: str) -> str:
    secret = str(cluster.layout.secret_file)
    code, out, err = await ketch(cluster, "acl", action, *argv, "--secret-file", secret)
    assert code == 0, (action, argv, out, err)
    return out


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("native-sasl")
    async with running_cluster(root, PROPERTIES, brokers=2) as started:
        await started.wait_running(range(2), timeout_s=WAIT_S)
        admin = started.client(credential=True)
        try:
            addresses = list(started.addresses.values())
            await create_topic(
                admin,
                addresses,
                TOPIC,
                partitions=1,
                replication_factor=2,
                configs={"min.insync.replicas": "2"},
            )
            await wait_fully_replicated(admin, addresses, TOPIC, 1, timeout_s=WAIT_S)
        finally:
            await admin.close()
        for operation in ("Write", "Read"):
            await acl(
                started, "add", "--allow-principal", "User:alice", "--operation", operation,
                "--topic", TOPIC,
            )  # fmt: skip
        # The brokers apply the controller's ACLs with the next UpdateMetadata.
        deadline = time.monotonic() + WAIT_S
        while (await acl(started, "list")).count("principal=") < 2:
            assert time.monotonic() < deadline, "the broker never listed alice's ACLs"
            await asyncio.sleep(0.05)
        yield started


async def test_alice_produces_and_consumes(cluster: ProcessCluster) -> None:
    alice = login_file(cluster.root, "alice", "alice-secret")
    code, out, err = await ketch(
        cluster, "produce", TOPIC, "--count", str(RECORDS), "--size", "8", "--command-config", alice
    )
    assert code == 0, (out, err)
    code, out, err = await ketch(
        cluster, "consume", TOPIC, "--from-beginning", "--max-messages", str(RECORDS),
        "--timeout-ms", "10000", "--print-offsets", "--command-config", alice,
    )  # fmt: skip
    assert code == 0, err
    assert [line.split("\t")[1] for line in out.splitlines()] == [str(i) for i in range(RECORDS)]


async def test_bob_without_acls_is_refused(cluster: ProcessCluster) -> None:
    bob = login_file(cluster.root, "bob", "bob-secret")
    code, out, err = await ketch(
        cluster, "produce", TOPIC, "--count", "1", "--size", "8", "--command-config", bob
    )
    assert code == 1, (out, err)
    assert "TOPIC_AUTHORIZATION_FAILED" in err, err
    assert "the cluster's ACLs do not allow this on the topic" in err, err
    assert len(err.strip().splitlines()) == 1, err


async def test_wrong_password_is_an_authentication_error(cluster: ProcessCluster) -> None:
    wrong = login_file(cluster.root, "alice", "not-her-password")
    code, out, err = await ketch(cluster, "topic", "list", "--command-config", wrong)
    assert code == 1, (out, err)
    assert "authentication failed: Authentication failed: Invalid username or password" in err
    assert len(err.strip().splitlines()) == 1, err


async def test_no_login_is_told_to_log_in(cluster: ProcessCluster) -> None:
    code, out, err = await ketch(cluster, "topic", "list")
    assert code == 1, (out, err)
    assert "ILLEGAL_SASL_STATE" in err, err
    assert "--command-config" in err, err
