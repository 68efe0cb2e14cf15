"""CreateAcls and DeleteAcls at the controller (brokers forward them from clients, KIP-590): the
ACLs in the metadata log (Kafka's AclControlManager).

CreateAcls: each creation is checked on its own (actors/acl/bindings.py's `binding_problem`:
an unknown or open type, an empty name, a CLUSTER not named `kafka-cluster`, a principal that
is not `TYPE:NAME` — INVALID_REQUEST with the reason, as Kafka answers); a valid one that is
not stored yet becomes an AccessControlEntryRecord with a fresh 16-byte id. An ACL that already
exists succeeds without a second record, as in Kafka.

DeleteAcls: each filter deletes every stored ACL it matches (an UNKNOWN type in a filter:
INVALID_REQUEST), answered with the ACLs it deleted; an ACL two filters match is removed once,
and listed under the first. One RemoveAccessControlEntryRecord per deleted ACL.

The records of one request are committed together before the answer, and then every live broker
gets UpdateMetadata with the whole ACL set (`Outbox.acls`); a broker that registers later gets
it with the rest of its metadata (every UpdateMetadata of everything carries the ACLs). A
restarted controller replays them, and a snapshot keeps them.

State: none of its own; it works on the controller actor's (actors/controller/context.py), from
the actor's handlers, one message at a time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from actors.acl.bindings import AclBinding, AclBindingFilter, binding_problem
from actors.controller.context import ControllerContext
from actors.controller.journal import Change
from actors.controller.outbox import Outbox
from runtime.actor import Ask
from wire.errors import ErrorCode
from wire.messages import (
    AclCreation,
    AclCreationResult,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsFilter,
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsRequest,
    DeleteAclsResponse,
)
from wire.metadata_records import AccessControlEntryRecord, RemoveAccessControlEntryRecord

log = logging.getLogger("ketch.controller")

ACL_ID_BYTES = 16


@dataclass(frozen=True, slots=True)
class CreateAcls(Ask[CreateAclsResponse]):
    request: CreateAclsRequest


@dataclass(frozen=True, slots=True)
class DeleteAcls(Ask[DeleteAclsResponse]):
    request: DeleteAclsRequest


def binding_of(record: AccessControlEntryRecord) -> AclBinding:
    return AclBinding.of(
        record.resource_type,
        record.resource_name,
        record.pattern_type,
        record.principal,
        record.host,
        record.operation,
        record.permission_type,
    )


def _creation_binding(creation: AclCreation) -> AclBinding | str:
    try:
        binding = AclBinding.of(
            creation.resource_type,
            creation.resource_name,
            creation.resource_pattern_type,
            creation.principal,
            creation.host,
            creation.operation,
            creation.permission_type,
        )
    except ValueError as error:
        return f"Invalid ACL: {error}"
    return binding_problem(binding) or binding


async def create_acls(ctx: ControllerContext, request: CreateAclsRequest) -> CreateAclsResponse:
    stored = {binding_of(r) for r in ctx.model.acls()}
    taken = {r.id for r in ctx.model.acls()}
    change = Change(ctx.model)
    results = []
    for creation in request.creations:
        binding = _creation_binding(creation)
        if isinstance(binding, str):
            results.append(
                AclCreationResult(error_code=ErrorCode.INVALID_REQUEST, error_message=binding)
            )
            continue
        if binding not in stored:
            stored.add(binding)
            acl_id = _new_id(ctx, taken)
            change.add(
                AccessControlEntryRecord(
                    acl_id,
                    binding.resource_type,
                    binding.name,
                    binding.pattern_type,
                    binding.principal,
                    binding.host,
                    binding.operation,
                    binding.permission_type,
                )
            )
            log.info("%s: ACL created: %s", ctx.name, binding)
        results.append(AclCreationResult())
    await _commit_and_announce(ctx, change)
    return CreateAclsResponse(results=results)


async def delete_acls(ctx: ControllerContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    remaining = ctx.model.acls()
    change = Change(ctx.model)
    results = []
    for wire_filter in request.filters:
        acl_filter = _filter(wire_filter)
        if isinstance(acl_filter, str):
            results.append(
                DeleteAclsFilterResult(
                    error_code=ErrorCode.INVALID_REQUEST, error_message=acl_filter
                )
            )
            continue
        deleted = [r for r in remaining if acl_filter.matches(binding_of(r))]
        remaining = [r for r in remaining if r not in deleted]
        for record in deleted:
            change.add(RemoveAccessControlEntryRecord(record.id))
            log.info("%s: ACL deleted: %s", ctx.name, binding_of(record))
        results.append(
            DeleteAclsFilterResult(matching_acls=[_matching(record) for record in deleted])
        )
    await _commit_and_announce(ctx, change)
    return DeleteAclsResponse(filter_results=results)


def _filter(wire_filter: DeleteAclsFilter) -> AclBindingFilter | str:
    try:
        acl_filter = AclBindingFilter.of(
            wire_filter.resource_type_filter,
            wire_filter.resource_name_filter,
            wire_filter.pattern_type_filter,
            wire_filter.principal_filter,
            wire_filter.host_filter,
            wire_filter.operation,
            wire_filter.permission_type,
        )
    except ValueError as error:
        return f"Invalid filter: {error}"
    return acl_filter.problem() or acl_filter


def _matching(record: AccessControlEntryRecord) -> DeleteAclsMatchingAcl:
    return DeleteAclsMatchingAcl(
        resource_type=record.resource_type,
        resource_name=record.resource_name,
        pattern_type=record.pattern_type,
        principal=record.principal,
        host=record.host,
        operation=record.operation,
        permission_type=record.permission_type,
    )


def _new_id(ctx: ControllerContext, taken: set[bytes]) -> bytes:
    # From the actor's seeded random source, so a test's ids repeat; never one in use.
    while True:
        candidate = ctx.rng.getrandbits(8 * ACL_ID_BYTES).to_bytes(ACL_ID_BYTES, "big")
        if candidate not in taken:
            taken.add(candidate)
            return candidate


async def _commit_and_announce(ctx: ControllerContext, change: Change) -> None:
    if not change.records:
        return
    await ctx.journal.commit(change)
    ctx.sender.flush(Outbox(acls=True))
