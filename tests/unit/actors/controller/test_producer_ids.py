"""Producer-id blocks from the controller (KIP-730) on a ManualClock with the real metadata log:
blocks are disjoint, a stale broker epoch is refused and commits nothing, the next block after a
restart (log replay, or a snapshot) continues after the last one handed out, and the id space
ends with an error rather than a wrap-around. Also the record itself: its codec, apply's
monotonicity check and its place in snapshots."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actors.controller.messages import AllocateProducerIds, ControllerConfig
from actors.controller.model import (
    MAX_PRODUCER_ID,
    PRODUCER_ID_BLOCK_SIZE,
    ControllerModel,
)
from runtime.log.metadata_log import MetadataLog
from tests.unit.actors.controller.harness import HEARTBEAT_MS, SESSION_MS, ControllerHarness
from wire.errors import ErrorCode
from wire.messages import AllocateProducerIdsRequest, AllocateProducerIdsResponse
from wire.metadata_records import (
    ControllerEpochRecord,
    ProducerIdsRecord,
    decode_record,
    encode_record,
)


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[ControllerHarness]:
    h = ControllerHarness(tmp_path / "controller")
    await h.start()
    yield h
    await h.stop()


async def allocate(
    h: ControllerHarness, broker_id: int, broker_epoch: int | None = None
) -> AllocateProducerIdsResponse:
    epoch = h.epochs[broker_id] if broker_epoch is None else broker_epoch
    return await h.controller.ask(
        AllocateProducerIds(AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=epoch))
    )


def block(response: AllocateProducerIdsResponse) -> range:
    assert response.error is ErrorCode.NONE, response
    return range(response.producer_id_start, response.producer_id_start + response.producer_id_len)


# -- the controller ------------------------------------------------------------------------------


async def test_blocks_are_disjoint_and_consecutive(harness: ControllerHarness) -> None:
    assert await harness.register(0) is ErrorCode.NONE
    assert await harness.register(1) is ErrorCode.NONE
    blocks = [block(await allocate(harness, b)) for b in (0, 1, 0, 1)]
    assert blocks == [
        range(i * PRODUCER_ID_BLOCK_SIZE, (i + 1) * PRODUCER_ID_BLOCK_SIZE) for i in range(4)
    ]
    assert harness.controller.model.next_producer_id() == 4 * PRODUCER_ID_BLOCK_SIZE


async def test_a_stale_or_unknown_broker_gets_no_block(harness: ControllerHarness) -> None:
    assert await harness.register(0) is ErrorCode.NONE
    epoch = harness.epochs[0]
    first = block(await allocate(harness, 0))
    for broker_id, broker_epoch in ((0, epoch - 1), (0, epoch + 1), (7, epoch)):
        refused = await allocate(harness, broker_id, broker_epoch)
        assert refused.error is ErrorCode.STALE_BROKER_EPOCH, (broker_id, broker_epoch)
        assert (refused.producer_id_start, refused.producer_id_len) == (-1, 0)
    # Nothing was committed for the refusals: the next block follows the first directly.
    assert block(await allocate(harness, 0)).start == first.stop


async def test_a_previous_incarnation_is_refused_after_re_registration(
    harness: ControllerHarness,
) -> None:
    assert await harness.register(0) is ErrorCode.NONE
    assert await harness.register(1) is ErrorCode.NONE
    old_epoch = harness.epochs[0]
    # Broker 0's process dies; after its session a new process registers with a new epoch.
    await harness.pass_time(SESSION_MS + 2 * HEARTBEAT_MS, alive=(1,))
    assert await harness.register(0) is ErrorCode.NONE
    assert harness.epochs[0] > old_epoch
    stale = await allocate(harness, 0, old_epoch)
    assert stale.error is ErrorCode.STALE_BROKER_EPOCH
    assert block(await allocate(harness, 0)).start == 0


@pytest.mark.parametrize("snapshot_every", [10_000, 2], ids=["log", "snapshot"])
async def test_blocks_continue_after_a_controller_restart(
    tmp_path: Path, snapshot_every: int
) -> None:
    """`snapshot_every` 2 cuts the log into a snapshot after almost every commit, so the restart
    rebuilds the next producer id from the snapshot rather than from the allocation records."""
    directory = tmp_path / "controller"
    config = ControllerConfig(
        broker_session_timeout_ms=SESSION_MS,
        broker_heartbeat_interval_ms=HEARTBEAT_MS,
        auto_leader_rebalance_enable=False,
        metadata_snapshot_records=snapshot_every,
    )
    first = ControllerHarness(directory, config)
    await first.start()
    try:
        assert await first.register(0) is ErrorCode.NONE
        handed_out = [block(await allocate(first, 0)) for _ in range(3)]
    finally:
        await first.stop()

    second = ControllerHarness(directory, config)
    await second.start()
    try:
        assert second.controller.model.next_producer_id() == handed_out[-1].stop
        # The broker registers again with its new process (a new epoch) and asks on.
        await second.pass_time(SESSION_MS + 2 * HEARTBEAT_MS, alive=())
        assert await second.register(0) is ErrorCode.NONE
        after = block(await allocate(second, 0))
        assert after.start == handed_out[-1].stop
    finally:
        await second.stop()


async def test_the_id_space_ends_with_an_error_not_a_wrap(tmp_path: Path) -> None:
    directory = tmp_path / "controller"
    # A log whose last block ends one block short of the largest int64.
    store = MetadataLog(directory)
    store.load()
    last_block_start = MAX_PRODUCER_ID + 1 - PRODUCER_ID_BLOCK_SIZE
    await store.append([encode_record(ProducerIdsRecord(0, 0, last_block_start))])
    await store.close()

    h = ControllerHarness(directory)
    await h.start()
    try:
        assert await h.register(0) is ErrorCode.NONE
        last = block(await allocate(h, 0))
        assert (last.start, last.stop - 1) == (last_block_start, MAX_PRODUCER_ID)
        exhausted = await allocate(h, 0)
        assert exhausted.error is ErrorCode.UNKNOWN_SERVER_ERROR
        assert h.controller.model.next_producer_id() == MAX_PRODUCER_ID + 1
    finally:
        await h.stop()


# -- the record and the model --------------------------------------------------------------------


def test_the_record_round_trips_and_malformed_ones_are_refused() -> None:
    record = ProducerIdsRecord(3, 17, 5_000)
    encoded = encode_record(record)
    assert encoded == {
        "type": "producer_ids",
        "broker_id": 3,
        "broker_epoch": 17,
        "next_producer_id": 5_000,
    }
    assert decode_record(encoded) == record
    with pytest.raises(ValueError, match="next_producer_id"):
        decode_record({**encoded, "next_producer_id": "5000"})
    with pytest.raises(ValueError, match="lacks field"):
        decode_record({"type": "producer_ids", "broker_id": 3, "broker_epoch": 17})


def test_the_next_producer_id_only_grows() -> None:
    model = ControllerModel()
    assert model.next_producer_id() == 0
    model.apply(ProducerIdsRecord(0, 0, 1_000))
    assert model.next_producer_id() == 1_000
    for going_back in (1_000, 999, 0):
        with pytest.raises(AssertionError, match="next producer id"):
            model.apply(ProducerIdsRecord(1, 1, going_back))
    with pytest.raises(AssertionError, match="next producer id"):
        model.apply(ProducerIdsRecord(1, 1, MAX_PRODUCER_ID + 2))
    assert model.next_producer_id() == 1_000


def test_the_snapshot_keeps_the_newest_block() -> None:
    model = ControllerModel()
    model.apply(ControllerEpochRecord(1))
    assert not any(isinstance(r, ProducerIdsRecord) for r in model.snapshot())
    model.apply(ProducerIdsRecord(0, 4, 1_000))
    model.apply(ProducerIdsRecord(2, 9, 2_000))
    snapshot = model.snapshot()
    assert snapshot[-1] == ProducerIdsRecord(2, 9, 2_000)
    assert sum(isinstance(r, ProducerIdsRecord) for r in snapshot) == 1
    rebuilt = ControllerModel()
    for record in snapshot:
        rebuilt.apply(decode_record(encode_record(record)))
    assert rebuilt == model
    assert rebuilt.next_producer_id() == 2_000
    # A model that handed out a different block is a different model.
    other = ControllerModel()
    other.apply(ControllerEpochRecord(1))
    other.apply(ProducerIdsRecord(2, 9, 3_000))
    assert other != model
