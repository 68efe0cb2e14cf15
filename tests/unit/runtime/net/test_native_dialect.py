"""The native dialect (runtime/net/native_dialect.py) in a real `Server` over the in-memory
network: requests it answers without calling a handler (unknown API or version, no handler, a
malformed body) and the cluster-credential SASL exchange that opens the control plane.

Harness and raw clients: tests/unit/runtime/net/server_harness.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from runtime.net import auth
from runtime.net.dialect import RequestContext
from tests.unit.runtime.net.server_harness import SECRET, Gate, Harness
from wire.errors import ErrorCode
from wire.messages import (
    ApiKey,
    ApiVersionsRequest,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    MetadataResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)


@pytest.mark.parametrize(
    ("api_key", "api_version"),
    [(99, 0), (ApiKey.METADATA, 7), (ApiKey.PRODUCE, 0)],  # unknown key, version, no handler
)
async def test_unsupported_api_gets_unsupported_version(api_key: int, api_version: int) -> None:
    async with Harness({ApiKey.METADATA: Gate()}) as h:
        client = await h.connect()
        await client.send_body(api_key, api_version, 5, {"anything": 1})
        envelope = await client.response()
        assert envelope is not None
        assert envelope.correlation_id == 5
        assert envelope.body == {"error_code": ErrorCode.UNSUPPORTED_VERSION}
        assert (await client.call(6, ApiVersionsRequest()))["error_code"] == 0


async def test_malformed_body_is_invalid_request_and_the_connection_lives() -> None:
    async with Harness({ApiKey.METADATA: Gate()}) as h:
        client = await h.connect()
        await client.send_body(ApiKey.METADATA, 0, 7, {"topics": "not a list"})
        envelope = await client.response()
        assert envelope is not None
        assert MetadataResponse.from_body(envelope.body).error is ErrorCode.INVALID_REQUEST
        assert (await client.call(8, ApiVersionsRequest()))["error_code"] == 0


async def test_control_plane_needs_the_cluster_credential() -> None:
    calls: list[RequestContext] = []

    async def heartbeat(request: BrokerHeartbeatRequest, ctx: RequestContext) -> Any:
        calls.append(ctx)
        return BrokerHeartbeatResponse(is_fenced=False)

    request = BrokerHeartbeatRequest(broker_id=1, broker_epoch=3)
    async with Harness({ApiKey.BROKER_HEARTBEAT: heartbeat}, secret=SECRET) as h:
        client = await h.connect()
        body = await client.call(1, request)
        assert (
            BrokerHeartbeatResponse.from_body(body).error is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        )
        assert calls == []

        # Prove the credential; the heartbeat pipelined behind the proof is already allowed.
        proof_client = auth.ClientAuthenticator(SECRET)
        body = await client.call(2, SaslHandshakeRequest(mechanism=auth.MECHANISM))
        assert SaslHandshakeResponse.from_body(body).mechanisms == [auth.MECHANISM]
        first = SaslAuthenticateRequest(auth_bytes=proof_client.first_message())
        challenge = SaslAuthenticateResponse.from_body(await client.call(3, first))
        assert challenge.error is ErrorCode.NONE
        proof = proof_client.on_challenge(challenge.auth_bytes)
        await client.send(4, SaslAuthenticateRequest(auth_bytes=proof))
        await client.send(5, request)
        final = await client.response()
        assert final is not None
        proof_client.on_server_proof(SaslAuthenticateResponse.from_body(final.body).auth_bytes)
        answered = await client.response()
        assert answered is not None
        assert BrokerHeartbeatResponse.from_body(answered.body).is_fenced is False
        assert [ctx.cluster_member for ctx in calls] == [True]
        assert calls[0].client_id == "test-client"


async def test_wrong_credential_keeps_control_plane_closed() -> None:
    calls: list[int] = []

    async def heartbeat(request: BrokerHeartbeatRequest, ctx: RequestContext) -> Any:
        calls.append(ctx.correlation_id)
        return BrokerHeartbeatResponse()

    async with Harness({ApiKey.BROKER_HEARTBEAT: heartbeat}, secret=SECRET) as h:
        client = await h.connect()
        impostor = auth.ClientAuthenticator(b"wrong-secret-wrong-secret")
        await client.call(1, SaslHandshakeRequest(mechanism=auth.MECHANISM))
        first = SaslAuthenticateRequest(auth_bytes=impostor.first_message())
        challenge = SaslAuthenticateResponse.from_body(await client.call(2, first))
        proof = SaslAuthenticateRequest(auth_bytes=impostor.on_challenge(challenge.auth_bytes))
        result = SaslAuthenticateResponse.from_body(await client.call(3, proof))
        assert result.error is ErrorCode.SASL_AUTHENTICATION_FAILED
        assert result.error_message is not None
        assert result.auth_bytes == b""
        body = await client.call(4, BrokerHeartbeatRequest(broker_id=1, broker_epoch=1))
        assert body["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert calls == []


async def test_server_without_secret_offers_no_mechanism() -> None:
    async with Harness({}) as h:
        client = await h.connect()
        body = await client.call(1, SaslHandshakeRequest(mechanism=auth.MECHANISM))
        response = SaslHandshakeResponse.from_body(body)
        assert response.error is ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert response.mechanisms == []
