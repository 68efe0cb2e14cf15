"""The principal of a TLS client certificate reaches the handlers (Kafka's SSL principal):
on an SSL listener it is the connection's principal; a SASL login on SASL_SSL replaces it, as
in Kafka; without either the connection is User:ANONYMOUS. The Kafka dialect and the native
listener's authentication state, driven directly."""

from __future__ import annotations

from typing import Any

from kio.static.constants import EntityType

from runtime.net.dialect import Call
from runtime.net.kafka_dialect import KafkaDialect, KafkaProtocol, KafkaSasl
from runtime.net.native_sasl import NativeAuthentication
from runtime.net.sasl import ScramCredentialCache
from runtime.net.security_protocol import ANONYMOUS_PRINCIPAL
from tests.unit.runtime.net.test_kafka_dialect import Recorder
from tests.unit.wire.kafka.helpers import NoTopicIds, request_frame
from wire.kafka.codec import schema
from wire.messages import ApiKey

ALICE_CERT = "User:CN=alice,OU=eng"


def _frame(api_key: int, version: int, correlation_id: int, **fields: Any) -> memoryview:
    body = schema(api_key, version, EntityType.request)(**fields)
    return memoryview(request_frame(api_key, version, body, correlation_id))


def _metadata_principal(dialect: KafkaDialect) -> str:
    metadata = _frame(
        ApiKey.METADATA,
        9,
        7,
        topics=(),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    call = dialect.admit(metadata)
    assert isinstance(call, Call)
    return call.context.principal


def test_an_ssl_client_certificate_is_the_principal() -> None:
    protocol = KafkaProtocol(Recorder().handlers(), NoTopicIds())
    assert _metadata_principal(KafkaDialect(protocol, "10.0.0.9:4000", "kafka", ALICE_CERT)) == (
        ALICE_CERT
    )
    assert _metadata_principal(KafkaDialect(protocol, "10.0.0.9:4001", "kafka")) == (
        ANONYMOUS_PRINCIPAL
    )


def test_a_sasl_login_replaces_the_certificates_principal() -> None:
    sasl = KafkaSasl(("PLAIN",), {"bob": "bob-pw"}, ScramCredentialCache(), 1024)
    protocol = KafkaProtocol(Recorder().handlers(), NoTopicIds(), sasl=sasl)
    dialect = KafkaDialect(protocol, "10.0.0.9:4000", "kafka", ALICE_CERT)
    handshake = dialect.admit(_frame(ApiKey.SASL_HANDSHAKE, 1, 1, mechanism="PLAIN"))
    assert not isinstance(handshake, Call)
    login = _frame(ApiKey.SASL_AUTHENTICATE, 2, 2, auth_bytes=b"\x00bob\x00bob-pw")
    assert not isinstance(dialect.admit(login), Call)
    assert _metadata_principal(dialect) == "User:bob"


def test_the_native_listener_takes_the_certificates_principal() -> None:
    assert NativeAuthentication(None, None, "10.0.0.9:4000", ALICE_CERT).principal == ALICE_CERT
    assert NativeAuthentication(None, None, "10.0.0.9:4000").principal == ANONYMOUS_PRINCIPAL
