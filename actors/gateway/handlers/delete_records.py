"""DeleteRecords (kafka-delete-records.sh, AdminClient.deleteRecords): move partitions' log start
offsets forward, so that the records below are no longer readable and their segments can go.

As Kafka's KafkaApis answers it, per partition: a topic the principal may not DELETE is
TOPIC_AUTHORIZATION_FAILED, an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION; otherwise the
partition's leader answers (actors/partition/actor.py `delete_records_for_client`: internal and
compacted topics refuse, an offset past the high watermark is OFFSET_OUT_OF_RANGE, -1 means the high
watermark) with the new low watermark. Followers move their log start at their next fetch; Kafka's
leader waits for them (up to the request's timeout) before answering, Kray's answers at once."""
from __future__ import annotations

import asyncio
import logging

from protocol.errors import ErrorCode
from protocol.messages import DeleteRecordsResponse

from actors.gateway.handlers.routing import partition_client
from actors.security.authorizer import AclOperation, ResourceType

log = logging.getLogger("kray.gateway")
PartitionResult = DeleteRecordsResponse.DeleteRecordsPartitionResult


async def _one(client, offset: int, response: PartitionResult) -> None:
    try:
        error, response.low_watermark, message = await client.delete_records(offset)
    except Exception as e:  # the leader moved or its host restarted: the client asks the new leader
        log.warning("delete_records on a partition failed: %s", e)
        error, message = ErrorCode.NOT_LEADER_OR_FOLLOWER, None
    if message:
        log.info("DeleteRecords refused: %s", message)
    response.error_code = int(error)
    if error:
        response.low_watermark = -1


async def handle_delete_records(ctx, header, request, connection=None) -> DeleteRecordsResponse:
    deletable = ctx.access(connection).allowed(AclOperation.DELETE, ResourceType.TOPIC,
                                               (t.name for t in request.topics))
    jobs, topics = [], []
    for t in request.topics:
        topic = ctx.metadata.topics.get(t.name)
        result = DeleteRecordsResponse.DeleteRecordsTopicResult(name=t.name, partitions=[])
        topics.append(result)
        for p in t.partitions:
            response = PartitionResult(partition_index=p.partition_index, low_watermark=-1, error_code=0)
            result.partitions.append(response)
            if t.name not in deletable:
                response.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            client, response.error_code = partition_client(ctx, topic, p.partition_index)
            if client is not None:
                jobs.append(_one(client, p.offset, response))
    await asyncio.gather(*jobs)
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
