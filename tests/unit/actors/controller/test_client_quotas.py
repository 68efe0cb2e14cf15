"""AlterClientQuotas at the controller (actors/controller/client_quotas.py), on a ManualClock with
a real metadata log and recording channels: quotas become ClientQuotaRecords, invalid entries
are refused with the reason (the others applied), validate_only writes nothing, every live
broker (and one that registers later) gets the whole set, and the quotas survive a restart and a
snapshot."""

from __future__ import annotations

from pathlib import Path

from actors.controller.client_quotas import AlterClientQuotas
from actors.controller.model import ControllerModel
from tests.unit.actors.controller.harness import BROKERS, ControllerHarness, cluster, of_type
from wire.errors import ErrorCode
from wire.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    UpdateMetadataClientQuota,
    UpdateMetadataRequest,
)
from wire.messages.quotas import AlterClientQuotasEntry, EntityData, OpData
from wire.metadata_records import ClientQuotaRecord, decode_record, encode_record

PRODUCE = "producer_byte_rate"
CONSUME = "consumer_byte_rate"


def client(name: str | None) -> list[EntityData]:
    return [EntityData(entity_type="client-id", entity_name=name)]


def entry(entity: list[EntityData], **values: float | None) -> AlterClientQuotasEntry:
    """An entry setting each key given a value and removing each key given None."""
    ops = [
        OpData(key=key, value=0.0, remove=True)
        if value is None
        else OpData(key=key, value=float(value))
        for key, value in values.items()
    ]
    return AlterClientQuotasEntry(entity=entity, ops=ops)


async def alter(
    h: ControllerHarness, *entries: AlterClientQuotasEntry, validate_only: bool = False
) -> AlterClientQuotasResponse:
    request = AlterClientQuotasRequest(entries=list(entries), validate_only=validate_only)
    return await h.controller.ask(AlterClientQuotas(request))


def table(quotas: list[UpdateMetadataClientQuota] | None) -> dict[tuple[object, ...], object]:
    assert quotas is not None
    return {
        tuple((e.entity_type, e.entity_name) for e in q.entity): {v.key: v.value for v in q.values}
        for q in quotas
    }


def test_client_quota_records_round_trip_through_the_codec() -> None:
    record = ClientQuotaRecord((("client-id", None), ("user", "alice")), PRODUCE, 1024.0)
    assert decode_record(encode_record(record)) == record
    removal = ClientQuotaRecord((("client-id", "c"),), CONSUME, 0.0, remove=True)
    assert decode_record(encode_record(removal)) == removal


async def test_quotas_are_stored_and_sent_to_every_broker(harness: ControllerHarness) -> None:
    await cluster(harness)
    response = await alter(
        harness,
        entry(client("slow"), **{PRODUCE: 100_000, CONSUME: 200_000}),
        entry([EntityData(entity_type="user", entity_name=None)], **{PRODUCE: 5e6}),
    )
    assert [e.error_code for e in response.entries] == [ErrorCode.NONE, ErrorCode.NONE]
    assert [e.entity for e in response.entries] == [
        client("slow"),
        [EntityData(entity_type="user", entity_name=None)],
    ]
    expected = {
        (("client-id", "slow"),): {PRODUCE: 100_000.0, CONSUME: 200_000.0},
        (("user", None),): {PRODUCE: 5e6},
    }
    sent = harness.channels.take()
    for broker_id in BROKERS:
        (metadata,) = of_type(sent, UpdateMetadataRequest, broker_id)
        assert table(metadata.client_quotas) == expected

    # Setting what is already set writes nothing and sends nothing.
    again = await alter(harness, entry(client("slow"), **{PRODUCE: 100_000}))
    assert again.entries[0].error_code == ErrorCode.NONE
    assert harness.channels.take() == []

    # Removing the last key of an entity removes the entity.
    await alter(harness, entry(client("slow"), **{PRODUCE: None, CONSUME: None}))
    (metadata,) = of_type(harness.channels.take(), UpdateMetadataRequest, BROKERS[0])
    assert table(metadata.client_quotas) == {(("user", None),): {PRODUCE: 5e6}}


async def test_invalid_entries_are_refused_with_the_reason_and_the_others_applied(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    ip = [EntityData(entity_type="ip", entity_name="10.0.0.1")]
    twice = client("a") + client("b")
    response = await alter(
        harness,
        entry(client("ok"), **{PRODUCE: 1000}),
        entry(client("zero"), **{PRODUCE: 0}),
        entry(client("negative"), **{CONSUME: -5}),
        entry(client("fraction"), **{PRODUCE: 10.5}),
        entry(client("unknown"), unknown_key=10),
        entry(client("cpu"), request_percentage=50),
        entry(ip, connection_creation_rate=10),
        entry(twice, **{PRODUCE: 10}),
        entry([], **{PRODUCE: 10}),
        entry([EntityData(entity_type="group", entity_name="g")], **{PRODUCE: 10}),
        entry(client("ok"), **{CONSUME: 10}),  # the same entity twice in one request
    )
    codes = [e.error_code for e in response.entries]
    assert codes == [ErrorCode.NONE] + [ErrorCode.INVALID_REQUEST] * 10
    messages = [e.error_message or "" for e in response.entries[1:]]
    assert "greater than 0" in messages[0]
    assert "greater than 0" in messages[1]
    assert "Long" in messages[2]
    assert "unknown_key" in messages[3]
    assert "request_percentage" in messages[4]
    assert "ip" in messages[5]
    assert "client-id" in messages[6]
    assert "empty" in messages[7]
    assert "group" in messages[8]
    assert "more than once" in messages[9]
    assert harness.controller.model.client_quotas() == {(("client-id", "ok"),): {PRODUCE: 1000.0}}


async def test_validate_only_answers_the_same_and_writes_nothing(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    harness.channels.take()
    response = await alter(
        harness,
        entry(client("c"), **{PRODUCE: 1000}),
        entry(client("d"), **{PRODUCE: -1}),
        validate_only=True,
    )
    assert [e.error_code for e in response.entries] == [ErrorCode.NONE, ErrorCode.INVALID_REQUEST]
    assert harness.controller.model.client_quotas() == {}
    assert harness.channels.take() == []


async def test_a_broker_that_registers_later_gets_the_quotas(harness: ControllerHarness) -> None:
    await cluster(harness, (0,))
    await alter(harness, entry(client("c"), **{CONSUME: 4096}))
    harness.channels.take()
    assert await harness.register(1) is ErrorCode.NONE
    (metadata,) = of_type(harness.channels.take(), UpdateMetadataRequest, 1)
    assert table(metadata.client_quotas) == {(("client-id", "c"),): {CONSUME: 4096.0}}


async def test_quotas_survive_a_restart_and_a_snapshot(tmp_path: Path) -> None:
    first = ControllerHarness(tmp_path / "controller")
    await first.start()
    try:
        await cluster(first)
        user_client = [
            EntityData(entity_type="user", entity_name="alice"),
            EntityData(entity_type="client-id", entity_name=None),
        ]
        await alter(first, entry(user_client, **{PRODUCE: 1e6, CONSUME: 2e6}))
        await alter(first, entry(client("gone"), **{PRODUCE: 10}))
        await alter(first, entry(client("gone"), **{PRODUCE: None}))
        stored = first.controller.model.client_quotas()
        assert stored == {(("client-id", None), ("user", "alice")): {PRODUCE: 1e6, CONSUME: 2e6}}
    finally:
        await first.stop()

    second = ControllerHarness(tmp_path / "controller")
    await second.start()
    try:
        assert second.controller.model.client_quotas() == stored
        rebuilt = ControllerModel()
        for record in second.controller.model.snapshot():
            rebuilt.apply(record)
        assert rebuilt == second.controller.model
        assert rebuilt.client_quotas() == stored
    finally:
        await second.stop()
