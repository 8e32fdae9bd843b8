"""Streams groups on the wire (KIP-1071): StreamsGroupHeartbeat and StreamsGroupDescribe.

Each request goes to the group's coordinator (actors/group_coordinator/streams_group.py holds the rules).
When a heartbeat's topology needs internal topics (repartition, changelog) that do not exist, the coordinator
names them and this handler has the controller create them, in the background, with the partition counts and
configs the coordinator decided, as Kafka 4.1+'s broker does from the heartbeat; the members see
MISSING_INTERNAL_TOPICS until the topics exist. With an authorizer, as Kafka: the heartbeat needs READ on the
group and DESCRIBE on the topology's source topics, the topics are created only with CREATE on the cluster or on
each topic; describing needs DESCRIBE on the group.
"""
from __future__ import annotations

import asyncio
import logging
import time

from protocol.errors import ErrorCode
from protocol.messages import StreamsGroupDescribeResponse, StreamsGroupHeartbeatRequest, \
    StreamsGroupHeartbeatResponse

from actors.gateway.handlers.groups import AUTHORIZED_OPERATIONS_OMITTED, coordinator_error, group_coordinator
from actors.group_coordinator.streams_group import ASSIGNOR_NAME
from actors.group_coordinator.streams_topology import Subtopology, TopicInfo, Topology
from actors.security.authorizer import AclOperation, ResourceType

log = logging.getLogger("kray.gateway")
GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC
STREAMS_ACCEPTABLE_RECOVERY_LAG_V0 = 0     # what Kafka 4.4 answers in v0's acceptable_recovery_lag_legacy

_creating: set[str] = set()                # internal topics whose creation is under way (per gateway process)
# internal topic -> (monotonic deadline, why its creation failed): named in the heartbeats' status and not tried
# again until the deadline (Kafka keeps such errors for twice the heartbeat interval)
_failures: dict[str, tuple[float, str]] = {}


def _peer(connection) -> str:
    """The client's address as Kafka's StreamsGroupDescribe shows it (Java's InetAddress.toString(): "/1.2.3.4")."""
    return connection.client_host if connection is not None else ""


def _topology(t: StreamsGroupHeartbeatRequest.Topology | None) -> Topology | None:
    if t is None:
        return None

    def info(i):
        return TopicInfo(i.name, i.partitions, i.replication_factor,
                         tuple((kv.key, kv.value) for kv in i.topic_configs))
    return Topology(t.epoch, tuple(Subtopology(
        s.subtopology_id, tuple(s.source_topics), tuple(s.source_topic_regex),
        tuple(info(i) for i in s.state_changelog_topics), tuple(s.repartition_sink_topics),
        tuple(info(i) for i in s.repartition_source_topics),
        tuple((tuple(g.source_topics), tuple(g.source_topic_regex), tuple(g.repartition_source_topics))
              for g in s.copartition_groups))
        for s in t.subtopologies))


def _offsets(offsets):
    return None if offsets is None else [(o.subtopology_id, o.partition, o.offset) for o in offsets]


def _tasks(tasks):
    return None if tasks is None else [(t.subtopology_id, list(t.partitions)) for t in tasks]


async def _create_internal_topics(ctx, topics, remember_s: float) -> None:
    for t in topics:
        why = None
        try:
            error, message, _ = await ctx.controller.create_topic(t.name, t.partitions, t.replication_factor,
                                                                  dict(t.configs), False, None)
            if error and error != ErrorCode.TOPIC_ALREADY_EXISTS:
                why = message or ErrorCode(error).name
        except Exception as e:
            why = str(e)
        finally:
            _creating.discard(t.name)
        if why:
            log.warning("creating the streams internal topic %s failed: %s", t.name, why)
            _failures[t.name] = (time.monotonic() + remember_s, why)
    await ctx.refresh_metadata()


async def handle_streams_group_heartbeat(ctx, header, request, connection=None) -> StreamsGroupHeartbeatResponse:
    R = StreamsGroupHeartbeatResponse

    def failed(error, message=None):
        return R(throttle_time_ms=0, error_code=error, error_message=message, member_id="", member_epoch=0,
                 heartbeat_interval_ms=0, acceptable_recovery_lag_legacy=0, task_offset_interval_ms=0, status=[])
    access = ctx.access(connection)
    if not access.allows(AclOperation.READ, GROUP, request.group_id or ""):
        return failed(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    topology = _topology(request.topology)
    if topology is not None:
        sources = {t for s in topology.subtopologies for t in s.source_topics}
        if sources and access.allowed(AclOperation.DESCRIBE, TOPIC, sources) != sources:
            return failed(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    endpoint = None if request.user_endpoint is None else (request.user_endpoint.host, request.user_endpoint.port)
    fields = dict(instance_id=request.instance_id, rack_id=request.rack_id,
                  rebalance_timeout_ms=request.rebalance_timeout_ms, topology=topology,
                  active_tasks=_tasks(request.active_tasks), standby_tasks=_tasks(request.standby_tasks),
                  warmup_tasks=_tasks(request.warmup_tasks), process_id=request.process_id, user_endpoint=endpoint,
                  client_tags=None if request.client_tags is None else [(kv.key, kv.value)
                                                                        for kv in request.client_tags],
                  shutdown_application=request.shutdown_application,
                  endpoint_information_epoch=request.endpoint_information_epoch,
                  client_id=header.client_id or "", client_host=_peer(connection),
                  task_offsets=_offsets(request.task_offsets), task_end_offsets=_offsets(request.task_end_offsets))
    try:
        coordinator = await group_coordinator(ctx, request.group_id or "")
        r = await coordinator.streams_group_heartbeat.remote(request.group_id, request.member_id or "",
                                                             request.member_epoch, fields)
    except Exception as e:
        log.info("streams group heartbeat failed: %s", e)
        return failed(coordinator_error(e), str(e))
    status = [R.Status(status_code=code, status_detail=detail) for code, detail in r.status]
    if r.topics_to_create:
        wanted = [t.name for t in r.topics_to_create]
        creatable = set(wanted) if access.allows_cluster(AclOperation.CREATE) else \
            access.allowed(AclOperation.CREATE, TOPIC, wanted)
        denied = sorted(set(wanted) - creatable)
        if denied:
            status.append(R.Status(status_code=3, status_detail="Unauthorized to CREATE on topics "
                                                                 + ", ".join(denied) + "."))
        now = time.monotonic()
        failed_lately = {t.name: _failures[t.name][1] for t in r.topics_to_create
                         if t.name in _failures and _failures[t.name][0] > now}
        if failed_lately:   # named in the MISSING_INTERNAL_TOPICS status, as Kafka 4.4 words it
            failures = ", ".join(f"{name} ({why})" for name, why in sorted(failed_lately.items()))
            missing = next((s for s in status if s.status_code == 3), None)
            if missing is None:
                missing = R.Status(status_code=3, status_detail="Internal topics are missing: "
                                                                + ", ".join(sorted(failed_lately)))
                status.append(missing)
            missing.status_detail = f"{missing.status_detail}; Creation failed: {failures}."
        todo = [t for t in r.topics_to_create
                if t.name in creatable and t.name not in _creating and t.name not in failed_lately]
        if todo:
            _creating.update(t.name for t in todo)
            asyncio.ensure_future(_create_internal_topics(ctx, todo, 2 * r.heartbeat_interval_ms / 1000))

    def topic_partitions(pairs):
        return [R.TopicPartition(topic=topic, partitions=list(ps)) for topic, ps in pairs]

    def tasks(pairs):
        return None if pairs is None else [R.TaskIds(subtopology_id=s, partitions=list(ps)) for s, ps in pairs]
    return R(throttle_time_ms=0, error_code=r.error_code, error_message=r.error_message, member_id=r.member_id,
             member_epoch=r.member_epoch, heartbeat_interval_ms=r.heartbeat_interval_ms,
             acceptable_recovery_lag_legacy=STREAMS_ACCEPTABLE_RECOVERY_LAG_V0,
             task_offset_interval_ms=r.task_offset_interval_ms, status=status if not r.error_code else [],
             active_tasks=tasks(r.active_tasks), standby_tasks=tasks(r.standby_tasks),
             warmup_tasks=tasks(r.warmup_tasks), endpoint_information_epoch=r.endpoint_information_epoch,
             partitions_by_user_endpoint=None if r.partitions_by_user_endpoint is None else [
                 R.EndpointToPartitions(user_endpoint=R.Endpoint(host=host, port=port),
                                        active_partitions=topic_partitions(active),
                                        standby_partitions=topic_partitions(standby))
                 for (host, port), active, standby in r.partitions_by_user_endpoint])


async def handle_streams_group_describe(ctx, header, request, connection=None) -> StreamsGroupDescribeResponse:
    R = StreamsGroupDescribeResponse

    def info(t, partitions):
        return R.TopicInfo(name=t.name, partitions=partitions.get(t.name, t.partitions),
                           replication_factor=t.replication_factor,
                           topic_configs=[R.KeyValue(key=k, value=v) for k, v in t.topic_configs])

    def assignment(kinds):
        active, standby, warmup = ([R.TaskIds(subtopology_id=s, partitions=list(ps)) for s, ps in k] for k in kinds)
        return R.Assignment(active_tasks=active, standby_tasks=standby, warmup_tasks=warmup)

    groups = []
    access = ctx.access(connection)
    for group_id in request.group_ids:
        empty = dict(group_id=group_id, group_state="", group_epoch=0, assignment_epoch=0, members=[])
        if not access.allows(AclOperation.DESCRIBE, GROUP, group_id):
            groups.append(R.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, **empty))
            continue
        try:
            [d] = await (await group_coordinator(ctx, group_id)).describe_streams.remote([group_id])
        except Exception as e:
            groups.append(R.DescribedGroup(error_code=coordinator_error(e), error_message=str(e), **empty))
            continue
        if d.error_code:
            groups.append(R.DescribedGroup(error_code=d.error_code, error_message=d.error_message, **empty))
            continue
        if d.topology is not None:
            named = {t for s in d.topology.subtopologies for t in (
                *s.source_topics, *s.repartition_sink_topics, *(i.name for i in s.state_changelog_topics),
                *(i.name for i in s.repartition_source_topics))}
            if access.allowed(AclOperation.DESCRIBE, TOPIC, named) != named:
                groups.append(R.DescribedGroup(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                               error_message="The described group uses topics that the client is "
                                                             "not authorized to describe.", **empty))
                continue
        topology = None
        if d.topology is not None:
            parts = d.internal_partitions
            topology = R.Topology(epoch=d.topology.epoch, subtopologies=[R.Subtopology(
                subtopology_id=s.subtopology_id, source_topics=list(s.source_topics),
                repartition_sink_topics=list(s.repartition_sink_topics),
                state_changelog_topics=[info(t, parts) for t in s.state_changelog_topics],
                repartition_source_topics=[info(t, parts) for t in s.repartition_source_topics])
                for s in d.topology.subtopologies])
        groups.append(R.DescribedGroup(
            error_code=0, error_message=None, group_id=group_id, group_state=d.group_state,
            group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch, topology=topology,
            assignor_name=ASSIGNOR_NAME,
            authorized_operations=access.authorized_operations(GROUP, group_id)
            if request.include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED,
            members=[R.Member(member_id=m.member_id, member_epoch=m.member_epoch, instance_id=m.instance_id,
                              rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
                              topology_epoch=m.topology_epoch, process_id=m.process_id,
                              user_endpoint=None if m.user_endpoint is None
                              else R.Endpoint(host=m.user_endpoint[0], port=m.user_endpoint[1]),
                              client_tags=[R.KeyValue(key=k, value=v) for k, v in m.client_tags],
                              task_offsets=[R.TaskOffset(subtopology_id=s, partition=p, offset=o)
                                            for s, p, o in m.task_offsets],
                              task_end_offsets=[R.TaskOffset(subtopology_id=s, partition=p, offset=o)
                                                for s, p, o in m.task_end_offsets],
                              assignment=assignment(m.assignment),
                              target_assignment=assignment(m.target_assignment), is_classic=False)
                     for m in d.members]))
    return R(throttle_time_ms=0, groups=groups)
