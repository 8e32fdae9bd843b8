"""Finding a request's topic in the metadata image, by name or (newer versions) by topic id."""
from __future__ import annotations

from protocol.errors import ErrorCode


def resolve_topic(ctx, name, topic_id, by_id: bool):
    """Return (topic or None, the error code to answer when it is unknown)."""
    if by_id:
        return ctx.metadata.topic_by_id(topic_id), ErrorCode.UNKNOWN_TOPIC_ID
    return ctx.metadata.topics.get(name), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
