"""The broker's SCRAM APIs (node/broker/scram_credentials.py): credentials taken from
UpdateMetadata, DescribeUserScramCredentials answered from them (mechanisms and iterations
only), AlterUserScramCredentials refused without TLS from another host and forwarded otherwise,
and the Kafka listener's SASL settings with their start-up warnings."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from node.broker.forwarder import ControllerForwarder
from node.broker.scram_credentials import (
    NEEDS_TLS,
    BrokerScramCredentials,
    is_loopback,
    kafka_sasl,
)
from runtime.net.dialect import RequestContext
from runtime.net.sasl import ScramCredentialCache
from runtime.net.sasl_config import SaslConfig
from runtime.net.security_protocol import SecurityProtocol
from wire.errors import ErrorCode
from wire.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
    DescribeUserScramCredentialsRequest,
    Response,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
    UpdateMetadataScramCredential,
    UserName,
)


class Forwarder:
    def __init__(self) -> None:
        self.sent: list[AlterUserScramCredentialsRequest] = []

    async def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        self.sent.append(request)
        users = [u.name for u in request.upsertions]
        return AlterUserScramCredentialsResponse(
            results=[AlterUserScramCredentialsResult(user=u) for u in users]
        )


def context(peer: str, listener: str = "native") -> RequestContext:
    return RequestContext(peer, "test", 51, 0, 1, False, listener)


def entry(name: str, mechanism: int, iterations: int = 4096) -> UpdateMetadataScramCredential:
    return UpdateMetadataScramCredential(
        name=name,
        mechanism=mechanism,
        salt=b"s",
        stored_key=b"k" * 32,
        server_key=b"v" * 32,
        iterations=iterations,
    )


def apis() -> tuple[BrokerScramCredentials, Forwarder]:
    forwarder = Forwarder()
    broker = BrokerScramCredentials(
        ScramCredentialCache(), cast("ControllerForwarder", forwarder), tls_listeners={"secure"}
    )
    return broker, forwarder


async def accept(request: Any, ctx: RequestContext) -> Response:
    return UpdateMetadataResponse()


async def update(broker: BrokerScramCredentials, *entries: UpdateMetadataScramCredential) -> None:
    handler = broker.observe_update_metadata(accept)
    request = UpdateMetadataRequest(
        controller_id=0,
        controller_epoch=1,
        partition_states=[],
        live_brokers=[],
        scram_credentials=list(entries),
    )
    await handler(request, context("controller:1"))


async def test_credentials_from_update_metadata_and_describe() -> None:
    broker, _ = apis()
    await update(broker, entry("alice", 1), entry("alice", 2, 8192), entry("bob", 1))
    assert broker.cache.scram_credential("alice", "SCRAM-SHA-512") is not None
    everyone = await broker.describe(DescribeUserScramCredentialsRequest(), context("h:1"))
    assert [
        (r.user, [(i.mechanism, i.iterations) for i in r.credential_infos])
        for r in everyone.results
    ] == [("alice", [(1, 4096), (2, 8192)]), ("bob", [(1, 4096)])]
    named = await broker.describe(
        DescribeUserScramCredentialsRequest(
            users=[UserName(name="bob"), UserName(name="carol"), UserName(name="bob")]
        ),
        context("h:1"),
    )
    assert [(r.user, r.error_code) for r in named.results] == [
        ("bob", ErrorCode.DUPLICATE_RESOURCE),
        ("carol", ErrorCode.RESOURCE_NOT_FOUND),
    ]
    # An UpdateMetadata without credentials leaves them; one with an empty list clears them.
    handler = broker.observe_update_metadata(accept)
    await handler(
        UpdateMetadataRequest(
            controller_id=0, controller_epoch=1, partition_states=[], live_brokers=[]
        ),
        context("controller:1"),
    )
    assert len(broker.cache) == 3
    await update(broker)
    assert len(broker.cache) == 0


UPSERT = AlterUserScramCredentialsRequest(
    upsertions=[
        ScramCredentialUpsertion(
            name="alice", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p" * 32
        )
    ],
    deletions=[ScramCredentialDeletion(name="bob", mechanism=1)],
)


@pytest.mark.parametrize(
    ("peer", "listener", "forwarded"),
    [
        ("127.0.0.1:5000", "native", True),
        ("[::1]:5000", "kafka", True),
        ("10.1.2.3:5000", "secure", True),
        ("10.1.2.3:5000", "native", False),
        ("broker-2", "native", False),
    ],
)
async def test_salted_passwords_need_tls_or_loopback(
    peer: str, listener: str, forwarded: bool
) -> None:
    broker, forwarder = apis()
    response = await broker.alter(UPSERT, context(peer, listener))
    assert bool(forwarder.sent) is forwarded
    if not forwarded:
        assert [(r.user, r.error_code, r.error_message) for r in response.results] == [
            ("bob", ErrorCode.POLICY_VIOLATION, NEEDS_TLS),
            ("alice", ErrorCode.POLICY_VIOLATION, NEEDS_TLS),
        ]
    # A deletion alone carries no secret: forwarded from anywhere.
    deletion = AlterUserScramCredentialsRequest(deletions=UPSERT.deletions)
    await broker.alter(deletion, context("10.1.2.3:5000"))
    assert forwarder.sent[-1] == deletion


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1:1")
    assert is_loopback("[::1]:2")
    assert is_loopback("127.9.9.9")
    assert not is_loopback("10.0.0.1:1")
    assert not is_loopback("localhost:1")


def test_kafka_sasl_warns_about_plain_without_tls(caplog: pytest.LogCaptureFixture) -> None:
    cache = ScramCredentialCache()
    assert kafka_sasl(SaslConfig(), cache) is None  # PLAINTEXT listener: no SASL
    config = SaslConfig(
        sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-256",
        plain_users={"a": "b"},
        protocol=SecurityProtocol.SASL_PLAINTEXT,
    )
    with caplog.at_level(logging.WARNING):
        sasl = kafka_sasl(config, cache)
    assert sasl is not None
    assert sasl.mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert any("in the clear" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        kafka_sasl(
            SaslConfig(plain_users={}, protocol=SecurityProtocol.SASL_SSL),
            cache,
        )
    assert not caplog.records  # SCRAM over TLS: nothing to warn about
