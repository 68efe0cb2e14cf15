"""CreateAcls and DeleteAcls at the controller (actors/controller/acls.py), on a ManualClock with
a real metadata log and recording channels: ACLs are stored once, refused with the reason when
invalid, deleted by filter, sent to every live broker (and to one that registers later), and
survive a restart and a snapshot."""

from __future__ import annotations

from pathlib import Path

from actors.acl.bindings import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from actors.controller.acls import CreateAcls, DeleteAcls
from actors.controller.model import ControllerModel
from tests.unit.actors.controller.harness import BROKERS, ControllerHarness, cluster, of_type
from wire.errors import ErrorCode
from wire.messages import (
    AclCreation,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsFilter,
    DeleteAclsRequest,
    DeleteAclsResponse,
    UpdateMetadataAcl,
    UpdateMetadataRequest,
)
from wire.metadata_records import (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    decode_record,
    encode_record,
)


def creation(
    principal: str = "User:alice",
    op: AclOperation = AclOperation.READ,
    name: str = "orders",
    kind: ResourceType = ResourceType.TOPIC,
    pattern: PatternType = PatternType.LITERAL,
) -> AclCreation:
    return AclCreation(
        resource_type=kind,
        resource_name=name,
        resource_pattern_type=pattern,
        principal=principal,
        host="*",
        operation=op,
        permission_type=AclPermissionType.ALLOW,
    )


async def create(h: ControllerHarness, *creations: AclCreation) -> CreateAclsResponse:
    return await h.controller.ask(CreateAcls(CreateAclsRequest(creations=list(creations))))


async def delete(h: ControllerHarness, **given: object) -> DeleteAclsResponse:
    fields: dict[str, object] = {
        "resource_type_filter": ResourceType.ANY,
        "pattern_type_filter": PatternType.ANY,
        "operation": AclOperation.ANY,
        "permission_type": AclPermissionType.ANY,
    }
    fields.update(given)
    wire_filter = DeleteAclsFilter(**fields)  # type: ignore[arg-type]
    return await h.controller.ask(DeleteAcls(DeleteAclsRequest(filters=[wire_filter])))


def principals(acls: list[UpdateMetadataAcl] | None) -> list[str]:
    assert acls is not None
    return sorted(a.principal for a in acls)


def test_acl_records_round_trip_through_the_codec() -> None:
    record = AccessControlEntryRecord(bytes(range(16)), 2, "orders", 3, "User:a", "*", 3, 3)
    assert decode_record(encode_record(record)) == record
    removal = RemoveAccessControlEntryRecord(bytes(range(16)))
    assert decode_record(encode_record(removal)) == removal


async def test_created_acls_are_stored_once_and_sent_to_every_broker(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    response = await create(harness, creation("User:alice"), creation("User:bob"))
    assert [r.error_code for r in response.results] == [ErrorCode.NONE, ErrorCode.NONE]
    assert len(harness.controller.model.acls()) == 2
    sent = harness.channels.take()
    for broker_id in BROKERS:
        (metadata,) = of_type(sent, UpdateMetadataRequest, broker_id)
        assert principals(metadata.acls) == ["User:alice", "User:bob"]

    again = await create(harness, creation("User:alice"))
    assert again.results[0].error_code == ErrorCode.NONE
    assert len(harness.controller.model.acls()) == 2  # no second record
    assert harness.channels.take() == []  # nothing changed, nothing sent


async def test_invalid_acls_are_refused_with_the_reason_and_nothing_is_written(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    response = await create(
        harness,
        creation(principal="alice"),
        creation(kind=ResourceType.CLUSTER, name="other", op=AclOperation.ALTER),
        creation(op=AclOperation.ANY),
        creation(pattern=PatternType.MATCH),
    )
    assert [r.error_code for r in response.results] == [ErrorCode.INVALID_REQUEST] * 4
    assert all(r.error_message for r in response.results)
    assert harness.controller.model.acls() == []
    assert harness.channels.take() == []


async def test_delete_removes_what_the_filter_matches_and_tells_the_brokers(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await create(harness, creation("User:alice"), creation("User:bob"), creation(name="pay"))
    harness.channels.take()

    response = await delete(harness, principal_filter="User:alice", resource_name_filter="orders")
    (result,) = response.filter_results
    assert result.error_code == ErrorCode.NONE
    assert [(m.principal, m.resource_name) for m in result.matching_acls] == [
        ("User:alice", "orders")
    ]
    assert sorted((a.principal, a.resource_name) for a in harness.controller.model.acls()) == [
        ("User:alice", "pay"),
        ("User:bob", "orders"),
    ]
    (metadata,) = of_type(harness.channels.take(), UpdateMetadataRequest, BROKERS[0])
    assert principals(metadata.acls) == ["User:alice", "User:bob"]


async def test_a_filter_with_an_unknown_type_is_refused(harness: ControllerHarness) -> None:
    await cluster(harness)
    await create(harness, creation())
    response = await delete(harness, resource_type_filter=ResourceType.UNKNOWN)
    assert response.filter_results[0].error_code == ErrorCode.INVALID_REQUEST
    assert len(harness.controller.model.acls()) == 1


async def test_a_broker_that_registers_later_gets_the_acls(harness: ControllerHarness) -> None:
    await cluster(harness, (0,))
    await create(harness, creation())
    harness.channels.take()
    assert await harness.register(1) is ErrorCode.NONE
    (metadata,) = of_type(harness.channels.take(), UpdateMetadataRequest, 1)
    assert principals(metadata.acls) == ["User:alice"]


async def test_acls_survive_a_restart_and_a_snapshot(tmp_path: Path) -> None:
    first = ControllerHarness(tmp_path / "controller")
    await first.start()
    try:
        await cluster(first)
        await create(first, creation("User:alice"), creation("User:bob"))
        await delete(first, principal_filter="User:bob")
        stored = first.controller.model.acls()
    finally:
        await first.stop()

    second = ControllerHarness(tmp_path / "controller")
    await second.start()
    try:
        assert second.controller.model.acls() == stored
        rebuilt = ControllerModel()
        for record in second.controller.model.snapshot():
            rebuilt.apply(record)
        assert rebuilt == second.controller.model
        assert rebuilt.acls() == stored
    finally:
        await second.stop()
