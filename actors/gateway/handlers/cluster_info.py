"""Metadata and DescribeCluster: answers read from the metadata image.

A broker is a Ray node: every node runs one gateway, its only client listener. A partition's
leader is the broker of the node that hosts its leader actor; any gateway describes the whole
cluster.
"""
from __future__ import annotations

import uuid

from protocol.errors import ErrorCode
from protocol.messages import DescribeClusterResponse, MetadataResponse

AUTHORIZED_OPERATIONS_OMITTED = -2147483648
ZERO_UUID = uuid.UUID(int=0)


def broker_address(broker, connection) -> tuple[str, int] | None:
    """Where a client that came in on `connection`'s listener reaches `broker`: that listener's
    advertised address, None when the broker has no such listener (Kafka then leaves it out).
    Without a listener (handlers called directly, the share-state front end): the primary address."""
    listener = getattr(connection, "listener_name", None)
    if listener is None or not broker.endpoints:
        return broker.host, broker.port
    return broker.endpoints.get(listener)


def _brokers(image, connection) -> list[tuple]:
    return [(b, address) for b in image.brokers.values() if (address := broker_address(b, connection)) is not None]


def _partition_response(image, topic, p) -> MetadataResponse.MetadataResponsePartition:
    """A leader is named only once it can take writes: its broker is live and its replica listens
    and knows it leads in this epoch (a partition just created, or whose leader just moved, answers
    LEADER_NOT_AVAILABLE for a moment; clients wait and ask again rather than fail a send)."""
    ready = p.leader in image.brokers and (topic.topic_id, p.index) in image.partition_listeners
    return MetadataResponse.MetadataResponsePartition(
        error_code=0 if ready else ErrorCode.LEADER_NOT_AVAILABLE,
        partition_index=p.index, leader_id=image.leader_id(topic, p.index) if ready else -1,
        leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas), isr_nodes=list(p.isr), offline_replicas=[])


def _topic_response(ctx, topic) -> MetadataResponse.MetadataResponseTopic:
    return MetadataResponse.MetadataResponseTopic(
        error_code=0, name=topic.name, topic_id=topic.topic_id, is_internal=topic.internal,
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        partitions=[_partition_response(ctx.metadata, topic, p) for p in topic.partitions])


async def handle_metadata(ctx, header, request, connection=None) -> MetadataResponse:
    version = header.api_version
    image = ctx.metadata
    all_topics = request.topics is None or (version == 0 and not request.topics)
    topics = []
    if all_topics:
        topics = [_topic_response(ctx, t) for t in image.topics.values() if not t.internal]
    else:
        allow_create = request.allow_auto_topic_creation and ctx.config["auto.create.topics.enable"]
        for wanted in request.topics:
            if wanted.name is None and wanted.topic_id != ZERO_UUID:
                topic = image.topic_by_id(wanted.topic_id)
                topics.append(_topic_response(ctx, topic) if topic else MetadataResponse.MetadataResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=wanted.topic_id,
                    topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
                continue
            topic = ctx.metadata.topics.get(wanted.name)
            error = 0
            if topic is None and allow_create:
                error, _message, _created = await ctx.controller.create_topic(wanted.name, -1, -1, {}, False, None)
                if error == ErrorCode.TOPIC_ALREADY_EXISTS:
                    error = 0
                await ctx.refresh_metadata()
                topic = ctx.metadata.topics.get(wanted.name)
            if topic is not None:
                topics.append(_topic_response(ctx, topic))
            else:
                topics.append(MetadataResponse.MetadataResponseTopic(
                    error_code=error or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=wanted.name,
                    topic_id=ZERO_UUID, topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
    return MetadataResponse(
        throttle_time_ms=0, cluster_id=image.cluster_id, controller_id=image.controller_id,
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED, topics=topics,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=b.broker_id, host=host, port=port, rack=b.rack)
                 for b, (host, port) in _brokers(image, connection)])


async def handle_describe_cluster(ctx, header, request, connection=None) -> DescribeClusterResponse:
    image = ctx.metadata
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, endpoint_type=1, cluster_id=image.cluster_id,
        controller_id=image.controller_id, cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        brokers=[DescribeClusterResponse.DescribeClusterBroker(broker_id=b.broker_id, host=host, port=port,
                                                               rack=b.rack, is_fenced=False)
                 for b, (host, port) in _brokers(image, connection)])
