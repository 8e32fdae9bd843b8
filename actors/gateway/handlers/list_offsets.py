"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3), earliest local (-4), latest
tiered (-5) or the first offset at or after a timestamp, one Ray call per partition. A topic the
principal may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED per partition."""
from __future__ import annotations

import asyncio
import logging

from protocol.errors import ErrorCode
from protocol.messages import ListOffsetsResponse

from actors.gateway.handlers.routing import partition_client
from actors.security.authorizer import AclOperation, ResourceType

log = logging.getLogger("kray.gateway")


async def _one(client, p, isolation_level, response):
    try:
        r = await client.list_offsets(p.timestamp, leader_epoch=p.current_leader_epoch, isolation_level=isolation_level)
    except Exception as e:
        log.warning("list_offsets on a partition replica failed: %s", e)
        response.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return
    response.error_code, response.offset, response.timestamp, response.leader_epoch = r


async def handle_list_offsets(ctx, header, request, connection=None) -> ListOffsetsResponse:
    jobs, topics = [], []
    described = ctx.access(connection).allowed(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                               (lt.name for lt in request.topics))
    for lt in request.topics:
        topic = ctx.metadata.topics.get(lt.name)
        tr = ListOffsetsResponse.ListOffsetsTopicResponse(name=lt.name, partitions=[])
        topics.append(tr)
        for p in lt.partitions:
            pr = ListOffsetsResponse.ListOffsetsPartitionResponse(partition_index=p.partition_index, timestamp=-1,
                                                                  offset=-1, leader_epoch=-1)
            tr.partitions.append(pr)
            if lt.name not in described:
                pr.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            client, pr.error_code = partition_client(ctx, topic, p.partition_index)
            if client is not None:
                jobs.append(_one(client, p, request.isolation_level, pr))
    await asyncio.gather(*jobs)
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)
