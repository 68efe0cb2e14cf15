"""Producer-id blocks (KIP-730): a broker asks for a block of ids with AllocateProducerIds.

The block's end is committed to the metadata log before the answer, so a restarted controller
continues after it and no id is handed out twice. An unknown broker or an earlier incarnation
is refused (STALE_BROKER_EPOCH) and registers (again) first, as in Kafka; once the id space is
used up every request fails (UNKNOWN_SERVER_ERROR).

State: the next producer id is part of the controller's durable model
(actors/controller/model.py); this module only decides and commits, from the controller actor's
AllocateProducerIds handler.
"""

from __future__ import annotations

import logging

from actors.controller.context import ControllerContext
from actors.controller.journal import Change
from actors.controller.model import MAX_PRODUCER_ID, PRODUCER_ID_BLOCK_SIZE
from wire.errors import ErrorCode
from wire.messages import AllocateProducerIdsRequest, AllocateProducerIdsResponse
from wire.metadata_records import ProducerIdsRecord

log = logging.getLogger("ketch.controller")


async def allocate_producer_ids(
    ctx: ControllerContext, request: AllocateProducerIdsRequest
) -> AllocateProducerIdsResponse:
    broker = ctx.model.broker(request.broker_id)
    if broker is None or broker.broker_epoch != request.broker_epoch:
        # As Kafka: an unknown broker or an earlier incarnation registers (again) first.
        return AllocateProducerIdsResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    start = ctx.model.next_producer_id()
    if start + PRODUCER_ID_BLOCK_SIZE - 1 > MAX_PRODUCER_ID:
        log.error("%s: producer ids exhausted (next would be %d)", ctx.name, start)
        return AllocateProducerIdsResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
    change = Change(ctx.model)
    end = start + PRODUCER_ID_BLOCK_SIZE
    change.add(ProducerIdsRecord(request.broker_id, request.broker_epoch, end))
    # Written before the answer: a block the broker may hand out is never handed out again.
    await ctx.journal.commit(change)
    log.info(
        "%s: producer ids %d..%d to broker %d",
        ctx.name,
        start,
        end - 1,
        request.broker_id,
    )
    return AllocateProducerIdsResponse(
        producer_id_start=start, producer_id_len=PRODUCER_ID_BLOCK_SIZE
    )
