"""A RequestPath built for the coordinators' own writes (`AppendOrigin.COORDINATOR`) over the
same partitions as the clients' one: a transactional offset commit written twice with the
producer's id and epoch and base sequence 0 is appended twice there, and answered as a
duplicate on the clients' path (the leader's sequence rules apply to clients only)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actors.replication.request_path import RequestPath
from runtime.log.producer_state import AppendOrigin
from tests.unit.actors.replication.replica_manager_harness import (
    BROKER_ID,
    WALL_MS,
    Broker,
    close_broker,
    only_produce_answer,
    open_broker,
    partition_state,
    produce_request,
    update_metadata,
)
from wire.batch_builder import build_batch
from wire.errors import ErrorCode

PID = 9_000


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    opened = await open_broker(tmp_path)
    await opened.update_metadata(update_metadata([BROKER_ID]))
    led = await opened.leader_and_isr(partition_state(BROKER_ID, 1, (BROKER_ID,)))
    assert led.partition_errors[0].error_code == ErrorCode.NONE
    yield opened
    await close_broker(opened)


def offsets_commit(tag: int) -> bytes:
    return build_batch(
        [(b"offset-key", b"offset-%d" % tag)],
        base_timestamp=WALL_MS,
        producer_id=PID,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )


async def test_the_coordinators_path_appends_what_a_client_path_calls_a_retry(
    broker: Broker,
) -> None:
    coordinator = RequestPath(
        broker.manager.partition, broker.delayed, origin=AppendOrigin.COORDINATOR
    )
    first = only_produce_answer(
        await coordinator.produce(produce_request(offsets_commit(1), acks=-1))
    )
    second = only_produce_answer(
        await coordinator.produce(produce_request(offsets_commit(2), acks=-1))
    )
    assert (first.error_code, first.base_offset) == (0, 0)
    assert (second.error_code, second.base_offset) == (0, 1), "appended, not a duplicate"
    client = only_produce_answer(
        await broker.path.produce(produce_request(offsets_commit(3), acks=-1))
    )
    # A client's copy reads as a retry: answered with an earlier copy's offset, not appended.
    assert (client.error_code, client.base_offset) == (0, 0)
