"""DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets (KIP-932 admin).

Start offsets come from the share coordinators; lag is what lies between the start offset and the
high watermark and is not yet delivered for good (high watermark - start offset - records already
acknowledged or archived beyond it). Altering and deleting need an empty group: the share state is
re-initialized (with the next state epoch, which fences any stale writer) or deleted, and the
partition leaders drop their cached copy.

With an authorizer, as Kafka (KIP-932): describing offsets needs DESCRIBE on the group (offsets of
topics the principal may not describe are left out, or answer TOPIC_AUTHORIZATION_FAILED when
named); altering READ on the group and on each topic; deleting DELETE on the group and READ on
each topic. A refused topic is left as it is.
"""
from __future__ import annotations

import asyncio
import logging

from protocol.errors import ErrorCode
from protocol.messages import (AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsResponse,
                               DescribeShareGroupOffsetsResponse)

from actors import internal_topics
from actors.gateway.handlers.groups import coordinator_error, group_coordinator
from actors.security.authorizer import AclOperation, ResourceType
from actors.share_coordinator.core import state_partition_for

log = logging.getLogger("kray.gateway")
LATEST = -1
GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC


async def _share_coordinator(ctx, group_id, topic_id, index):
    name = internal_topics.SHARE_GROUP_STATE
    if (name, 0) not in ctx.metadata.coordinators:
        ctx.set_metadata(await ctx.controller.ensure_internal_topic(name))
    count = len(ctx.metadata.topics[name].partitions)
    return ctx.metadata.coordinators[(name, state_partition_for(group_id, topic_id, index, count))]


async def _summary(ctx, group_id):
    return await (await group_coordinator(ctx, group_id)).share_group_summary.remote(group_id)


async def _describe_partition(ctx, group_id, topic, index):
    part = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponsePartition(
        partition_index=index, start_offset=-1, leader_epoch=-1, lag=-1)
    if index >= len(topic.partitions):
        part.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return part
    try:
        s = await (await _share_coordinator(ctx, group_id, topic.topic_id, index)).read_state_summary.remote(
            group_id, topic.topic_id, index)
        part.error_code, part.error_message = s.error_code, s.error_message
        if s.error_code or s.start_offset < 0:
            return part
        part.start_offset, part.leader_epoch = s.start_offset, s.leader_epoch
        client = ctx.any_partition(topic.topic_id, index)
        if client is not None:
            error, high_watermark, _, _ = await client.list_offsets(LATEST, leader_epoch=-1, isolation_level=0)
            if not error:
                part.lag = max(0, high_watermark - s.start_offset - max(s.delivery_complete_count, 0))
    except Exception as e:
        part.error_code, part.error_message = coordinator_error(e), str(e)
    return part


async def _describe_group(ctx, access, request_group):
    group_id = request_group.group_id
    out = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup(group_id=group_id, topics=[])
    if not access.allows(AclOperation.DESCRIBE, GROUP, group_id):
        out.error_code = ErrorCode.GROUP_AUTHORIZATION_FAILED
        return out
    try:
        error, _members, initialized = await _summary(ctx, group_id)
    except Exception as e:
        out.error_code, out.error_message = coordinator_error(e), str(e)
        return out
    if error == ErrorCode.GROUP_ID_NOT_FOUND and request_group.topics is None:
        return out  # as Kafka 4.4 answers a group that does not exist: no error, no topics (tests/kafka)
    if error:
        out.error_code = error
        return out
    if request_group.topics is None:
        wanted: dict = {}
        for topic_id, index in initialized:
            topic = ctx.metadata.topic_by_id(topic_id)
            if topic is not None:
                wanted.setdefault(topic.name, []).append(index)
        allowed = access.allowed(AclOperation.DESCRIBE, TOPIC, wanted)
        wanted = {name: indexes for name, indexes in wanted.items() if name in allowed}
    else:
        wanted = {t.topic_name: list(t.partitions) for t in request_group.topics}
    allowed = access.allowed(AclOperation.DESCRIBE, TOPIC, wanted)
    for name, indexes in sorted(wanted.items()):
        if name not in allowed:
            out.topics.append(DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseTopic(
                topic_name=name, partitions=[DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponsePartition(
                    partition_index=i, start_offset=-1, leader_epoch=-1, lag=-1,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED) for i in indexes]))
            continue
        topic = ctx.metadata.topics.get(name)
        if topic is None:
            out.topics.append(DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseTopic(
                topic_name=name, partitions=[DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponsePartition(
                    partition_index=i, start_offset=-1, leader_epoch=-1, lag=-1,
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for i in indexes]))
            continue
        parts = await asyncio.gather(*(_describe_partition(ctx, group_id, topic, i) for i in sorted(indexes)))
        out.topics.append(DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseTopic(
            topic_name=name, topic_id=topic.topic_id, partitions=list(parts)))
    return out


async def handle_describe_share_group_offsets(ctx, header, request, connection=None) -> DescribeShareGroupOffsetsResponse:
    access = ctx.access(connection)
    groups = await asyncio.gather(*(_describe_group(ctx, access, g) for g in request.groups))
    return DescribeShareGroupOffsetsResponse(throttle_time_ms=0, groups=list(groups))


async def _require_empty(ctx, group_id):
    """(error code, message, initialized share-partitions) — altering offsets needs an empty group."""
    try:
        error, members, initialized = await _summary(ctx, group_id)
    except Exception as e:
        return coordinator_error(e), str(e), []
    if error == ErrorCode.GROUP_ID_NOT_FOUND:
        return error, f"share group {group_id!r} does not exist", []
    if error:
        return error, None, []
    if members:
        return ErrorCode.NON_EMPTY_GROUP, f"share group {group_id!r} has {members} members; stop them first", []
    return 0, None, initialized


async def _forget(ctx, group_id, topic_id, index):
    client = ctx.any_partition(topic_id, index)
    if client is not None:
        try:
            await client.share_forget(group_id)
        except Exception as e:
            log.warning("a partition leader could not drop share state of %s: %s", group_id, e)


async def handle_alter_share_group_offsets(ctx, header, request, connection=None) -> AlterShareGroupOffsetsResponse:
    group_id = request.group_id
    access = ctx.access(connection)
    if not access.allows(AclOperation.READ, GROUP, group_id):
        return AlterShareGroupOffsetsResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    readable = access.allowed(AclOperation.READ, TOPIC, (t.topic_name for t in request.topics))
    error, message, _ = await _require_empty(ctx, group_id)
    if error and error != ErrorCode.GROUP_ID_NOT_FOUND:  # KIP-932: this may also initialize a new share group
        return AlterShareGroupOffsetsResponse(throttle_time_ms=0, error_code=error, error_message=message)
    responses, altered = [], {}
    for t in request.topics:
        topic = ctx.metadata.topics.get(t.topic_name)
        parts = []
        for p in t.partitions:
            part = AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponsePartition(partition_index=p.partition_index)
            parts.append(part)
            if t.topic_name not in readable:
                part.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if topic is None or p.partition_index >= len(topic.partitions):
                part.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            try:
                coordinator = await _share_coordinator(ctx, group_id, topic.topic_id, p.partition_index)
                summary = await coordinator.read_state_summary.remote(group_id, topic.topic_id, p.partition_index)
                part.error_code, part.error_message = await coordinator.initialize_state.remote(
                    group_id, topic.topic_id, p.partition_index, max(summary.state_epoch, 0) + 1, p.start_offset)
                await _forget(ctx, group_id, topic.topic_id, p.partition_index)
            except Exception as e:
                part.error_code, part.error_message = coordinator_error(e), str(e)
            if not part.error_code:
                altered[(topic.topic_id, p.partition_index)] = (t.topic_name, part)
        responses.append(AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name, topic_id=topic.topic_id if topic and t.topic_name in readable else None,
            partitions=parts))
    if altered:  # the group (created if new) holds them as initialized: a first join must not reset them
        try:
            error, message = await (await group_coordinator(ctx, group_id)).share_offsets_altered.remote(
                group_id, {tp: name for tp, (name, _) in altered.items()})
        except Exception as e:
            error, message = coordinator_error(e), str(e)
        for _, part in altered.values():
            part.error_code, part.error_message = error, message
    return AlterShareGroupOffsetsResponse(throttle_time_ms=0, error_code=0, responses=responses)


async def handle_delete_share_group_offsets(ctx, header, request, connection=None) -> DeleteShareGroupOffsetsResponse:
    group_id = request.group_id
    access = ctx.access(connection)
    if not access.allows(AclOperation.DELETE, GROUP, group_id):
        return DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    readable = access.allowed(AclOperation.READ, TOPIC, (t.topic_name for t in request.topics))
    error, message, initialized = await _require_empty(ctx, group_id)
    if error:
        return DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=error, error_message=message)
    responses = []
    for t in request.topics:
        topic = ctx.metadata.topics.get(t.topic_name)
        result = DeleteShareGroupOffsetsResponse.DeleteShareGroupOffsetsResponseTopic(topic_name=t.topic_name)
        responses.append(result)
        if t.topic_name not in readable:
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        if topic is None:
            result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        result.topic_id = topic.topic_id
        for index in range(len(topic.partitions)):
            try:
                coordinator = await _share_coordinator(ctx, group_id, topic.topic_id, index)
                code, text = await coordinator.delete_state.remote(group_id, topic.topic_id, index)
                if code:
                    result.error_code, result.error_message = code, text
                await _forget(ctx, group_id, topic.topic_id, index)
            except Exception as e:
                result.error_code, result.error_message = coordinator_error(e), str(e)
    return DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=0, responses=responses)
