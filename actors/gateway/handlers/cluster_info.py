"""Metadata and DescribeCluster: answers read from the metadata image.

A broker is a Ray node: every node runs one gateway, its only client listener. A partition's
leader is the broker of the node that hosts its leader actor; any gateway describes the whole
cluster.
"""
from __future__ import annotations

import uuid

from protocol.errors import ErrorCode
from protocol.messages import DescribeClusterResponse, MetadataResponse

from actors.topic_names import topic_name_error
from actors.security.authorizer import CLUSTER_NAME, AclOperation, ResourceType

AUTHORIZED_OPERATIONS_OMITTED = -2147483648
ZERO_UUID = uuid.UUID(int=0)


def broker_address(broker, connection) -> tuple[str, int] | None:
    """Where a client that came in on `connection`'s listener reaches `broker`: that listener's
    advertised address, None when the broker has no such listener (Kafka then leaves it out).
    Without a listener (handlers called directly): the primary address."""
    listener = getattr(connection, "listener_name", None)
    if listener is None or not broker.endpoints:
        return broker.host, broker.port
    return broker.endpoints.get(listener)


def _brokers(image, connection) -> list[tuple]:
    return [(b, address) for b in image.brokers.values() if (address := broker_address(b, connection)) is not None]


def _partition_response(image, topic, p) -> MetadataResponse.MetadataResponsePartition:
    """LEADER_NOT_AVAILABLE (leader -1) where the leader's broker is not live (unregistered or
    fenced), as Kafka's metadata cache answers, and for a new partition until its first leader's
    replica listens and knows it leads: producers started while a topic is created then wait
    instead of having their first requests refused and later ones taken (tests/e2e/test_send_order.py).

    Once a partition has had a leader (leader epoch > 0: it moved, or was elected after a
    failure), its live leader is named at once, as Kafka names it, even before the new leader's
    replica has confirmed; for that moment produce and fetch there answer NOT_LEADER_OR_FOLLOWER
    and clients refresh and retry. Naming no leader instead would strand librdkafka: it caches a
    leaderless partition as a permanent error for watermark and offsets-for-times queries ("Local:
    Unknown partition") until its next periodic metadata refresh, up to 5 minutes."""
    live = p.leader in image.brokers
    ready = live and (p.leader_epoch > 0 or (topic.topic_id, p.index) in image.partition_listeners)
    return MetadataResponse.MetadataResponsePartition(
        error_code=0 if ready else ErrorCode.LEADER_NOT_AVAILABLE,
        partition_index=p.index, leader_id=image.leader_id(topic, p.index) if ready else -1,
        leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas), isr_nodes=list(p.isr), offline_replicas=[])


def _topic_response(ctx, topic, operations: int = AUTHORIZED_OPERATIONS_OMITTED) -> MetadataResponse.MetadataResponseTopic:
    return MetadataResponse.MetadataResponseTopic(
        error_code=0, name=topic.name, topic_id=topic.topic_id, is_internal=topic.internal,
        topic_authorized_operations=operations,
        partitions=[_partition_response(ctx.metadata, topic, p) for p in topic.partitions])


def _refused(name, topic_id=ZERO_UUID) -> MetadataResponse.MetadataResponseTopic:
    return MetadataResponse.MetadataResponseTopic(
        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=topic_id, is_internal=False,
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED, partitions=[])


async def handle_metadata(ctx, header, request, connection=None) -> MetadataResponse:
    """With an authorizer, as Kafka: listing every topic lists those the principal may DESCRIBE; a
    topic named but not describable answers TOPIC_AUTHORIZATION_FAILED whether it exists or not
    (by id: with its id, no name); auto-creation also needs CREATE on the cluster or the topic."""
    version = header.api_version
    image = ctx.metadata
    access = ctx.access(connection)
    with_operations = version >= 8 and request.include_topic_authorized_operations

    def described(topic):
        operations = access.authorized_operations(ResourceType.TOPIC, topic.name) if with_operations \
            else AUTHORIZED_OPERATIONS_OMITTED
        return _topic_response(ctx, topic, operations)

    all_topics = request.topics is None or (version == 0 and not request.topics)
    topics = []
    if all_topics:
        visible = list(image.topics.values())  # internal ones too, marked is_internal, as Kafka lists them
        allowed = access.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in visible))
        topics = [described(t) for t in visible if t.name in allowed]
    else:
        allow_create = request.allow_auto_topic_creation and ctx.config["auto.create.topics.enable"]
        may_create_any = None
        for wanted in request.topics:
            if wanted.name is None and wanted.topic_id != ZERO_UUID:
                topic = image.topic_by_id(wanted.topic_id)
                if topic is not None and not access.allows(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name):
                    topics.append(_refused(None, wanted.topic_id))  # ids are not secret; names are
                    continue
                topics.append(described(topic) if topic else MetadataResponse.MetadataResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=wanted.topic_id,
                    topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
                continue
            if not access.allows(AclOperation.DESCRIBE, ResourceType.TOPIC, wanted.name):
                topics.append(_refused(wanted.name))  # whether it exists or not: nothing is disclosed
                continue
            topic = ctx.metadata.topics.get(wanted.name)
            error = 0
            if topic is None and topic_name_error(wanted.name or ""):  # as Kafka: whether or not it may be created
                topics.append(MetadataResponse.MetadataResponseTopic(
                    error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=wanted.name, topic_id=ZERO_UUID,
                    topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
                continue
            if topic is None and allow_create:
                if may_create_any is None:
                    may_create_any = access.allows_cluster(AclOperation.CREATE)
                if not may_create_any and not access.allows(AclOperation.CREATE, ResourceType.TOPIC, wanted.name):
                    topics.append(_refused(wanted.name))
                    continue
                error, _message, _created = await ctx.controller.create_topic(wanted.name, -1, -1, {}, False, None)
                if error == ErrorCode.TOPIC_ALREADY_EXISTS:
                    error = 0
                await ctx.refresh_metadata()
                topic = ctx.metadata.topics.get(wanted.name)
            if topic is not None:
                topics.append(described(topic))
            else:
                topics.append(MetadataResponse.MetadataResponseTopic(
                    error_code=error or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=wanted.name,
                    topic_id=ZERO_UUID, topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
    cluster_operations = AUTHORIZED_OPERATIONS_OMITTED
    if 8 <= version <= 10 and request.include_cluster_authorized_operations:
        cluster_operations = access.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME) \
            if access.allows_cluster(AclOperation.DESCRIBE) else 0
    return MetadataResponse(
        throttle_time_ms=0, cluster_id=image.cluster_id, controller_id=image.controller_id,
        cluster_authorized_operations=cluster_operations, topics=topics,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=b.broker_id, host=host, port=port, rack=b.rack)
                 for b, (host, port) in _brokers(image, connection)])


async def handle_describe_cluster(ctx, header, request, connection=None) -> DescribeClusterResponse:
    image = ctx.metadata
    operations = AUTHORIZED_OPERATIONS_OMITTED
    if request.include_cluster_authorized_operations:
        access = ctx.access(connection)
        operations = access.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME) \
            if access.allows_cluster(AclOperation.DESCRIBE) else 0
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, endpoint_type=1, cluster_id=image.cluster_id,
        controller_id=image.controller_id, cluster_authorized_operations=operations,
        brokers=[DescribeClusterResponse.DescribeClusterBroker(broker_id=b.broker_id, host=host, port=port,
                                                               rack=b.rack, is_fenced=False)
                 for b, (host, port) in _brokers(image, connection)])
