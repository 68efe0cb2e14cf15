"""The targeted lost answer: `is_request` tells an AlterPartition request's chunk from others,
and `lost_alter_partition_answer` is planned only when named (the default plans are unchanged)."""

from __future__ import annotations

import random

from testkit.sim.faults import KINDS, OPTIONAL_KINDS, is_request, plan_faults
from wire.envelope import RequestEnvelope, ResponseEnvelope, encode_request, encode_response
from wire.frames import encode_frame
from wire.messages import AlterPartitionRequest, BrokerHeartbeatRequest
from wire.messages.base import Request

BROKERS = ["broker-0", "broker-1", "broker-2"]


def chunk_of(request: Request) -> bytes:
    envelope = RequestEnvelope(
        request.API_KEY, request.API_VERSION, 7, "broker-1-control", request.to_body()
    )
    return encode_frame(encode_request(envelope))


def test_an_alter_partition_request_is_recognised_from_its_chunk() -> None:
    alter = is_request(AlterPartitionRequest.API_KEY)
    assert alter(chunk_of(AlterPartitionRequest(broker_id=1, broker_epoch=4, topics=[])))
    assert not alter(chunk_of(BrokerHeartbeatRequest(broker_id=1, broker_epoch=4)))
    # An answer, a piece of a frame, garbage: not requests of that kind.
    assert not alter(encode_frame(encode_response(ResponseEnvelope(7, {}))))
    assert not alter(chunk_of(AlterPartitionRequest(broker_id=1, topics=[]))[:9])
    assert not alter(b"\x00\x00\x00\x03abc")
    assert not alter(b"\xff\xff\xff\xff")


def plan(kinds: tuple[str, ...], seed: int = 11) -> list[tuple[str, str, str, int]]:
    faults = plan_faults(
        random.Random(seed),
        duration_ms=4_000,
        brokers=BROKERS,
        clients=["p1", "c1"],
        controller="controller",
        pause_ms=1_500,
        kinds=kinds,
    )
    return [(fault.kind, fault.a, fault.b, fault.hold_ms) for fault in faults]


def test_it_is_planned_only_when_named() -> None:
    assert OPTIONAL_KINDS == ("lost_alter_partition_answer",)
    assert not set(OPTIONAL_KINDS) & set(KINDS)
    assert all(kind != "lost_alter_partition_answer" for kind, *_ in plan(KINDS))
    targeted = [f for f in plan(("lost_alter_partition_answer", "crash")) if f[0] in OPTIONAL_KINDS]
    assert targeted
    # The controller's answer to a broker; armed, not held (it waits for the request).
    assert all(a == "controller" and b in BROKERS and hold == 0 for _, a, b, hold in targeted)
