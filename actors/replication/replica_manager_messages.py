"""Messages the ReplicaManager handles: the controller's three control requests, each carried
whole and answered with its response, and the broker epoch the node's registration returned.

Every message is a frozen, slotted dataclass answered through `Ask[R]`. Expected failures come
back inside the response as Kafka's error codes (whole-request and per-partition), never as an
exception.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.actor import Ask
from wire.messages import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)


@dataclass(frozen=True, slots=True)
class HandleLeaderAndIsr(Ask[LeaderAndIsrResponse]):
    request: LeaderAndIsrRequest


@dataclass(frozen=True, slots=True)
class HandleStopReplica(Ask[StopReplicaResponse]):
    request: StopReplicaRequest


@dataclass(frozen=True, slots=True)
class HandleUpdateMetadata(Ask[UpdateMetadataResponse]):
    request: UpdateMetadataRequest


@dataclass(frozen=True, slots=True)
class SetBrokerEpoch(Ask[None]):
    """The epoch this broker's registration returned; older control requests are refused."""

    broker_epoch: int
