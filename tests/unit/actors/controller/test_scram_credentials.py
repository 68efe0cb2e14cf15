"""AlterUserScramCredentials at the controller (actors/controller/scram_credentials.py), on a
ManualClock with a real metadata log and recording channels: credentials are derived and stored
without the password, refused with Kafka's codes, sent to every live broker (and to one that
registers later), deleted, and kept across a restart and a snapshot."""

from __future__ import annotations

from pathlib import Path

from actors.controller.model import ControllerModel
from actors.controller.scram_credentials import AlterUserScramCredentials
from runtime.net.scram import SCRAM_SHA_256, SCRAM_SHA_512, credential, salted_password
from tests.unit.actors.controller.harness import BROKERS, ControllerHarness, cluster, of_type
from wire.errors import ErrorCode
from wire.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    UpdateMetadataRequest,
)
from wire.metadata_records import (
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
    decode_record,
    encode_record,
)

SALT = b"salt-of-the-earth"
PASSWORD = b"s3cret-password"


def upsert(
    name: str = "alice", mechanism: int = 1, iterations: int = 4096, salted: bytes | None = None
) -> ScramCredentialUpsertion:
    m = SCRAM_SHA_512 if mechanism == 2 else SCRAM_SHA_256
    if salted is None:
        salted = salted_password(m, PASSWORD, SALT, max(iterations, 1))
    return ScramCredentialUpsertion(
        name=name, mechanism=mechanism, iterations=iterations, salt=SALT, salted_password=salted
    )


async def alter(
    h: ControllerHarness,
    upsertions: list[ScramCredentialUpsertion] | None = None,
    deletions: list[ScramCredentialDeletion] | None = None,
) -> AlterUserScramCredentialsResponse:
    request = AlterUserScramCredentialsRequest(
        upsertions=upsertions or [], deletions=deletions or []
    )
    return await h.controller.ask(AlterUserScramCredentials(request))


def outcomes(response: AlterUserScramCredentialsResponse) -> dict[str, ErrorCode]:
    return {r.user: ErrorCode(r.error_code) for r in response.results}


def test_records_round_trip_through_the_codec() -> None:
    record = UserScramCredentialRecord("a,b", 2, b"salt", b"s" * 64, b"k" * 64, 8192)
    assert decode_record(encode_record(record)) == record
    removal = RemoveUserScramCredentialRecord("a,b", 2)
    assert decode_record(encode_record(removal)) == removal


async def test_upsertion_stores_derived_keys_only_and_tells_every_broker(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    response = await alter(harness, [upsert("alice", 1), upsert("alice", 2), upsert("bob", 1)])
    assert outcomes(response) == {"alice": ErrorCode.NONE, "bob": ErrorCode.NONE}
    stored = harness.controller.model.scram_credential("alice", 1)
    expected = credential(
        SCRAM_SHA_256, SALT, salted_password(SCRAM_SHA_256, PASSWORD, SALT, 4096), 4096
    )
    assert stored is not None
    assert (stored.salt, stored.stored_key, stored.server_key, stored.iterations) == (
        expected.salt,
        expected.stored_key,
        expected.server_key,
        expected.iterations,
    )
    salted = salted_password(SCRAM_SHA_256, PASSWORD, SALT, 4096)
    for record in harness.controller.model.snapshot():
        assert salted not in repr(record).encode()  # nothing a login could be made from
    sent = harness.channels.take()
    for broker_id in BROKERS:
        (metadata,) = of_type(sent, UpdateMetadataRequest, broker_id)
        assert metadata.scram_credentials is not None
        assert sorted((c.name, c.mechanism) for c in metadata.scram_credentials) == [
            ("alice", 1),
            ("alice", 2),
            ("bob", 1),
        ]


async def test_refusals_write_nothing(harness: ControllerHarness) -> None:
    await cluster(harness)
    response = await alter(
        harness,
        [
            upsert("few", iterations=4095),
            upsert("many", iterations=16385),
            upsert("badmech", mechanism=3),
            upsert("", mechanism=1),
            upsert("short", salted=b"too short"),
            upsert("twice", 1),
            upsert("twice", 1),
        ],
        [ScramCredentialDeletion(name="ghost", mechanism=1)],
    )
    assert outcomes(response) == {
        "ghost": ErrorCode.RESOURCE_NOT_FOUND,
        "few": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "many": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "badmech": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        "": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "short": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "twice": ErrorCode.DUPLICATE_RESOURCE,
    }
    messages = {r.user: r.error_message for r in response.results}
    assert messages["few"] == "Too few iterations"
    assert harness.controller.model.scram_credentials() == []
    assert harness.channels.take() == []


async def test_deletion_and_a_broker_that_registers_later(harness: ControllerHarness) -> None:
    await cluster(harness, (0,))
    await alter(harness, [upsert("alice", 1), upsert("alice", 2)])
    harness.channels.take()
    response = await alter(harness, deletions=[ScramCredentialDeletion(name="alice", mechanism=1)])
    assert outcomes(response) == {"alice": ErrorCode.NONE}
    assert [(c.name, c.mechanism) for c in harness.controller.model.scram_credentials()] == [
        ("alice", 2)
    ]
    (metadata,) = of_type(harness.channels.take(), UpdateMetadataRequest, 0)
    assert [(c.name, c.mechanism) for c in metadata.scram_credentials or []] == [("alice", 2)]
    assert await harness.register(1) is ErrorCode.NONE
    (joined,) = of_type(harness.channels.take(), UpdateMetadataRequest, 1)
    assert [(c.name, c.mechanism) for c in joined.scram_credentials or []] == [("alice", 2)]


async def test_credentials_survive_a_restart_and_a_snapshot(tmp_path: Path) -> None:
    first = ControllerHarness(tmp_path / "controller")
    await first.start()
    try:
        await cluster(first)
        await alter(first, [upsert("alice", 1), upsert("bob", 2)])
        await alter(first, deletions=[ScramCredentialDeletion(name="bob", mechanism=2)])
        stored = first.controller.model.scram_credentials()
    finally:
        await first.stop()

    second = ControllerHarness(tmp_path / "controller")
    await second.start()
    try:
        assert second.controller.model.scram_credentials() == stored
        assert [c.name for c in stored] == ["alice"]
        rebuilt = ControllerModel()
        for record in second.controller.model.snapshot():
            rebuilt.apply(record)
        assert rebuilt == second.controller.model
    finally:
        await second.stop()
