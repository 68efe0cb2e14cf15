"""Client quotas, version 0 of ketch's native protocol: DescribeClientQuotas (48) and
AlterClientQuotas (49), and the quota entries UpdateMetadata carries to the brokers.

Field names are Kafka's JSON message specs (DescribeClientQuotasRequest.json,
AlterClientQuotasRequest.json and their responses) in snake_case, so the Kafka listener converts
them field by field. An entity is a list of (entity_type, entity_name) components: `user` and
`client-id` (KIP-546), each name None for the `<default>` entity of its type. Values are
float64, as Kafka's (`producer_byte_rate`, `consumer_byte_rate` in bytes per second).

Brokers forward AlterClientQuotas to the controller, which stores the quotas in its metadata
log (ClientQuotaRecord) and sends every broker the whole set; a broker answers
DescribeClientQuotas from the set it holds (node/broker/quotas.py). Match types of a
DescribeClientQuotas component (Kafka's ClientQuotaFilterComponent): MATCH_EXACT names an
entity, MATCH_DEFAULT the `<default>` one, MATCH_ANY any specified entity of the type.
"""

# No `from __future__ import annotations`: the codec reads each field's type at class creation.

from dataclasses import dataclass, field
from typing import Final

from wire.messages.base import ApiKey, Request, Response
from wire.messages.fields import Int8, Int16

MATCH_EXACT: Final = 0
MATCH_DEFAULT: Final = 1
MATCH_ANY: Final = 2

ENTITY_USER: Final = "user"
ENTITY_CLIENT_ID: Final = "client-id"
ENTITY_IP: Final = "ip"


@dataclass(frozen=True, slots=True, kw_only=True)
class EntityData:
    """One component of a quota entity; `entity_name` None is the type's `<default>`."""

    entity_type: str
    entity_name: str | None = None


# -- DescribeClientQuotas (48) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ComponentData:
    entity_type: str
    match_type: Int8
    match: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ValueData:
    key: str
    value: float


@dataclass(frozen=True, slots=True, kw_only=True)
class EntryData:
    entity: list[EntityData]
    values: list[ValueData] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClientQuotasResponse(Response):
    API_KEY = ApiKey.DESCRIBE_CLIENT_QUOTAS
    API_VERSION = 0
    error_message: str | None = None
    entries: list[EntryData] | None = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClientQuotasRequest(Request):
    API_KEY = ApiKey.DESCRIBE_CLIENT_QUOTAS
    API_VERSION = 0
    RESPONSE = DescribeClientQuotasResponse
    components: list[ComponentData]
    strict: bool = False


# -- AlterClientQuotas (49) ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OpData:
    key: str
    value: float = 0.0
    remove: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterClientQuotasEntry:
    entity: list[EntityData]
    ops: list[OpData] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterClientQuotasEntryResult:
    error_code: Int16 = 0
    error_message: str | None = None
    entity: list[EntityData] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterClientQuotasResponse(Response):
    API_KEY = ApiKey.ALTER_CLIENT_QUOTAS
    API_VERSION = 0
    entries: list[AlterClientQuotasEntryResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterClientQuotasRequest(Request):
    API_KEY = ApiKey.ALTER_CLIENT_QUOTAS
    API_VERSION = 0
    RESPONSE = AlterClientQuotasResponse
    entries: list[AlterClientQuotasEntry]
    validate_only: bool = False


# -- UpdateMetadata's quotas -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataClientQuota:
    """One quota entity and its values (UpdateMetadataRequest.client_quotas)."""

    entity: list[EntityData]
    values: list[ValueData] = field(default_factory=list)
