"""InitProducerId for idempotent producers: a fresh producer id from the controller, epoch 0. With a
transactional id, the transaction coordinator answers (handlers/transactions.py).

With an authorizer, as Kafka: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic, else
CLUSTER_AUTHORIZATION_FAILED."""
from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import InitProducerIdResponse

from actors.gateway.handlers.transactions import handle_transactional_init_producer_id
from actors.security.authorizer import AclOperation, ResourceType


async def handle_init_producer_id(ctx, header, request, connection=None) -> InitProducerIdResponse:
    if request.transactional_id is not None:
        return await handle_transactional_init_producer_id(ctx, header, request, connection)
    access = ctx.access(connection)
    if not (access.allows_cluster(AclOperation.IDEMPOTENT_WRITE)
            or access.allows_any(AclOperation.WRITE, ResourceType.TOPIC)):
        return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                      producer_id=-1, producer_epoch=-1)
    producer_id = await ctx.controller.allocate_producer_id()
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)
