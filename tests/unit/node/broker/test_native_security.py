"""The native listener's table under ACLs and its SASL settings (node/broker/native_security.py):
the Kafka listener's guards apply by principal, a cluster member passes, and a follower's Fetch
from anyone else needs ClusterAction."""

from __future__ import annotations

from dataclasses import replace

from actors.acl.bindings import AclOperation
from actors.acl.bindings import ResourceType as RT
from node.broker.native_security import fetcher_credential, native_handlers, native_sasl
from runtime.net.dialect import Handler
from runtime.net.sasl import NoScramCredentials
from runtime.net.sasl_config import SaslConfig
from runtime.net.security_protocol import SecurityProtocol
from tests.unit.node.broker.test_authorization import Recorder, allow, authorization, ctx
from wire.error_responses import error_response
from wire.errors import ErrorCode
from wire.messages import (
    ApiKey,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    Response,
)

Op = AclOperation


def fetch(replica_id: int) -> FetchRequest:
    return FetchRequest(
        replica_id=replica_id,
        max_wait_ms=0,
        min_bytes=1,
        topics=[
            FetchTopic(
                topic="orders",
                partitions=[FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1)],
            )
        ],
    )


def served(request: FetchRequest) -> Response:
    return error_response(request, ErrorCode.NONE)  # every partition answered without error


def error_codes(response: object) -> list[int]:
    assert isinstance(response, FetchResponse)
    return [p.error_code for t in response.responses for p in t.partitions]


async def test_without_an_authorizer_the_table_is_a_copy() -> None:
    handler = Recorder(served)
    table: dict[int, Handler] = {ApiKey.FETCH: handler}
    assert native_handlers(authorization(enabled=False), table) == table


async def test_a_consumer_fetch_is_authorized_by_principal() -> None:
    handler = Recorder(served)
    auth = authorization(allow(Op.READ, RT.TOPIC, "orders"))
    guarded = native_handlers(auth, {ApiKey.FETCH: handler})[ApiKey.FETCH]
    assert error_codes(await guarded(fetch(-1), ctx())) == [ErrorCode.NONE]
    refused = await guarded(fetch(-1), ctx(principal="User:bob"))
    assert error_codes(refused) == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    assert len(handler.seen) == 1


async def test_a_follower_fetch_needs_cluster_action_or_membership() -> None:
    handler = Recorder(served)
    # Read on the topic is not enough to read as a replica.
    auth = authorization(allow(Op.READ, RT.TOPIC, "orders"))
    guarded = native_handlers(auth, {ApiKey.FETCH: handler})[ApiKey.FETCH]
    refused = await guarded(fetch(1), ctx())
    assert error_codes(refused) == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    assert handler.seen == []
    assert error_codes(await guarded(fetch(1), ctx(member=True))) == [ErrorCode.NONE]
    granted = authorization(
        allow(Op.READ, RT.TOPIC, "orders"), allow(Op.CLUSTER_ACTION, RT.CLUSTER, "kafka-cluster")
    )
    guarded = native_handlers(granted, {ApiKey.FETCH: handler})[ApiKey.FETCH]
    assert error_codes(await guarded(fetch(1), ctx())) == [ErrorCode.NONE]
    assert len(handler.seen) == 2


def test_native_sasl_only_on_a_sasl_listener() -> None:
    credentials = NoScramCredentials()
    config = SaslConfig(sasl_enabled_mechanisms="PLAIN", plain_users={"alice": "pw"})
    assert native_sasl(config, credentials) is None
    sasl = replace(config, protocol=SecurityProtocol.SASL_PLAINTEXT)
    settings = native_sasl(sasl, credentials)
    assert settings is not None
    assert (settings.mechanisms, dict(settings.plain_users)) == (("PLAIN",), {"alice": "pw"})
    assert not fetcher_credential(config, authorization(enabled=False))
    assert fetcher_credential(sasl, authorization(enabled=False))
    assert fetcher_credential(config, authorization())
