"""FindCoordinator, ShareGroupHeartbeat, ShareGroupDescribe, ListGroups and DeleteGroups.

A group's coordinator is the actor that follows the leadership of the `__consumer_offsets`
partition its id hashes to, a transactional id's that of its `__transaction_state` partition; a share-partition's state lives with the share coordinator of the
`__share_group_state` partition "group:topicId:partition" hashes to. FindCoordinator names the
node broker (gateway) of that partition's leader. The internal topics are created on first use.

With an authorizer, as Kafka (KIP-932 for share groups): FindCoordinator needs DESCRIBE on the
group (CLUSTER_ACTION for share-state keys); ShareGroupHeartbeat READ on the group and DESCRIBE
on every subscribed topic; ShareGroupDescribe DESCRIBE on the group (a group whose assignments
name a topic the principal may not describe answers TOPIC_AUTHORIZATION_FAILED); ListGroups lists
every group with DESCRIBE on the cluster, else the groups the principal may describe;
DeleteGroups DELETE on the group.
"""
from __future__ import annotations

import asyncio
import logging

import ray.exceptions

from protocol.errors import ErrorCode
from protocol.messages import (DeleteGroupsResponse, FindCoordinatorResponse, ListGroupsResponse,
                               ShareGroupDescribeResponse, ShareGroupHeartbeatResponse)

from actors import internal_topics
from actors.gateway.handlers.cluster_info import broker_address
from actors.security.authorizer import AclOperation, ResourceType
from actors.share_coordinator.core import state_partition_for_key
from actors.shard.hosted import ReplicaNotHosted

log = logging.getLogger("kray.gateway")
KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, KEY_TYPE_SHARE = 0, 1, 2
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC


def find_refusal(access, key: str, key_type: int) -> int:
    """FindCoordinator's authorization error for one key, or 0."""
    if key_type == KEY_TYPE_GROUP:
        return 0 if access.allows(AclOperation.DESCRIBE, GROUP, key) else ErrorCode.GROUP_AUTHORIZATION_FAILED
    if key_type == KEY_TYPE_TRANSACTION:
        return 0 if access.allows(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key) \
            else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if key_type == KEY_TYPE_SHARE:
        return 0 if access.allows_cluster(AclOperation.CLUSTER_ACTION) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return 0


async def _internal_partition(ctx, topic_name: str, index_for):
    """(the partition state of the internal topic that owns a key, its coordinator)."""
    topic = ctx.metadata.topics.get(topic_name)
    if topic is None or (topic_name, 0) not in ctx.metadata.coordinators:
        ctx.set_metadata(await ctx.controller.ensure_internal_topic(topic_name))
        topic = ctx.metadata.topics[topic_name]
    index = index_for(len(topic.partitions))
    return topic.partitions[index], ctx.metadata.coordinators.get((topic_name, index))


def coordinator_error(e: Exception) -> int:
    """The code to answer when a coordinator call failed: the coordinator's own (NOT_COORDINATOR
    when its partition's leadership just moved); COORDINATOR_LOAD_IN_PROGRESS while the shard that
    hosts it restarts and is given its replicas again (this broker still leads the partition: the
    client asks it again, as Kafka's clients do of a broker loading its coordinator partition);
    else COORDINATOR_NOT_AVAILABLE, which makes the client find the coordinator again.

    librdkafka retries a request answered LOAD_IN_PROGRESS until its timeout, but hands
    NOT_AVAILABLE to the application at once (an OffsetFetch of `Consumer.committed` fails with it)."""
    cause = getattr(e, "cause", e)
    if code := getattr(cause, "error_code", None):
        return code
    if isinstance(cause, (ReplicaNotHosted, ray.exceptions.ActorUnavailableError)):
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


class NotCoordinator(Exception):
    """The group's coordinator is another broker: the client asks FindCoordinator again."""
    error_code = ErrorCode.NOT_COORDINATOR


async def group_coordinator(ctx, group_id: str):
    """The coordinator of `group_id`, if this broker is its coordinator (the leader of the
    group's __consumer_offsets partition); else NotCoordinator, as a Kafka broker answers."""
    partition, actor = await _internal_partition(ctx, internal_topics.CONSUMER_OFFSETS,
                                                 lambda n: internal_topics.group_partition(group_id, n))
    if ctx.fenced():
        raise NotCoordinator(f"broker {ctx.broker_id} is cut off from the controller, which may have moved group "
                             f"{group_id!r} to another coordinator: find it with FindCoordinator")
    if partition.leader != ctx.broker_id or actor is None:
        raise NotCoordinator(f"broker {ctx.broker_id} is not the coordinator of group {group_id!r} "
                             f"(broker {partition.leader} is): find it with FindCoordinator")
    return actor


async def _find_one(ctx, key: str, key_type: int):
    """(error code, message, broker) for one coordinator key."""
    if key_type == KEY_TYPE_GROUP:
        topic, index_for = internal_topics.CONSUMER_OFFSETS, lambda n: internal_topics.group_partition(key, n)
    elif key_type == KEY_TYPE_SHARE:
        if key.count(":") != 2:
            return ErrorCode.INVALID_REQUEST, "a share coordinator key is group:topicId:partition", None
        topic, index_for = internal_topics.SHARE_GROUP_STATE, lambda n: state_partition_for_key(key, n)
    elif key_type == KEY_TYPE_TRANSACTION:
        topic = internal_topics.TRANSACTION_STATE
        index_for = lambda n: internal_topics.transaction_partition(key, n)  # noqa: E731
    else:
        return ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}", None
    if not key:
        return ErrorCode.INVALID_REQUEST, "the coordinator key is empty", None
    try:
        partition, _ = await _internal_partition(ctx, topic, index_for)
    except Exception as e:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the coordinator is starting: {e}", None
    broker = ctx.metadata.brokers.get(partition.leader)
    if broker is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator's broker is not available", None
    return 0, None, broker


async def _find_on_listener(ctx, key, key_type, connection):
    """The coordinator at the address of the listener the client came in on."""
    error, message, broker = await _find_one(ctx, key, key_type)
    address = broker_address(broker, connection) if broker is not None else None
    if broker is not None and address is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator's broker has no listener of this name", None, None
    return error, message, broker, address


async def handle_find_coordinator(ctx, header, request, connection=None) -> FindCoordinatorResponse:
    access = ctx.access(connection)
    if header.api_version < 4:
        if refusal := find_refusal(access, request.key, request.key_type):
            return FindCoordinatorResponse(throttle_time_ms=0, error_code=refusal, error_message=None, node_id=-1,
                                           host="", port=-1)
        error, message, broker, address = await _find_on_listener(ctx, request.key, request.key_type, connection)
        return FindCoordinatorResponse(throttle_time_ms=0, error_code=error, error_message=message,
                                       node_id=broker.broker_id if broker else -1, host=address[0] if broker else "",
                                       port=address[1] if broker else -1)
    coordinators = []
    for key in request.coordinator_keys:
        if refusal := find_refusal(access, key, request.key_type):
            coordinators.append(FindCoordinatorResponse.Coordinator(key=key, node_id=-1, host="", port=-1,
                                                                    error_code=refusal, error_message=None))
            continue
        error, message, broker, address = await _find_on_listener(ctx, key, request.key_type, connection)
        coordinators.append(FindCoordinatorResponse.Coordinator(
            key=key, node_id=broker.broker_id if broker else -1, host=address[0] if broker else "",
            port=address[1] if broker else -1, error_code=error, error_message=message))
    return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)


async def handle_share_group_heartbeat(ctx, header, request, connection=None) -> ShareGroupHeartbeatResponse:
    access = ctx.access(connection)
    if not access.allows(AclOperation.READ, GROUP, request.group_id or ""):
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, member_epoch=-1,
                                           error_message="Group authorization failed.")
    subscribed = set(request.subscribed_topic_names or ())
    if subscribed and access.allowed(AclOperation.DESCRIBE, TOPIC, subscribed) != subscribed:
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, member_epoch=-1,
                                           error_message="Topic authorization failed.")
    try:
        coordinator = await group_coordinator(ctx, request.group_id or "")
        r = await coordinator.share_group_heartbeat.remote(
            request.group_id, request.member_id, request.member_epoch, request.rack_id,
            request.subscribed_topic_names, header.client_id or "",
            connection.client_host if connection is not None else "")
    except Exception as e:
        log.warning("share group heartbeat failed: %s", e)
        return ShareGroupHeartbeatResponse(error_code=coordinator_error(e), error_message=str(e), member_epoch=-1)
    assignment = None
    if r.assignment is not None:
        assignment = ShareGroupHeartbeatResponse.Assignment(topic_partitions=[
            ShareGroupHeartbeatResponse.TopicPartitions(topic_id=t, partitions=list(ps)) for t, ps in r.assignment])
    return ShareGroupHeartbeatResponse(throttle_time_ms=0, error_code=r.error_code, error_message=r.error_message,
                                       member_id=r.member_id, member_epoch=r.member_epoch,
                                       heartbeat_interval_ms=r.heartbeat_interval_ms, assignment=assignment)


async def handle_share_group_describe(ctx, header, request, connection=None) -> ShareGroupDescribeResponse:
    groups = []
    access = ctx.access(connection)
    for group_id in request.group_ids:
        if not access.allows(AclOperation.DESCRIBE, GROUP, group_id):
            groups.append(ShareGroupDescribeResponse.DescribedGroup(
                group_id=group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        try:
            described = (await (await group_coordinator(ctx, group_id)).describe.remote([group_id]))[0]
        except Exception as e:
            groups.append(ShareGroupDescribeResponse.DescribedGroup(
                group_id=group_id, error_code=coordinator_error(e), error_message=str(e)))
            continue
        groups.append(ShareGroupDescribeResponse.DescribedGroup(
            error_code=described.error_code, error_message=described.error_message, group_id=group_id,
            group_state=described.group_state, group_epoch=described.group_epoch,
            assignment_epoch=described.assignment_epoch, assignor_name=described.assignor_name,
            authorized_operations=access.authorized_operations(GROUP, group_id)
            if request.include_authorized_operations and not described.error_code else AUTHORIZED_OPERATIONS_OMITTED,
            members=[ShareGroupDescribeResponse.Member(
                member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
                client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
                assignment=ShareGroupDescribeResponse.Assignment(topic_partitions=[
                    ShareGroupDescribeResponse.TopicPartitions(topic_id=t, topic_name=name, partitions=list(ps))
                    for t, name, ps in m.assignment]))
                for m in described.members]))
    return ShareGroupDescribeResponse(throttle_time_ms=0, groups=hide_undescribed_topics(access, groups))


def hide_undescribed_topics(access, groups: list) -> list:
    """Kafka's rule for ShareGroupDescribe and ConsumerGroupDescribe: a group whose members'
    assignments name a topic the principal may not describe is answered TOPIC_AUTHORIZATION_FAILED
    without members (only with an authorizer)."""
    if not access.enforced:
        return groups
    named = {tp.topic_name for g in groups for m in (g.members or ()) if m.assignment is not None
             for tp in m.assignment.topic_partitions}
    allowed = access.allowed(AclOperation.DESCRIBE, TOPIC, named)
    out = []
    for g in groups:
        hidden = any(tp.topic_name not in allowed for m in (g.members or ()) if m.assignment is not None
                     for tp in m.assignment.topic_partitions)
        out.append(type(g)(group_id=g.group_id, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                           error_message="The group has described topic(s) that the client is not authorized to "
                                         "describe.", members=[]) if hidden else g)
    return out


async def handle_list_groups(ctx, header, request, connection=None) -> ListGroupsResponse:
    """The groups this broker coordinates, of every type (a client lists every broker's, as
    Kafka's admin clients do)."""
    topic = ctx.metadata.topics.get(internal_topics.CONSUMER_OFFSETS)
    actors = [a for (name, index), a in ctx.metadata.coordinators.items()
              if name == internal_topics.CONSUMER_OFFSETS and topic is not None
              and topic.partitions[index].leader == ctx.broker_id]
    if topic is None or not actors:
        return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=[])
    access = ctx.access(connection)
    every_group = access.allows_cluster(AclOperation.DESCRIBE)
    try:
        listed = await asyncio.gather(*(a.list_groups.remote(list(request.states_filter), list(request.types_filter))
                                        for a in actors))
    except Exception as e:
        log.warning("listing groups failed: %s", e)
        return ListGroupsResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, groups=[])
    rows = [row for part in listed for row in part]
    if not every_group:  # only the groups the principal may describe
        allowed = access.allowed(AclOperation.DESCRIBE, GROUP, (row[0] for row in rows))
        rows = [row for row in rows if row[0] in allowed]
    return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=[
        ListGroupsResponse.ListedGroup(group_id=g, protocol_type=protocol_type, group_state=state, group_type=t)
        for g, state, t, protocol_type in rows])


async def handle_delete_groups(ctx, header, request, connection=None) -> DeleteGroupsResponse:
    results = []
    access = ctx.access(connection)
    for group_id in request.groups_names:
        if not access.allows(AclOperation.DELETE, GROUP, group_id):
            results.append(DeleteGroupsResponse.DeletableGroupResult(
                group_id=group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        try:
            [(g, code, message)] = await (await group_coordinator(ctx, group_id)).delete_groups.remote([group_id])
        except Exception as e:
            code, message = coordinator_error(e), str(e)
        results.append(DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=code,
                                                                 error_message=message))
    return DeleteGroupsResponse(throttle_time_ms=0, results=results)
