"""Users on the native listener (runtime/net/native_sasl.py through runtime/net/native_dialect.py)
in a real `Server` over the in-memory network: what a SASL_PLAINTEXT native listener refuses
before a login, PLAIN and SCRAM logins by hand-written frames and by ketch's client
(client/sasl.py), the principal handlers see, the cluster credential beside them, and a
PLAINTEXT native listener that offers the cluster credential only.

Raw clients: tests/unit/runtime/net/server_harness.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from client.client import Client
from client.errors import SaslAuthenticationError
from client.sasl import SaslClientConfig, sasl_authenticator
from runtime.clock import ManualClock
from runtime.net import auth
from runtime.net.dialect import Handler, RequestContext
from runtime.net.memory import MemoryNetwork
from runtime.net.native_dialect import native_dialect
from runtime.net.native_sasl import NativeSasl
from runtime.net.sasl import PLAIN_FAILED, ScramCredentialCache
from runtime.net.scram import SCRAM_SHA_256, SCRAM_SHA_512, credential, salted_password
from runtime.net.server import Server
from runtime.net.transport import Address
from tests.unit.runtime.net.server_harness import SECRET, RawClient
from wire.errors import ErrorCode
from wire.frames import encode_frame
from wire.messages import (
    ApiKey,
    ApiVersionsRequest,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    MetadataRequest,
    MetadataResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

SEED = 11
ADDRESS = Address("broker", 9092)
MAX_RECEIVE = 1024
SALT = b"0123456789abcdef"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class Recorder:
    """Metadata and BrokerHeartbeat handlers that keep each request's context."""

    def __init__(self) -> None:
        self.contexts: list[RequestContext] = []

    async def metadata(self, request: MetadataRequest, ctx: RequestContext) -> MetadataResponse:
        self.contexts.append(ctx)
        return MetadataResponse()

    async def heartbeat(self, request: BrokerHeartbeatRequest, ctx: RequestContext) -> Any:
        self.contexts.append(ctx)
        return BrokerHeartbeatResponse(is_fenced=False)

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.METADATA: self.metadata, ApiKey.BROKER_HEARTBEAT: self.heartbeat}


class NativeHarness:
    """A native listener (SASL_PLAINTEXT when `sasl`, else PLAINTEXT) with the cluster secret."""

    def __init__(self, *, sasl: bool = True) -> None:
        self.clock = ManualClock()
        self.network = MemoryNetwork(seed=SEED, clock=self.clock)
        self.recorder = Recorder()
        credentials = ScramCredentialCache()
        credentials.replace(
            {
                ("bob", m.name): credential(
                    m, SALT, salted_password(m, b"bob-pw", SALT, 4096), 4096
                )
                for m in (SCRAM_SHA_256, SCRAM_SHA_512)
            }
        )
        settings = NativeSasl(MECHANISMS, {"alice": "alice-pw"}, credentials, MAX_RECEIVE)
        self.server = Server(
            self.network.transport("broker"),
            ADDRESS,
            self.recorder.handlers(),
            clock=self.clock,
            cluster_secret=SECRET,
            dialect=native_dialect(settings if sasl else None),
            listener="native",
        )
        self._clients = 0

    async def __aenter__(self) -> NativeHarness:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop()

    def _transport_name(self) -> str:
        self._clients += 1
        return f"client-{self._clients}"

    async def connect(self) -> RawClient:
        transport = self.network.transport(self._transport_name())
        return RawClient(await transport.connect(ADDRESS, timeout_s=1.0))

    def client(self, **kwargs: Any) -> Client:
        return Client(
            [ADDRESS],
            transport=self.network.transport(self._transport_name()),
            clock=self.clock,
            **kwargs,
        )


async def plain_login(client: RawClient, user: str, password: str) -> SaslAuthenticateResponse:
    handshake = await client.call(1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert SaslHandshakeResponse.from_body(handshake).error is ErrorCode.NONE
    token = b"\x00" + user.encode() + b"\x00" + password.encode()
    body = await client.call(2, SaslAuthenticateRequest(auth_bytes=token))
    return SaslAuthenticateResponse.from_body(body)


async def test_requests_before_a_login_are_refused_but_api_versions() -> None:
    async with NativeHarness() as h:
        client = await h.connect()
        assert (await client.call(1, ApiVersionsRequest()))["error_code"] == 0
        body = await client.call(2, MetadataRequest(topics=None))
        assert MetadataResponse.from_body(body).error is ErrorCode.ILLEGAL_SASL_STATE
        # A control-plane API is refused as before: for want of the cluster credential.
        body = await client.call(3, BrokerHeartbeatRequest(broker_id=1, broker_epoch=1))
        assert body["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert h.recorder.contexts == []
        handshake = await client.call(4, SaslHandshakeRequest(mechanism="GSSAPI"))
        response = SaslHandshakeResponse.from_body(handshake)
        assert response.error is ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert response.mechanisms == [*MECHANISMS, auth.MECHANISM]


async def test_plain_login_sets_the_principal_and_not_membership() -> None:
    async with NativeHarness() as h:
        client = await h.connect()
        assert (await plain_login(client, "alice", "alice-pw")).error is ErrorCode.NONE
        await client.call(3, MetadataRequest(topics=None))
        [ctx] = h.recorder.contexts
        assert (ctx.principal, ctx.cluster_member, ctx.listener) == ("User:alice", False, "native")
        body = await client.call(4, BrokerHeartbeatRequest(broker_id=1, broker_epoch=1))
        assert body["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        # No second login, and no climbing to the cluster credential on this connection.
        again = await client.call(5, SaslHandshakeRequest(mechanism=auth.MECHANISM))
        assert SaslHandshakeResponse.from_body(again).error is ErrorCode.ILLEGAL_SASL_STATE
        assert len(h.recorder.contexts) == 1


@pytest.mark.parametrize(
    ("user", "password"), [("alice", "wrong"), ("mallory", "alice-pw"), ("bob", "bob-pw")]
)
async def test_plain_wrong_password_is_answered_then_closed(user: str, password: str) -> None:
    async with NativeHarness() as h:
        client = await h.connect()
        result = await plain_login(client, user, password)
        assert result.error is ErrorCode.SASL_AUTHENTICATION_FAILED
        assert result.error_message == PLAIN_FAILED
        assert await client.response() is None  # closed
        assert h.recorder.contexts == []


async def test_oversize_frame_before_a_login_closes_the_connection() -> None:
    async with NativeHarness() as h:
        client = await h.connect()
        await client.stream.send(encode_frame(b"\x00" * (MAX_RECEIVE + 1)))
        assert await client.response() is None


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
async def test_ketch_client_logs_in(mechanism: str) -> None:
    user, password = ("alice", "alice-pw") if mechanism == "PLAIN" else ("bob", "bob-pw")
    async with NativeHarness() as h:
        login = SaslClientConfig(mechanism, user, password)
        client = h.client(authenticator=sasl_authenticator(login))
        try:
            response = await client.send(ADDRESS, MetadataRequest(topics=None))
        finally:
            await client.close()
        assert isinstance(response, MetadataResponse)
        [ctx] = h.recorder.contexts
        assert (ctx.principal, ctx.cluster_member) == (f"User:{user}", False)


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [
        ("SCRAM-SHA-256", "bob", "wrong"),
        ("SCRAM-SHA-512", "alice", "alice-pw"),  # alice has no SCRAM credential
        ("PLAIN", "alice", "wrong"),
    ],
)
async def test_ketch_client_wrong_login_raises(mechanism: str, user: str, password: str) -> None:
    async with NativeHarness() as h:
        login = SaslClientConfig(mechanism, user, password)
        client = h.client(authenticator=sasl_authenticator(login))
        try:
            with pytest.raises(SaslAuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
                await client.send(ADDRESS, MetadataRequest(topics=None))
        finally:
            await client.close()
        assert h.recorder.contexts == []


async def test_cluster_credential_still_opens_the_control_plane() -> None:
    async with NativeHarness() as h:
        client = h.client(credential=SECRET)
        try:
            request = BrokerHeartbeatRequest(broker_id=1, broker_epoch=1)
            response = await client.send(ADDRESS, request)
        finally:
            await client.close()
        assert isinstance(response, BrokerHeartbeatResponse)
        assert response.error is ErrorCode.NONE
        [ctx] = h.recorder.contexts
        assert (ctx.principal, ctx.cluster_member) == ("User:ANONYMOUS", True)


async def test_plaintext_native_listener_offers_the_cluster_credential_only() -> None:
    async with NativeHarness(sasl=False) as h:
        client = await h.connect()
        await client.call(1, MetadataRequest(topics=None))
        [ctx] = h.recorder.contexts
        assert (ctx.principal, ctx.cluster_member) == ("User:ANONYMOUS", False)
        body = await client.call(2, SaslHandshakeRequest(mechanism="PLAIN"))
        response = SaslHandshakeResponse.from_body(body)
        assert response.error is ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert response.mechanisms == [auth.MECHANISM]


def test_client_properties() -> None:
    assert SaslClientConfig.from_properties({"security.protocol": "SSL"}) is None
    assert SaslClientConfig.from_properties({}) is None
    librdkafka = SaslClientConfig.from_properties(
        {
            "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "plain",
            "sasl.username": "alice",
            "sasl.password": "pw",
        }
    )
    assert librdkafka == SaslClientConfig("PLAIN", "alice", "pw")
    assert "pw" not in repr(librdkafka)
    jaas = SaslClientConfig.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                'username="bob" password="bob-pw";'
            ),
        }
    )
    assert jaas == SaslClientConfig("SCRAM-SHA-256", "bob", "bob-pw")
    with pytest.raises(ValueError, match=r"sasl\.mechanism: unsupported mechanism GSSAPI"):
        SaslClientConfig.from_properties(
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"}
        )
    with pytest.raises(ValueError, match=r"sasl\.username"):
        SaslClientConfig.from_properties({"security.protocol": "SASL_PLAINTEXT"})
