"""SCRAM (runtime/net/scram.py): RFC 7677's test vector, both mechanisms end to end, and every
refusal of the server's state machine."""

from __future__ import annotations

import base64

import pytest

from runtime.net.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramClient,
    ScramCredential,
    ScramError,
    ScramMechanism,
    ScramServer,
    ServerState,
    credential,
    escape_name,
    salted_password,
    unescape_name,
)

# RFC 7677 section 3.
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def stored(mechanism: ScramMechanism, password: bytes, salt: bytes = RFC_SALT) -> ScramCredential:
    return credential(mechanism, salt, salted_password(mechanism, password, salt, 4096), 4096)


def rfc_server(user: str = "user") -> ScramServer:
    cred = stored(SCRAM_SHA_256, b"pencil")
    return ScramServer(
        SCRAM_SHA_256,
        lambda name: cred if name == user else None,
        server_nonce=lambda: RFC_SERVER_NONCE,
        fake_salt_key=b"k" * 32,
    )


def test_rfc7677_vector_server_side() -> None:
    server = rfc_server()
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete
    assert server.user == "user"


def test_rfc7677_vector_client_side() -> None:
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first_message() == RFC_CLIENT_FIRST
    assert client.final_message(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)
    with pytest.raises(ScramError):
        client.verify(b"v=" + base64.b64encode(b"\x00" * 32))


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_round_trip_with_escaped_name(mechanism: ScramMechanism) -> None:
    name = "a,b=c"
    cred = stored(mechanism, b"secret")
    server = ScramServer(mechanism, lambda user: cred if user == name else None)
    client = ScramClient(mechanism, name, "secret")
    first = client.first_message()
    assert b"n=a=2Cb=3Dc," in first
    client.verify(server.evaluate(client.final_message(server.evaluate(first))))
    assert server.complete
    assert server.user == name


def test_wrong_password_fails_at_the_proof() -> None:
    server = rfc_server()
    client = ScramClient(SCRAM_SHA_256, "user", "pencil2")
    final = client.final_message(server.evaluate(client.first_message()))
    with pytest.raises(ScramError, match="invalid client proof"):
        server.evaluate(final)
    assert server.state is ServerState.FAILED
    with pytest.raises(ScramError):
        server.evaluate(final)  # a failed exchange stays failed


def test_unknown_user_sees_a_stable_salt_and_fails_at_the_proof() -> None:
    answers = []
    for _ in range(2):
        server = rfc_server()
        client = ScramClient(SCRAM_SHA_256, "mallory", "pencil", nonce="abc")
        server_first = server.evaluate(client.first_message())
        answers.append(server_first.split(b",")[1:])
        with pytest.raises(ScramError):
            server.evaluate(client.final_message(server_first))
    assert answers[0] == answers[1]  # same salt and iterations: nothing tells it is unknown
    assert answers[0][1] == b"i=4096"


@pytest.mark.parametrize(
    "first",
    [
        b"y,,n=user,r=abc",  # channel binding asked for
        b"p=tls-unique,,n=user,r=abc",
        b"n,,r=abc,n=user",  # attributes out of order
        b"n,,n=,r=abc",  # empty name
        b"n,,n=us=2Xer,r=abc",  # bad escape
        b"n,,n=user,r=a,b",
        b"n,a=other,n=user,r=abc",  # authorization id of someone else
        b"n,,n=user,r=abc,tokenauth=true",  # delegation tokens
        b"\xff\xfe",
        b"",
    ],
)
def test_client_first_refusals(first: bytes) -> None:
    server = rfc_server()
    with pytest.raises(ScramError):
        server.evaluate(first)
    assert server.state is ServerState.FAILED


def test_authorization_id_equal_to_the_user_is_accepted() -> None:
    server = rfc_server()
    assert server.evaluate(b"n,a=user,n=user,r=abc").startswith(b"r=abc")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda final: final.replace(b"c=biws", b"c=eSws"),  # channel binding y,,
        lambda final: final.replace(b"r=rOpr", b"r=xOpr"),  # wrong nonce
        lambda final: final.split(b",p=")[0],  # no proof
        lambda final: final.split(b",p=")[0] + b",p=!!!",  # proof not base64
        lambda final: final.split(b",p=")[0] + b",p=" + base64.b64encode(b"short"),
    ],
)
def test_client_final_refusals(mutate: object) -> None:
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    assert callable(mutate)
    with pytest.raises(ScramError):
        server.evaluate(mutate(RFC_CLIENT_FINAL))
    assert server.state is ServerState.FAILED


def test_message_after_completion_is_refused() -> None:
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    server.evaluate(RFC_CLIENT_FINAL)
    with pytest.raises(ScramError, match="unexpected"):
        server.evaluate(RFC_CLIENT_FIRST)


def test_escaping_round_trips() -> None:
    for name in ["plain", "a,b", "x=y", "=2C", ",=,"]:
        assert unescape_name(escape_name(name)) == name
    with pytest.raises(ScramError):
        unescape_name("a=")
