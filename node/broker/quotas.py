"""Client quotas on a broker: the layer around the handler table that measures and throttles,
and the DescribeClientQuotas / AlterClientQuotas handlers.

`with_quotas(handlers, manager)` wraps a handler table (node/broker/apis.py's) per API key:

    Produce          after the append, the bytes of its record sets count against the client's
                     producer_byte_rate; a throttle time goes into the answer's
                     throttle_time_ms (an acks=0 Produce has no answer to carry it)
    Fetch            a consumer's (never a follower's, replica id >= 0) max_bytes is first cut
                     to what its consumer_byte_rate allows in one window; after the read, the
                     bytes of the answer's record sets count against the rate. A throttled
                     Fetch is answered empty with the throttle time and its bytes taken back,
                     as Kafka answers it (KIP-219: the client fetches the same offsets again
                     once the throttle time has passed)
    UpdateMetadata   a controller's `client_quotas` (the whole set, when it changed or the
                     broker registered) replace the manager's quotas once the request was
                     accepted (a stale controller's is refused by the inner handler first)

The server then mutes a throttled connection for the throttle time (runtime/net/server.py).
Requests from cluster members (the native listener's credentialed connections: followers,
the controller, other brokers' coordinators) are never measured. Who a request is from: the
user is the principal's name (`User:alice` -> `alice`; `ANONYMOUS` on an unauthenticated
connection, as in Kafka), the client id the request header's ("" when absent).

What is counted is the record bytes, not the whole request or answer as Kafka counts: the
record sets are nearly all of a Produce or Fetch, and the framing around them is not kept
per request. A Fetch that reads nothing records 0 bytes.

`QuotaApis` serves DescribeClientQuotas from the quotas the broker holds (Kafka's filter rules,
`describe_quotas`) and forwards AlterClientQuotas to the controller (KIP-590), which validates
and stores them (actors/controller/client_quotas.py).

State: none of its own; the `ClientQuotaManager` is owned by the broker's event loop, which
runs every handler.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Final

from actors.quota.entities import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    QuotaEntity,
    entity_of,
    user_of,
)
from actors.quota.manager import ClientQuotaManager
from node.broker.forwarder import ControllerForwarder
from runtime.net.dialect import Handler, RequestContext
from wire.errors import ErrorCode
from wire.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    ApiKey,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    Response,
    UpdateMetadataClientQuota,
    UpdateMetadataRequest,
)
from wire.messages.quotas import (
    ENTITY_CLIENT_ID,
    ENTITY_IP,
    ENTITY_USER,
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    ComponentData,
    EntryData,
    ValueData,
)

_ENTITY_TYPES: Final = frozenset({ENTITY_USER, ENTITY_CLIENT_ID, ENTITY_IP})


def with_quotas(handlers: Mapping[int, Handler], manager: ClientQuotaManager) -> dict[int, Handler]:
    """`handlers` with Produce, Fetch and UpdateMetadata wrapped by the quota layer (the others
    as they are)."""
    wrapped = dict(handlers)
    if ApiKey.PRODUCE in handlers:
        wrapped[ApiKey.PRODUCE] = _produce_layer(handlers[ApiKey.PRODUCE], manager)
    if ApiKey.FETCH in handlers:
        wrapped[ApiKey.FETCH] = _fetch_layer(handlers[ApiKey.FETCH], manager)
    if ApiKey.UPDATE_METADATA in handlers:
        wrapped[ApiKey.UPDATE_METADATA] = _update_metadata_layer(
            handlers[ApiKey.UPDATE_METADATA], manager
        )
    return wrapped


def _client(ctx: RequestContext) -> tuple[str, str]:
    return user_of(ctx.principal), ctx.client_id or ""


def _produce_layer(inner: Handler, manager: ClientQuotaManager) -> Handler:
    async def produce(request: ProduceRequest, ctx: RequestContext) -> Response | None:
        response = await inner(request, ctx)
        if ctx.cluster_member or not manager.has_quota(PRODUCER_BYTE_RATE):
            return response
        size = sum(len(p.records) for topic in request.topic_data for p in topic.partition_data)
        throttle_ms = manager.record(PRODUCER_BYTE_RATE, *_client(ctx), size)
        if throttle_ms and response is not None:
            return dataclasses.replace(response, throttle_time_ms=throttle_ms)
        return response

    return produce


def _fetch_layer(inner: Handler, manager: ClientQuotaManager) -> Handler:
    async def fetch(request: FetchRequest, ctx: RequestContext) -> Response | None:
        if (
            ctx.cluster_member
            or request.replica_id >= 0
            or not manager.has_quota(CONSUMER_BYTE_RATE)
        ):
            return await inner(request, ctx)
        user, client_id = _client(ctx)
        most = manager.max_value_in_window(CONSUMER_BYTE_RATE, user, client_id)
        if most is not None and most < request.max_bytes:
            # Kafka's bound on one fetch: more than this is throttled whatever came before.
            max_bytes = max(1, int(most))
            request = dataclasses.replace(
                request, max_bytes=max_bytes, min_bytes=min(request.min_bytes, max_bytes)
            )
        response = await inner(request, ctx)
        if not isinstance(response, FetchResponse):
            return response
        size = sum(len(p.records) for topic in response.responses for p in topic.partitions)
        throttle_ms = manager.record(CONSUMER_BYTE_RATE, user, client_id, size)
        if not throttle_ms:
            return response
        manager.unrecord(CONSUMER_BYTE_RATE, user, client_id, size)
        return FetchResponse(
            error_code=response.error_code, throttle_time_ms=throttle_ms, responses=[]
        )

    return fetch


def _update_metadata_layer(inner: Handler, manager: ClientQuotaManager) -> Handler:
    async def update_metadata(
        request: UpdateMetadataRequest, ctx: RequestContext
    ) -> Response | None:
        response = await inner(request, ctx)
        if (
            request.client_quotas is not None
            and response is not None
            and response.error_code == ErrorCode.NONE
        ):
            manager.set_quotas(quotas_of(request.client_quotas))
        return response

    return update_metadata


def quotas_of(entries: Sequence[UpdateMetadataClientQuota]) -> dict[QuotaEntity, dict[str, float]]:
    """The controller's quota entries as the manager keeps them (entries it could not name are
    left out: the controller only stores entities that passed its checks)."""
    quotas: dict[QuotaEntity, dict[str, float]] = {}
    for entry in entries:
        entity = entity_of(entry.entity)
        if isinstance(entity, QuotaEntity):
            quotas[entity] = {value.key: value.value for value in entry.values}
    return quotas


# -- DescribeClientQuotas / AlterClientQuotas ---------------------------------------------------


class QuotaApis:
    """The broker's handlers of the two quota admin APIs."""

    def __init__(self, manager: ClientQuotaManager, forwarder: ControllerForwarder) -> None:
        self._manager = manager
        self._forwarder = forwarder

    def table(self) -> dict[int, Handler]:
        return {
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self.describe_client_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: self.alter_client_quotas,
        }

    async def describe_client_quotas(
        self, request: DescribeClientQuotasRequest, ctx: RequestContext
    ) -> DescribeClientQuotasResponse:
        return describe_quotas(self._manager.quotas(), request.components, request.strict)

    async def alter_client_quotas(
        self, request: AlterClientQuotasRequest, ctx: RequestContext
    ) -> AlterClientQuotasResponse:
        return await self._forwarder.alter_client_quotas(request)


def describe_quotas(
    quotas: Mapping[QuotaEntity, Mapping[str, float]],
    components: Sequence[ComponentData],
    strict: bool,
) -> DescribeClientQuotasResponse:
    """The quotas whose entity matches every component (Kafka's filter): MATCH_EXACT names the
    entity of the type, MATCH_DEFAULT its `<default>`, MATCH_ANY any entity of the type
    (`<default>` included); with `strict`, an entity with a type no component names does not
    match. Invalid filters are answered as Kafka answers them."""
    wanted: dict[str, tuple[int, str | None]] = {}
    for component in components:
        problem = _component_problem(component, wanted)
        if problem is not None:
            code, message = problem
            return DescribeClientQuotasResponse(
                error_code=code, error_message=message, entries=None
            )
        wanted[component.entity_type] = (component.match_type, component.match)
    if ENTITY_IP in wanted and len(wanted) > 1:
        return DescribeClientQuotasResponse(
            error_code=ErrorCode.INVALID_REQUEST,
            error_message="Invalid entity filter component combination. IP filter component "
            "should not be used with user or clientId filter component.",
            entries=None,
        )
    entries = []
    for entity, values in sorted(quotas.items(), key=lambda item: _sort_key(item[0])):
        if _matches(entity, wanted, strict):
            entries.append(
                EntryData(
                    entity=entity.components(),
                    values=[ValueData(key=k, value=v) for k, v in sorted(values.items())],
                )
            )
    return DescribeClientQuotasResponse(entries=entries)


def _component_problem(
    component: ComponentData, seen: Mapping[str, object]
) -> tuple[ErrorCode, str] | None:
    kind, match = component.entity_type, component.match
    if not kind:
        return ErrorCode.INVALID_REQUEST, "Invalid empty entity type."
    if kind in seen:
        return (
            ErrorCode.INVALID_REQUEST,
            f"Entity type {kind} cannot appear more than once in the filter.",
        )
    if kind not in _ENTITY_TYPES:
        return ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {kind}"
    if component.match_type == MATCH_EXACT and match is None:
        return (
            ErrorCode.INVALID_REQUEST,
            "Request specified MATCH_TYPE_EXACT, but set match string to null.",
        )
    if component.match_type == MATCH_DEFAULT and match is not None:
        return (
            ErrorCode.INVALID_REQUEST,
            "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
        )
    if component.match_type == MATCH_ANY and match is not None:
        return (
            ErrorCode.INVALID_REQUEST,
            "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
        )
    if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
        return ErrorCode.UNSUPPORTED_VERSION, f"Unknown match type {component.match_type}"
    return None


def _matches(
    entity: QuotaEntity, wanted: Mapping[str, tuple[int, str | None]], strict: bool
) -> bool:
    names = {component.entity_type: component.entity_name for component in entity.components()}
    if strict and set(names) != set(wanted):
        return False
    for kind, (match_type, match) in wanted.items():
        if kind not in names:
            return False
        if match_type == MATCH_EXACT and names[kind] != match:
            return False
        if match_type == MATCH_DEFAULT and names[kind] is not None:
            return False
    return True


def _sort_key(entity: QuotaEntity) -> tuple[str, str]:
    return (
        "" if entity.user is None else str(entity.user),
        "" if entity.client_id is None else str(entity.client_id),
    )
