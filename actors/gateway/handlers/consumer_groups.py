"""Consumer groups on the wire: the classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DescribeGroups), KIP-848's consumer protocol (ConsumerGroupHeartbeat, ConsumerGroupDescribe) and
committed offsets (OffsetCommit, OffsetFetch, OffsetDelete).

Each request goes to the group's coordinator, on the broker that leads the group's
`__consumer_offsets` partition; any other broker answers NOT_COORDINATOR and the client finds the
coordinator again. JoinGroup and SyncGroup calls stay open until the rebalance answers them.

With an authorizer, as Kafka: joining, syncing, heartbeating, leaving and committing need READ on
the group (GROUP_AUTHORIZATION_FAILED), commits READ on each topic too; describing a group and
fetching its offsets DESCRIBE (offsets of topics the principal may not describe are left out, or
answer TOPIC_AUTHORIZATION_FAILED when named); OffsetDelete DELETE on the group and READ on the
topics; ConsumerGroupHeartbeat READ on the group and DESCRIBE on each subscribed topic name.
"""
from __future__ import annotations

import asyncio
import logging

from protocol.errors import ErrorCode
from protocol.messages import (ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatResponse, DescribeGroupsResponse, HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse,
                               OffsetCommitResponse, OffsetDeleteResponse, OffsetFetchResponse, SyncGroupResponse)

from actors.gateway.connection import in_request_order
from actors.gateway.handlers.groups import (AUTHORIZED_OPERATIONS_OMITTED, coordinator_error, group_coordinator,
                                            hide_undescribed_topics)
from actors.security.authorizer import AclOperation, ResourceType

log = logging.getLogger("kray.gateway")
JOIN_GROUP_REQUIRES_KNOWN_MEMBER_ID = 4   # KIP-394: from this JoinGroup version a new member first gets an id
OFFSET_COMMIT_TOPIC_IDS = 10              # OffsetCommit / OffsetFetch name topics by id from this version
DESCRIBE_GROUPS_NOT_FOUND_ERROR = 6       # older DescribeGroups answer an unknown group as Dead, no error
OFFSET_FETCH_REQUIRE_STABLE = 7           # OffsetFetch carries require_stable from this version (KIP-447)
NO_OFFSET = -1


GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC
GROUP_AUTHORIZATION_FAILED = ErrorCode.GROUP_AUTHORIZATION_FAILED


def _may_read_group(ctx, connection, group_id) -> bool:
    return ctx.access(connection).allows(AclOperation.READ, GROUP, group_id or "")


def _peer(connection) -> str:
    return connection.client_host if connection is not None else ""


async def handle_join_group(ctx, header, request, connection=None) -> JoinGroupResponse:
    if not _may_read_group(ctx, connection, request.group_id):
        return JoinGroupResponse(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED, generation_id=-1,
                                 protocol_name=None if header.api_version >= 7 else "", leader="",
                                 member_id=request.member_id or "", members=[])
    try:
        coordinator = await group_coordinator(ctx, request.group_id or "")
        r = await coordinator.join_group.remote(
            request.group_id, request.member_id or "", request.group_instance_id, request.protocol_type or "",
            [(p.name, bytes(p.metadata)) for p in request.protocols], request.session_timeout_ms,
            request.rebalance_timeout_ms, header.client_id or "", _peer(connection),
            header.api_version >= JOIN_GROUP_REQUIRES_KNOWN_MEMBER_ID, header.api_version)
    except Exception as e:
        log.info("join group failed: %s", e)
        return JoinGroupResponse(throttle_time_ms=0, error_code=coordinator_error(e), generation_id=-1,
                                 protocol_name=None if header.api_version >= 7 else "", leader="",
                                 member_id=request.member_id or "", members=[])
    protocol_name = r.protocol_name
    if protocol_name is None and header.api_version < 7:
        protocol_name = ""  # not nullable before v7
    return JoinGroupResponse(
        throttle_time_ms=0, error_code=r.error_code, generation_id=r.generation_id, protocol_type=r.protocol_type,
        protocol_name=protocol_name, leader=r.leader, skip_assignment=r.skip_assignment, member_id=r.member_id,
        members=[JoinGroupResponse.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
                 for m, i, md in r.members])


async def handle_sync_group(ctx, header, request, connection=None) -> SyncGroupResponse:
    if not _may_read_group(ctx, connection, request.group_id):
        return SyncGroupResponse(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED, assignment=b"")
    try:
        coordinator = await group_coordinator(ctx, request.group_id or "")
        r = await coordinator.sync_group.remote(
            request.group_id, request.generation_id, request.member_id or "", request.group_instance_id,
            request.protocol_type, request.protocol_name,
            [(a.member_id, bytes(a.assignment)) for a in request.assignments])
    except Exception as e:
        log.info("sync group failed: %s", e)
        return SyncGroupResponse(throttle_time_ms=0, error_code=coordinator_error(e), assignment=b"")
    return SyncGroupResponse(throttle_time_ms=0, error_code=r.error_code, protocol_type=r.protocol_type,
                             protocol_name=r.protocol_name, assignment=r.assignment)


async def handle_heartbeat(ctx, header, request, connection=None) -> HeartbeatResponse:
    if not _may_read_group(ctx, connection, request.group_id):
        return HeartbeatResponse(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED)
    try:
        coordinator = await group_coordinator(ctx, request.group_id or "")
        error = await coordinator.heartbeat.remote(request.group_id, request.generation_id, request.member_id or "",
                                                   request.group_instance_id)
    except Exception as e:
        error = coordinator_error(e)
    return HeartbeatResponse(throttle_time_ms=0, error_code=error)


async def handle_leave_group(ctx, header, request, connection=None) -> LeaveGroupResponse:
    if header.api_version < 3:
        members = [(request.member_id or "", None)]
    else:
        members = [(m.member_id or "", m.group_instance_id) for m in request.members]
    if not _may_read_group(ctx, connection, request.group_id):
        return LeaveGroupResponse(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED, members=[])
    try:
        coordinator = await group_coordinator(ctx, request.group_id or "")
        error, results = await coordinator.leave_group.remote(request.group_id, members)
    except Exception as e:
        error = coordinator_error(e)
        results = [(m, i, error) for m, i in members]
    if header.api_version < 3:  # one member: its error is the answer
        return LeaveGroupResponse(throttle_time_ms=0, error_code=error or (results[0][2] if results else 0))
    return LeaveGroupResponse(throttle_time_ms=0, error_code=error, members=[
        LeaveGroupResponse.MemberResponse(member_id=m, group_instance_id=i, error_code=e) for m, i, e in results])


async def handle_describe_groups(ctx, header, request, connection=None) -> DescribeGroupsResponse:
    groups = []
    access = ctx.access(connection)
    with_operations = header.api_version >= 3 and request.include_authorized_operations
    for group_id in request.groups:
        out = DescribeGroupsResponse.DescribedGroup(group_id=group_id, group_state="", protocol_type="",
                                                    protocol_data="", members=[],
                                                    authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
        if not access.allows(AclOperation.DESCRIBE, GROUP, group_id):
            out.error_code = GROUP_AUTHORIZATION_FAILED
            groups.append(out)
            continue
        if with_operations:
            out.authorized_operations = access.authorized_operations(GROUP, group_id)
        try:
            [d] = await (await group_coordinator(ctx, group_id)).describe_classic.remote([group_id])
        except Exception as e:
            out.error_code, out.error_message = coordinator_error(e), str(e)
            groups.append(out)
            continue
        if d.error_code == ErrorCode.GROUP_ID_NOT_FOUND and header.api_version < DESCRIBE_GROUPS_NOT_FOUND_ERROR:
            out.error_code, out.group_state = 0, "Dead"
        else:
            out.error_code, out.error_message = d.error_code, d.error_message
            out.group_state, out.protocol_type, out.protocol_data = d.state, d.protocol_type, d.protocol
            out.members = [DescribeGroupsResponse.DescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                for m in d.members]
        groups.append(out)
    return DescribeGroupsResponse(throttle_time_ms=0, groups=groups)


# ---- offsets -------------------------------------------------------------------------------------------------------

def _topic_name(ctx, topic, by_id: bool) -> str | None:
    if not by_id:
        return topic.name
    found = ctx.metadata.topic_by_id(topic.topic_id)
    return found.name if found is not None else None


def _partitions_known(ctx, name: str | None, topic) -> bool:
    known = ctx.metadata.topics.get(name) if name is not None else None
    return known is not None and all(0 <= p.partition_index < len(known.partitions) for p in topic.partitions)


async def handle_offset_commit(ctx, header, request, connection=None) -> OffsetCommitResponse:
    by_id = header.api_version >= OFFSET_COMMIT_TOPIC_IDS
    R = OffsetCommitResponse
    answers = [R.OffsetCommitResponseTopic(name=t.name if not by_id else "", topic_id=t.topic_id if by_id else None,
                                           partitions=[R.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                                                       error_code=0)
                                                       for p in t.partitions])
               for t in request.topics]
    wanted, slots = [], []
    access = ctx.access(connection)
    if not access.allows(AclOperation.READ, GROUP, request.group_id or ""):
        for answer in answers:
            for slot in answer.partitions:
                slot.error_code = GROUP_AUTHORIZATION_FAILED
        return R(throttle_time_ms=0, topics=answers)
    names = [_topic_name(ctx, topic, by_id) for topic in request.topics]
    readable = access.allowed(AclOperation.READ, TOPIC, (n for n in names if n is not None))
    if any(not _partitions_known(ctx, n, t) for n, t in zip(names, request.topics) if n in readable):
        await ctx.catch_up_metadata()  # (never refuse a topic created just now on older metadata)
    for topic, answer, name in zip(request.topics, answers, names):
        known = ctx.metadata.topics.get(name) if name is not None else None
        for p, slot in zip(topic.partitions, answer.partitions):
            if name is None:
                slot.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                continue
            if name not in readable:
                slot.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if known is None or not 0 <= p.partition_index < len(known.partitions):
                slot.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # as Kafka: offsets of partitions that exist
                continue
            wanted.append((name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                           p.committed_metadata))
            slots.append(slot)
    if wanted:
        # a connection's commits take effect one after the other, in request order (an async Ray
        # actor may start calls out of order), so a committed offset never goes back behind a later one
        async with in_request_order(connection):
            try:
                coordinator = await group_coordinator(ctx, request.group_id or "")
                errors = await coordinator.commit_offsets.remote(
                    request.group_id, request.member_id or "", request.group_instance_id,
                    request.generation_id_or_member_epoch, wanted, header.api_version)
            except Exception as e:
                errors = [coordinator_error(e)] * len(wanted)
        for slot, error in zip(slots, errors):
            slot.error_code = error
    return R(throttle_time_ms=0, topics=answers)


async def _fetch_group(ctx, access, group_id: str, topics, by_id: bool, member_id=None, member_epoch=-1,
                       require_stable: bool = False):
    """(group error, [(topic name or None, topic id, partition, (offset, epoch, metadata) or None, error)])."""
    if not access.allows(AclOperation.DESCRIBE, GROUP, group_id or ""):
        return GROUP_AUTHORIZATION_FAILED, []
    asked = None
    unknown = []
    if topics is not None:
        asked = []
        for t in topics:
            name = _topic_name(ctx, t, by_id)
            if name is None:
                unknown += [(None, t.topic_id, p, None, ErrorCode.UNKNOWN_TOPIC_ID) for p in t.partition_indexes]
            elif not access.allows(AclOperation.DESCRIBE, TOPIC, name):
                unknown += [(name, None, p, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in t.partition_indexes]
            else:
                asked.append((name, list(t.partition_indexes)))
    try:
        coordinator = await group_coordinator(ctx, group_id or "")
        error, rows = await coordinator.fetch_offsets.remote(group_id, asked, member_id, member_epoch,
                                                             require_stable)
    except Exception as e:
        return coordinator_error(e), []
    if error:
        return error, []
    if asked is None:  # every committed topic: those the principal may not describe are left out
        allowed = access.allowed(AclOperation.DESCRIBE, TOPIC, (row[0] for row in rows))
        rows = [row for row in rows if row[0] in allowed]
    return 0, [(t, None, p, v, e) for t, p, v, e in rows] + unknown


def _grouped(ctx, rows, by_id: bool):
    """Rows by topic, in order: [(name, topic id, [(partition, value, error)])]."""
    out: dict = {}
    for name, topic_id, p, value, error in rows:
        if by_id and topic_id is None:
            topic = ctx.metadata.topics.get(name)
            topic_id = topic.topic_id if topic is not None else None
        key = (name, topic_id)
        out.setdefault(key, []).append((p, value, error))
    return [(name, topic_id, parts) for (name, topic_id), parts in out.items()]


async def handle_offset_fetch(ctx, header, request, connection=None) -> OffsetFetchResponse:
    R = OffsetFetchResponse
    v = header.api_version
    access = ctx.access(connection)
    # require_stable (v7+; librdkafka sets it for isolation.level=read_committed): a partition with a pending
    # transactional offset answers UNSTABLE_OFFSET_COMMIT until the transaction ends
    require_stable = v >= OFFSET_FETCH_REQUIRE_STABLE and bool(request.require_stable)
    if v < 8:
        error, rows = await _fetch_group(ctx, access, request.group_id, request.topics, by_id=False,
                                         require_stable=require_stable)
        answer = R(throttle_time_ms=0, error_code=error, topics=[])
        for name, _, parts in _grouped(ctx, rows, by_id=False):
            answer.topics.append(R.OffsetFetchResponseTopic(name=name, partitions=[R.OffsetFetchResponsePartition(
                partition_index=p, error_code=e, **_committed(value)) for p, value, e in parts]))
        if error and v < 2:  # no group error field: each partition carries it
            answer.topics = [R.OffsetFetchResponseTopic(name=t.name, partitions=[R.OffsetFetchResponsePartition(
                partition_index=p, error_code=error, **_committed(None)) for p in t.partition_indexes])
                for t in (request.topics or [])]
        return answer
    by_id = v >= OFFSET_COMMIT_TOPIC_IDS
    fetched = await asyncio.gather(*(_fetch_group(ctx, access, g.group_id, g.topics, by_id, g.member_id,
                                                  g.member_epoch, require_stable)
                                     for g in request.groups))
    return R(throttle_time_ms=0, groups=[
        R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=error, topics=[
            R.OffsetFetchResponseTopics(name=name or "", topic_id=topic_id, partitions=[
                R.OffsetFetchResponsePartitions(partition_index=p, error_code=e, **_committed(value))
                for p, value, e in parts])
            for name, topic_id, parts in _grouped(ctx, rows, by_id)])
        for g, (error, rows) in zip(request.groups, fetched)])


def _committed(value) -> dict:
    """A partition's committed fields from (offset, leader epoch, metadata), or nothing committed."""
    if value is None:
        return dict(committed_offset=NO_OFFSET, committed_leader_epoch=-1, metadata="")
    offset, leader_epoch, metadata = value
    return dict(committed_offset=offset, committed_leader_epoch=leader_epoch, metadata=metadata)


async def handle_offset_delete(ctx, header, request, connection=None) -> OffsetDeleteResponse:
    R = OffsetDeleteResponse
    access = ctx.access(connection)
    if not access.allows(AclOperation.DELETE, GROUP, request.group_id or ""):
        return R(error_code=GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0, topics=[])
    readable = access.allowed(AclOperation.READ, TOPIC, (t.name for t in request.topics))
    wanted = [(t.name, p.partition_index) for t in request.topics if t.name in readable for p in t.partitions]
    try:
        coordinator = await group_coordinator(ctx, request.group_id or "")
        error, errors = await coordinator.delete_offsets.remote(request.group_id, wanted)
    except Exception as e:
        error, errors = coordinator_error(e), []
    if error:
        return R(error_code=error, throttle_time_ms=0, topics=[])
    it = iter(errors)
    return R(error_code=0, throttle_time_ms=0, topics=[
        R.OffsetDeleteResponseTopic(name=t.name, partitions=[
            R.OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                            error_code=next(it) if t.name in readable
                                            else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            for p in t.partitions]) for t in request.topics])


# ---- the consumer protocol (KIP-848) -------------------------------------------------------------------------------

async def handle_consumer_group_heartbeat(ctx, header, request, connection=None) -> ConsumerGroupHeartbeatResponse:
    R = ConsumerGroupHeartbeatResponse
    access = ctx.access(connection)
    if not access.allows(AclOperation.READ, GROUP, request.group_id or ""):
        return R(throttle_time_ms=0, error_code=GROUP_AUTHORIZATION_FAILED, error_message=None, member_epoch=-1,
                 heartbeat_interval_ms=0)
    subscribed = set(request.subscribed_topic_names or ())
    if subscribed and access.allowed(AclOperation.DESCRIBE, TOPIC, subscribed) != subscribed:
        return R(throttle_time_ms=0, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=None,
                 member_epoch=-1, heartbeat_interval_ms=0)
    owned = None
    if request.topic_partitions is not None:
        owned = [(t.topic_id, list(t.partitions)) for t in request.topic_partitions]
    fields = dict(instance_id=request.instance_id, rack_id=request.rack_id,
                  rebalance_timeout_ms=request.rebalance_timeout_ms,
                  subscribed_topic_names=None if request.subscribed_topic_names is None
                  else list(request.subscribed_topic_names),
                  subscribed_topic_regex=request.subscribed_topic_regex, server_assignor=request.server_assignor,
                  owned_partitions=owned, client_id=header.client_id or "", client_host=_peer(connection),
                  api_version=header.api_version)
    try:
        coordinator = await group_coordinator(ctx, request.group_id or "")
        r = await coordinator.consumer_group_heartbeat.remote(request.group_id, request.member_id or "",
                                                              request.member_epoch, fields)
    except Exception as e:
        log.info("consumer group heartbeat failed: %s", e)
        return R(throttle_time_ms=0, error_code=coordinator_error(e), error_message=str(e), member_epoch=-1,
                 heartbeat_interval_ms=0)
    assignment = None
    if r.assignment is not None:
        assignment = R.Assignment(topic_partitions=[R.TopicPartitions(topic_id=t, partitions=list(ps))
                                                    for t, ps in r.assignment])
    return R(throttle_time_ms=0, error_code=r.error_code, error_message=r.error_message, member_id=r.member_id,
             member_epoch=r.member_epoch, heartbeat_interval_ms=r.heartbeat_interval_ms, assignment=assignment)


async def handle_consumer_group_describe(ctx, header, request, connection=None) -> ConsumerGroupDescribeResponse:
    R = ConsumerGroupDescribeResponse

    def assignment(parts):
        return R.Assignment(topic_partitions=[R.TopicPartitions(topic_id=t, topic_name=name, partitions=list(ps))
                                              for t, name, ps in parts])
    groups = []
    access = ctx.access(connection)
    for group_id in request.group_ids:
        if not access.allows(AclOperation.DESCRIBE, GROUP, group_id):
            groups.append(R.DescribedGroup(error_code=GROUP_AUTHORIZATION_FAILED, group_id=group_id, group_state="",
                                           group_epoch=0, assignment_epoch=0, assignor_name="", members=[]))
            continue
        try:
            [d] = await (await group_coordinator(ctx, group_id)).describe_consumer.remote([group_id])
        except Exception as e:
            groups.append(R.DescribedGroup(error_code=coordinator_error(e), error_message=str(e), group_id=group_id,
                                           group_state="", group_epoch=0, assignment_epoch=0, assignor_name="",
                                           members=[]))
            continue
        groups.append(R.DescribedGroup(
            error_code=d.error_code, error_message=d.error_message, group_id=group_id, group_state=d.group_state,
            group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch, assignor_name=d.assignor_name,
            authorized_operations=access.authorized_operations(GROUP, group_id)
            if request.include_authorized_operations and not d.error_code else AUTHORIZED_OPERATIONS_OMITTED,
            members=[R.Member(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                              member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                              subscribed_topic_names=list(m.subscribed_topic_names),
                              subscribed_topic_regex=m.subscribed_topic_regex, assignment=assignment(m.assignment),
                              target_assignment=assignment(m.target_assignment), member_type=m.member_type)
                     for m in d.members]))
    return R(throttle_time_ms=0, groups=hide_undescribed_topics(access, groups))
