"""Produce: one Ray call per partition, all partitions of a request in parallel.

The records travel as the bytes the producer sent; the partition actor validates them and patches
offsets into the batch headers.
"""
from __future__ import annotations

import asyncio
import logging

from protocol.errors import ErrorCode
from protocol.messages import ProduceResponse

from actors.gateway.handlers.routing import partition_client, resolve_topic

log = logging.getLogger("kray.gateway")
VALID_ACKS = (-1, 0, 1)
NO_EPOCH_GIVEN = -1


def acks_zero(request) -> bool:
    return request.acks == 0


async def _produce_one(client, records, acks, timeout_ms, leader_epoch):
    if records is None or len(records) == 0:
        return ErrorCode.CORRUPT_MESSAGE, -1, -1, -1, "the produce request carried no record batch"
    try:
        r = await client.produce(records, leader_epoch=leader_epoch, acks=acks, timeout_ms=timeout_ms)
    except Exception as e:  # the actor died or moved: make the client refresh metadata and retry
        log.warning("produce to a partition actor failed: %s", e)
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, -1, None
    return r.error_code, r.base_offset, r.log_append_time_ms, r.log_start_offset, r.error_message


async def handle_produce(ctx, header, request) -> ProduceResponse:
    version = header.api_version
    by_id = version >= 13
    jobs, slots = [], []
    responses = []
    for topic_data in request.topic_data:
        topic, unknown_error = resolve_topic(ctx, topic_data.name, topic_data.topic_id, by_id)
        topic_response = ProduceResponse.TopicProduceResponse(name=topic_data.name, topic_id=topic_data.topic_id,
                                                              partition_responses=[])
        responses.append(topic_response)
        for pdata in topic_data.partition_data:
            presp = ProduceResponse.PartitionProduceResponse(index=pdata.index, base_offset=-1,
                                                             log_append_time_ms=-1, log_start_offset=-1)
            topic_response.partition_responses.append(presp)
            client, presp.error_code = partition_client(ctx, topic, pdata.index, unknown_error)
            if request.acks not in VALID_ACKS:
                presp.error_code = ErrorCode.INVALID_REQUIRED_ACKS
            elif client is not None:
                # Produce carries no leader epoch: the replica itself knows whether it leads now
                jobs.append(_produce_one(client, pdata.records, request.acks, request.timeout_ms, NO_EPOCH_GIVEN))
                slots.append(presp)
    for presp, (error, base_offset, append_time_ms, log_start, message) in zip(slots, await asyncio.gather(*jobs)):
        presp.error_code, presp.base_offset = error, base_offset
        presp.log_append_time_ms, presp.log_start_offset, presp.error_message = append_time_ms, log_start, message
    return ProduceResponse(responses=responses, throttle_time_ms=0)
