"""The cluster-credential challenge/response, both ends, without a network."""

from __future__ import annotations

import random

import pytest

from runtime.net import auth
from runtime.net.auth import (
    AuthenticationError,
    ClientAuthenticator,
    ServerAuthenticator,
    ServerState,
)
from wire.errors import ErrorCode

SECRET = b"0123456789abcdef-cluster-secret"


def _seeded_nonces(seed: int) -> auth.NonceFactory:
    rng = random.Random(seed)
    return rng.randbytes


def _run_exchange(
    client: ClientAuthenticator, server: ServerAuthenticator
) -> tuple[ErrorCode, ErrorCode, bytes]:
    assert server.handshake(auth.MECHANISM) is ErrorCode.NONE
    code1, server_nonce = server.authenticate(client.first_message())
    assert code1 is ErrorCode.NONE
    code2, proof = server.authenticate(client.on_challenge(server_nonce))
    return code1, code2, proof


def test_matching_secrets_authenticate_both_ways() -> None:
    client = ClientAuthenticator(SECRET, nonce_factory=_seeded_nonces(1))
    server = ServerAuthenticator(SECRET, nonce_factory=_seeded_nonces(2))
    assert server.mechanisms == [auth.MECHANISM]
    _, code, proof = _run_exchange(client, server)
    assert code is ErrorCode.NONE
    assert server.authenticated
    client.on_server_proof(proof)
    assert client.authenticated


def test_wrong_secret_fails_and_stays_failed() -> None:
    client = ClientAuthenticator(b"not-the-cluster-secret!!", nonce_factory=_seeded_nonces(1))
    server = ServerAuthenticator(SECRET, nonce_factory=_seeded_nonces(2))
    _, code, proof = _run_exchange(client, server)
    assert code is ErrorCode.SASL_AUTHENTICATION_FAILED
    assert proof == b""
    assert server.state is ServerState.FAILED
    # No second attempt on the same connection, even with the right proof.
    assert server.authenticate(b"\x00" * 32) == (ErrorCode.ILLEGAL_SASL_STATE, b"")
    assert server.handshake(auth.MECHANISM) is ErrorCode.ILLEGAL_SASL_STATE
    assert not server.authenticated


def test_client_rejects_a_server_that_does_not_know_the_secret() -> None:
    client = ClientAuthenticator(SECRET, nonce_factory=_seeded_nonces(1))
    impostor_key = auth.derive_key(b"impostor-secret-0123")
    client_nonce = client.first_message()
    server_nonce = bytes(32)
    client.on_challenge(server_nonce)
    with pytest.raises(AuthenticationError):
        client.on_server_proof(auth.server_proof(impostor_key, client_nonce, server_nonce))
    assert not client.authenticated


def test_a_reflected_client_proof_is_not_a_server_proof() -> None:
    client = ClientAuthenticator(SECRET, nonce_factory=_seeded_nonces(1))
    client_nonce = client.first_message()
    my_proof = client.on_challenge(bytes(range(32)))
    assert my_proof == auth.client_proof(auth.derive_key(SECRET), client_nonce, bytes(range(32)))
    with pytest.raises(AuthenticationError):
        client.on_server_proof(my_proof)


def test_a_replayed_client_proof_fails_against_a_fresh_server_nonce() -> None:
    client = ClientAuthenticator(SECRET, nonce_factory=_seeded_nonces(1))
    first = ServerAuthenticator(SECRET, nonce_factory=_seeded_nonces(2))
    first.handshake(auth.MECHANISM)
    client_nonce = client.first_message()
    _, server_nonce = first.authenticate(client_nonce)
    recorded = client.on_challenge(server_nonce)
    # An eavesdropper replays the same two messages on a new connection.
    second = ServerAuthenticator(SECRET, nonce_factory=_seeded_nonces(3))
    second.handshake(auth.MECHANISM)
    second.authenticate(client_nonce)
    assert second.authenticate(recorded)[0] is ErrorCode.SASL_AUTHENTICATION_FAILED


def test_unsupported_mechanism_and_server_without_secret() -> None:
    server = ServerAuthenticator(SECRET)
    assert server.handshake("PLAIN") is ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert server.state is ServerState.AWAIT_HANDSHAKE  # may pick again
    assert server.handshake(auth.MECHANISM) is ErrorCode.NONE
    closed = ServerAuthenticator(None)
    assert closed.mechanisms == []
    assert closed.handshake(auth.MECHANISM) is ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert closed.authenticate(b"\x00" * 32) == (ErrorCode.ILLEGAL_SASL_STATE, b"")


def test_out_of_order_and_malformed_messages_fail() -> None:
    server = ServerAuthenticator(SECRET)
    assert server.authenticate(b"x" * 32)[0] is ErrorCode.ILLEGAL_SASL_STATE
    server = ServerAuthenticator(SECRET)
    server.handshake(auth.MECHANISM)
    assert server.authenticate(b"short")[0] is ErrorCode.SASL_AUTHENTICATION_FAILED
    client = ClientAuthenticator(SECRET)
    with pytest.raises(AuthenticationError):
        client.on_challenge(b"x" * 32)
    client = ClientAuthenticator(SECRET)
    client.first_message()
    with pytest.raises(AuthenticationError):
        client.on_challenge(b"short")


def test_short_secrets_are_refused() -> None:
    with pytest.raises(ValueError, match="at least"):
        auth.derive_key(b"short")
