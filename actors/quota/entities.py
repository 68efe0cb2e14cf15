"""Quota entities, the quota keys, and the checks of an AlterClientQuotas entry (KIP-546).

An entity names who a quota is for: a user (the principal's name, `User:alice` -> `alice`), a
client id, or a (user, client id) pair; each component may be the type's `<default>` (DEFAULT
here, a null name on the wire), which covers every user or client id that has no quota of its
own (manager.py has the order). `QuotaEntity(user=None, client_id=None)` is not an entity.

Keys ketch enforces (Kafka's QuotaConfigs names, values in bytes per second):

    producer_byte_rate   the bytes of Produce requests (KIP-13)
    consumer_byte_rate   the bytes of Fetch answers to consumers (never to followers)

Kafka's `request_percentage` (a share of the request handler threads' time, KIP-124) is refused:
ketch serves requests as coroutines on one event loop, where a request's own CPU time is not
measured, and a quota it cannot enforce honestly is not accepted. `controller_mutation_rate`
(KIP-599) and `connection_creation_rate` with the `ip` entity type (KIP-612) are not
implemented either and are refused with a message that says so.

`entry_problem` checks one AlterClientQuotas entry as Kafka's ClientQuotaControlManager does:
entity types `user` and `client-id`, each at most once, at least one; known keys, each at most
once; a value to set must be a whole number (the byte rates are Kafka LONG configs) greater than
0 and at most 2^63 - 1. A problem is answered INVALID_REQUEST with its text.

Values only: no state.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from wire.messages.quotas import (
    ENTITY_CLIENT_ID,
    ENTITY_IP,
    ENTITY_USER,
    EntityData,
    OpData,
)

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
QUOTA_KEYS: Final = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})
REQUEST_PERCENTAGE: Final = "request_percentage"
_NOT_ENFORCED: Final = {
    REQUEST_PERCENTAGE: "request_percentage is not enforced by ketch (requests run as coroutines "
    "on one event loop; a request's share of handler time is not measured)",
    "controller_mutation_rate": "controller_mutation_rate (KIP-599) is not implemented by ketch",
    "connection_creation_rate": "connection_creation_rate (KIP-612) is not implemented by ketch",
}
_MAX_LONG: Final = 2**63 - 1
USER_PRINCIPAL_PREFIX: Final = "User:"


class _Default(enum.Enum):
    DEFAULT = "<default>"

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Final = _Default.DEFAULT
"""The `<default>` entity of a type (a null entity name on the wire)."""

EntityName = str | _Default | None  # None: the entity has no component of that type


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """Who a quota is for; hashable, so quotas are kept by entity."""

    user: EntityName = None
    client_id: EntityName = None

    def components(self) -> list[EntityData]:
        """The wire form: (type, name) components, user first, None for `<default>`."""
        out = []
        for entity_type, name in ((ENTITY_USER, self.user), (ENTITY_CLIENT_ID, self.client_id)):
            if name is not None:
                out.append(EntityData(entity_type=entity_type, entity_name=_wire_name(name)))
        return out

    def __str__(self) -> str:
        parts = []
        for label, name in (("user", self.user), ("client-id", self.client_id)):
            if name is not None:
                parts.append(f"{label}={'<default>' if name is DEFAULT else name}")
        return ", ".join(parts)


def _wire_name(name: str | _Default) -> str | None:
    return None if name is DEFAULT else name


def user_of(principal: str) -> str:
    """The user a principal's quotas are for (`User:alice` -> `alice`; Kafka's
    `KafkaPrincipal.getName`)."""
    if principal.startswith(USER_PRINCIPAL_PREFIX):
        return principal[len(USER_PRINCIPAL_PREFIX) :]
    return principal


def entity_of(components: Sequence[EntityData]) -> QuotaEntity | str:
    """The entity the components name, or the problem with them."""
    if not components:
        return "Invalid empty client quota entity"
    user: EntityName = None
    client_id: EntityName = None
    for component in components:
        name: str | _Default = DEFAULT if component.entity_name is None else component.entity_name
        if component.entity_type == ENTITY_USER:
            if user is not None:
                return "Duplicate user entity type in client quota entity"
            user = name
        elif component.entity_type == ENTITY_CLIENT_ID:
            if client_id is not None:
                return "Duplicate client-id entity type in client quota entity"
            client_id = name
        elif component.entity_type == ENTITY_IP:
            return "ip quotas (connection_creation_rate, KIP-612) are not supported by ketch"
        else:
            return f"Unknown client quota entity type {component.entity_type!r}"
    return QuotaEntity(user=user, client_id=client_id)


def op_problem(op: OpData) -> str | None:
    """What is wrong with one operation of an entry, or None."""
    if op.key in _NOT_ENFORCED:
        return _NOT_ENFORCED[op.key]
    if op.key not in QUOTA_KEYS:
        return f"Invalid configuration key {op.key}"
    if op.remove:
        return None
    value = op.value
    if math.isnan(value) or math.isinf(value) or value != math.floor(value):
        return f"Configuration {op.key} must be a Long value"
    if value > _MAX_LONG:
        return f"Proposed value for {op.key} is too large for a LONG."
    if value <= 0:
        return f"Quota {op.key} must be greater than 0"
    return None


def entry_problem(entity: Sequence[EntityData], ops: Sequence[OpData]) -> QuotaEntity | str:
    """The entity an AlterClientQuotas entry alters, or the problem with the entry."""
    named = entity_of(entity)
    if isinstance(named, str):
        return named
    keys = [op.key for op in ops]
    for key in keys:
        if keys.count(key) > 1:
            return f"Duplicate quota key {key} for entity {named}"
    for op in ops:
        problem = op_problem(op)
        if problem is not None:
            return problem
    return named


def apply_ops(current: dict[str, float], ops: Sequence[OpData]) -> dict[str, float]:
    """`current` values after the (checked) operations."""
    values = dict(current)
    for op in ops:
        if op.remove:
            values.pop(op.key, None)
        else:
            values[op.key] = float(op.value)
    return values
