"""Finding a request's topic in the metadata image, by name or (newer versions) by topic id."""
from __future__ import annotations

from protocol.errors import ErrorCode


def resolve_topic(ctx, name, topic_id, by_id: bool):
    """Return (topic or None, the error code to answer when it is unknown)."""
    if by_id:
        return ctx.metadata.topic_by_id(topic_id), ErrorCode.UNKNOWN_TOPIC_ID
    return ctx.metadata.topics.get(name), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def partition_client(ctx, topic, index: int, unknown_error: int = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
    """(the client for a topic's partition, or None and the error to answer): an unknown topic or
    partition index, or NOT_LEADER_OR_FOLLOWER where this front end does not serve that partition."""
    if topic is None:
        return None, unknown_error
    client = ctx.partition(topic.topic_id, index)
    if client is not None:
        return client, 0
    if not 0 <= index < len(topic.partitions):
        return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
