"""InitProducerId for idempotent producers: a fresh producer id from the controller, epoch 0."""
from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import InitProducerIdResponse


async def handle_init_producer_id(ctx, header, request) -> InitProducerIdResponse:
    if request.transactional_id is not None:
        # Transactions need a transaction coordinator, which Kray does not have yet.
        return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                      producer_id=-1, producer_epoch=-1)
    producer_id = await ctx.controller.allocate_producer_id()
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)
