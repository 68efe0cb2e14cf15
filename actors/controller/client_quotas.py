"""AlterClientQuotas at the controller (brokers forward it from clients, KIP-590): the client
quotas in the metadata log (Kafka's ClientQuotaControlManager).

Each entry names an entity and its operations; it is checked on its own
(actors/quota/entities.py's `entry_problem`: entity types `user` and `client-id`, `ip`
refused, known keys `producer_byte_rate` / `consumer_byte_rate` at most once each, a value to
set a whole number > 0) and a refused entry is answered INVALID_REQUEST with the reason, the
others applied, as Kafka answers. An entity named by two entries: the second is refused. A
valid entry becomes one ClientQuotaRecord per operation that changes something (setting the
value it already has, or removing a key it does not have, writes nothing). With validate_only
the answers are the same and nothing is written.

The records of one request are committed together before the answer; then every live broker
gets UpdateMetadata with the whole quota set (`Outbox.client_quotas`), and a broker that
registers later gets it with the rest of its metadata (an UpdateMetadata of everything carries
the quotas). A restarted controller replays them; a snapshot keeps them (model.py).

State: none of its own; it works on the controller actor's (actors/controller/context.py), from
the actor's handler, one message at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from actors.controller.context import ControllerContext
from actors.controller.journal import Change
from actors.controller.model import QuotaEntityKey
from actors.controller.outbox import Outbox
from actors.quota.entities import QuotaEntity, apply_ops, entry_problem
from runtime.actor import Ask
from wire.errors import ErrorCode
from wire.messages import AlterClientQuotasRequest, AlterClientQuotasResponse
from wire.messages.quotas import AlterClientQuotasEntryResult, EntityData, OpData
from wire.metadata_records import ClientQuotaRecord

log = logging.getLogger("ketch.controller")


@dataclass(frozen=True, slots=True)
class AlterClientQuotas(Ask[AlterClientQuotasResponse]):
    request: AlterClientQuotasRequest


def entity_key(entity: QuotaEntity) -> QuotaEntityKey:
    """The record's form of an entity: its components sorted by type."""
    return tuple(sorted((c.entity_type, c.entity_name) for c in entity.components()))


async def alter_client_quotas(
    ctx: ControllerContext, request: AlterClientQuotasRequest
) -> AlterClientQuotasResponse:
    current = ctx.model.client_quotas()
    records: list[ClientQuotaRecord] = []
    seen: set[QuotaEntityKey] = set()
    results = []
    for entry in request.entries:
        outcome = _entry_records(entry.entity, entry.ops, current, seen)
        if isinstance(outcome, str):
            results.append(_result(entry.entity, ErrorCode.INVALID_REQUEST, outcome))
            continue
        records.extend(outcome)
        results.append(_result(entry.entity, ErrorCode.NONE, None))
    if records and not request.validate_only:
        change = Change(ctx.model)
        for record in records:
            change.add(record)
        await ctx.journal.commit(change)
        log.info("%s: client quotas are now %s", ctx.name, ctx.model.client_quotas())
        outbox = Outbox()
        outbox.client_quotas = True
        ctx.sender.flush(outbox)
    return AlterClientQuotasResponse(entries=results)


def _entry_records(
    components: Sequence[EntityData],
    ops: Sequence[OpData],
    current: dict[QuotaEntityKey, dict[str, float]],
    seen: set[QuotaEntityKey],
) -> list[ClientQuotaRecord] | str:
    """The records an entry writes, or why it is refused."""
    entity = entry_problem(components, ops)
    if isinstance(entity, str):
        return entity
    key = entity_key(entity)
    if key in seen:
        return f"Entity {entity} is named more than once in the request"
    seen.add(key)
    before = current.get(key, {})
    after = apply_ops(before, ops)
    records = [
        ClientQuotaRecord(key, name, value)
        for name, value in after.items()
        if before.get(name) != value
    ]
    records.extend(
        ClientQuotaRecord(key, name, 0.0, remove=True) for name in before if name not in after
    )
    return records


def _result(
    entity: Sequence[EntityData], code: ErrorCode, message: str | None
) -> AlterClientQuotasEntryResult:
    return AlterClientQuotasEntryResult(error_code=code, error_message=message, entity=list(entity))
