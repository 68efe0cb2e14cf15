"""SASL on the Kafka listener (runtime/net/kafka_dialect.py + runtime/net/sasl.py) in a real
`Server` over the in-memory network, driven by hand-written Kafka frames: PLAIN and SCRAM
exchanges, the principal handlers see, and every refusal (requests before authentication, a
mechanism not enabled, wrong passwords, garbage tokens, out-of-order messages, oversize frames,
SaslHandshake v0)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.static.constants import EntityType

from runtime.clock import ManualClock
from runtime.net.kafka_dialect import KafkaProtocol, KafkaSasl
from runtime.net.memory import MemoryNetwork
from runtime.net.sasl import PLAIN_FAILED, ScramCredentialCache, invalid_credentials
from runtime.net.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramClient,
    ScramMechanism,
    credential,
    salted_password,
)
from runtime.net.server import Server
from tests.unit.runtime.net.test_kafka_dialect import (
    ADDRESS,
    SEED,
    KafkaRawClient,
    Recorder,
    api_versions_request,
)
from tests.unit.wire.kafka.helpers import NoTopicIds
from wire.kafka.codec import schema
from wire.messages import ApiKey, MetadataRequest, MetadataRequestTopic

MAX_RECEIVE = 1024
SALT = b"0123456789abcdef"


def salted(mechanism: ScramMechanism) -> bytes:
    return salted_password(mechanism, b"bob-pw", SALT, 4096)


class SaslHarness:
    def __init__(self, mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")):
        self.recorder = Recorder()
        self.clock = ManualClock()
        self.network = MemoryNetwork(seed=SEED, clock=self.clock)
        self.credentials = ScramCredentialCache()
        self.credentials.replace(
            {
                ("bob", m.name): credential(
                    m, SALT, salted_password(m, b"bob-pw", SALT, 4096), 4096
                )
                for m in (SCRAM_SHA_256, SCRAM_SHA_512)
            }
        )
        sasl = KafkaSasl(mechanisms, {"alice": "alice-pw"}, self.credentials, MAX_RECEIVE)
        protocol = KafkaProtocol(self.recorder.handlers(), NoTopicIds(), sasl=sasl)
        self.server = Server(
            self.network.transport("broker"),
            ADDRESS,
            protocol.handlers,
            clock=self.clock,
            dialect=protocol.dialect,
            listener="kafka",
        )
        self.clients = 0

    async def __aenter__(self) -> SaslHarness:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop()

    async def connect(self) -> KafkaRawClient:
        self.clients += 1
        transport = self.network.transport(f"client-{self.clients}")
        return KafkaRawClient(await transport.connect(ADDRESS, timeout_s=1.0))


def body(api_key: int, version: int, **fields: Any) -> Any:
    return schema(api_key, version, EntityType.request)(**fields)


async def handshake(client: KafkaRawClient, mechanism: str, correlation_id: int = 1) -> Any:
    request = body(ApiKey.SASL_HANDSHAKE, 1, mechanism=mechanism)
    await client.send(ApiKey.SASL_HANDSHAKE, 1, correlation_id, request)
    return (await client.response(ApiKey.SASL_HANDSHAKE, 1))[1]


async def authenticate(client: KafkaRawClient, token: bytes, version: int = 2) -> Any:
    request = body(ApiKey.SASL_AUTHENTICATE, version, auth_bytes=token)
    await client.send(ApiKey.SASL_AUTHENTICATE, version, 2, request)
    return (await client.response(ApiKey.SASL_AUTHENTICATE, version))[1]


async def metadata(client: KafkaRawClient, correlation_id: int = 7) -> None:
    await client.send_native(MetadataRequest(topics=[]), 9, correlation_id)


async def test_plain_authenticates_and_handlers_see_the_principal() -> None:
    async with SaslHarness() as h:
        client = await h.connect()
        await client.send(ApiKey.API_VERSIONS, 3, 0, api_versions_request(3))
        _, versions = await client.response(ApiKey.API_VERSIONS, 3)
        listed = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert listed[ApiKey.SASL_HANDSHAKE] == (1, 1)
        assert listed[ApiKey.SASL_AUTHENTICATE] == (0, 2)
        answer = await handshake(client, "PLAIN")
        assert answer.error_code is KioErrorCode.none
        assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        # The request pipelined behind the exchange already runs as alice.
        request = body(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\x00alice\x00alice-pw")
        await client.send(ApiKey.SASL_AUTHENTICATE, 2, 2, request)
        await metadata(client)
        _, done = await client.response(ApiKey.SASL_AUTHENTICATE, 2)
        assert done.error_code is KioErrorCode.none
        assert (await client.response(ApiKey.METADATA, 9))[0] == 7
        [(_, ctx)] = h.recorder.requests
        assert ctx.principal == "User:alice"
        # A second handshake is answered, not fatal (no re-authentication).
        again = await handshake(client, "PLAIN", 8)
        assert again.error_code is KioErrorCode.illegal_sasl_state
        await metadata(client, 9)
        assert (await client.response(ApiKey.METADATA, 9))[0] == 9


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
async def test_scram_authenticates(mechanism: Any) -> None:
    async with SaslHarness() as h:
        client = await h.connect()
        assert (await handshake(client, mechanism.name)).error_code is KioErrorCode.none
        scram = ScramClient(mechanism, "bob", "bob-pw")
        first = await authenticate(client, scram.first_message(), version=1)
        assert first.error_code is KioErrorCode.none
        final = await authenticate(client, scram.final_message(first.auth_bytes), version=1)
        assert final.error_code is KioErrorCode.none
        scram.verify(final.auth_bytes)
        await metadata(client)
        await client.response(ApiKey.METADATA, 9)
        assert h.recorder.requests[0][1].principal == "User:bob"


@pytest.mark.parametrize(
    ("user", "password"), [("alice", "wrong"), ("nobody", "alice-pw"), ("alice", "alice-pw ")]
)
async def test_plain_wrong_password_is_answered_then_closed(user: str, password: str) -> None:
    async with SaslHarness() as h:
        client = await h.connect()
        await handshake(client, "PLAIN")
        answer = await authenticate(client, f"\x00{user}\x00{password}".encode())
        assert answer.error_code is KioErrorCode.sasl_authentication_failed
        assert answer.error_message == PLAIN_FAILED
        assert await client.closed()
        assert h.recorder.requests == []


async def test_scram_wrong_password_and_unknown_user_read_the_same() -> None:
    async with SaslHarness() as h:
        messages = []
        for user, password in [("bob", "nope"), ("carol", "bob-pw")]:
            client = await h.connect()
            await handshake(client, "SCRAM-SHA-256")
            scram = ScramClient(SCRAM_SHA_256, user, password)
            first = await authenticate(client, scram.first_message())
            assert first.error_code is KioErrorCode.none  # an unknown user is not told so here
            final = await authenticate(client, scram.final_message(first.auth_bytes))
            assert final.error_code is KioErrorCode.sasl_authentication_failed
            messages.append(final.error_message)
            assert await client.closed()
        assert messages == [invalid_credentials("SCRAM-SHA-256")] * 2


@pytest.mark.parametrize(
    "token",
    [b"", b"\x00\x00", b"garbage", b"\xff" * 64, b"n,,n=bob,r=" + b"\x01" * 10],
)
async def test_garbage_tokens_fail_and_close(token: bytes) -> None:
    async with SaslHarness() as h:
        for mechanism in ("PLAIN", "SCRAM-SHA-512"):
            client = await h.connect()
            await handshake(client, mechanism)
            answer = await authenticate(client, token)
            assert answer.error_code is KioErrorCode.sasl_authentication_failed
            assert await client.closed()


async def test_mechanism_not_enabled_is_answered_with_the_list_then_closed() -> None:
    async with SaslHarness(mechanisms=("SCRAM-SHA-512",)) as h:
        client = await h.connect()
        answer = await handshake(client, "PLAIN")
        assert answer.error_code is KioErrorCode.unsupported_sasl_mechanism
        assert answer.mechanisms == ("SCRAM-SHA-512",)
        assert await client.closed()


async def test_requests_before_authentication_close_the_connection() -> None:
    async with SaslHarness() as h:
        client = await h.connect()
        await metadata(client)
        assert await client.closed()
        # After the handshake, still nothing but SaslAuthenticate.
        client = await h.connect()
        await handshake(client, "PLAIN")
        await metadata(client)
        assert await client.closed()
        assert h.recorder.requests == []


async def test_out_of_order_messages_close_without_an_answer() -> None:
    async with SaslHarness() as h:
        client = await h.connect()
        await client.send(
            ApiKey.SASL_AUTHENTICATE, 2, 1, body(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"x")
        )
        assert await client.closed()
        client = await h.connect()
        await handshake(client, "PLAIN")
        request = body(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
        await client.send(ApiKey.SASL_HANDSHAKE, 1, 3, request)
        assert await client.closed()
        # SCRAM: after the final round, a third one is "after authentication"; a client-final
        # sent first is refused by the mechanism.
        client = await h.connect()
        await handshake(client, "SCRAM-SHA-256")
        final_first = b"c=biws,r=abc,p=" + base64.b64encode(b"\x00" * 32)
        answer = await authenticate(client, final_first)
        assert answer.error_code is KioErrorCode.sasl_authentication_failed
        assert await client.closed()


async def test_handshake_v0_is_refused() -> None:
    async with SaslHarness() as h:
        client = await h.connect()
        request = body(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN")
        await client.send(ApiKey.SASL_HANDSHAKE, 0, 1, request)
        assert await client.closed()


async def test_oversize_frame_before_authentication_closes_at_once() -> None:
    async with SaslHarness() as h:
        client = await h.connect()
        # Only the length of a frame over the limit: closed without its body being awaited.
        await client.stream.send((MAX_RECEIVE + 1).to_bytes(4, "big"))
        assert await client.closed()
        # The same size is fine once authenticated.
        client = await h.connect()
        await handshake(client, "PLAIN")
        await authenticate(client, b"\x00alice\x00alice-pw")
        big = MetadataRequest(topics=[MetadataRequestTopic(name="x" * MAX_RECEIVE)])
        await client.send_native(big, 9, 5)
        assert (await client.response(ApiKey.METADATA, 9))[0] == 5
