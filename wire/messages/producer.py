"""Producer ids, version 0 of ketch's native protocol: InitProducerId (22) and
AllocateProducerIds (67).

InitProducerId: a client (an idempotent producer, and many with acks=all) asks any broker for a
cluster-unique producer id and epoch; the Kafka-protocol adapter maps every Kafka version (0-4)
onto this one message. `producer_id` / `producer_epoch` are -1 for a new producer, or the
producer's current pair when it asks for an epoch bump (KIP-360, Kafka's versions 3 and later).

AllocateProducerIds (KIP-730, control plane): a broker asks the controller for the next block
of ids, which the controller commits to its metadata log before answering, so no id is handed
out twice across broker or controller restarts.

Field names are Kafka's JSON message-spec names in snake_case.
"""

# No `from __future__ import annotations`: the codec reads each field's type at class creation.

from dataclasses import dataclass

from wire.messages.base import ApiKey, Request, Response
from wire.messages.fields import Int16, Int32

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

# -- InitProducerId (22) ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class InitProducerIdResponse(Response):
    API_KEY = ApiKey.INIT_PRODUCER_ID
    API_VERSION = 0
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: Int16 = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True, kw_only=True)
class InitProducerIdRequest(Request):
    """transactional_id None: an idempotent (non-transactional) producer."""

    API_KEY = ApiKey.INIT_PRODUCER_ID
    API_VERSION = 0
    RESPONSE = InitProducerIdResponse
    transactional_id: str | None = None
    transaction_timeout_ms: Int32
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: Int16 = NO_PRODUCER_EPOCH


# -- AllocateProducerIds (67) ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocateProducerIdsResponse(Response):
    """The block [producer_id_start, producer_id_start + producer_id_len), when error_code is 0."""

    API_KEY = ApiKey.ALLOCATE_PRODUCER_IDS
    API_VERSION = 0
    producer_id_start: int = -1
    producer_id_len: Int32 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocateProducerIdsRequest(Request):
    API_KEY = ApiKey.ALLOCATE_PRODUCER_IDS
    API_VERSION = 0
    RESPONSE = AllocateProducerIdsResponse
    broker_id: Int32
    broker_epoch: int
