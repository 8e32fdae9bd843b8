"""Finding a request's topic in the metadata image, by name or (newer versions) by topic id."""
from __future__ import annotations

from protocol.errors import ErrorCode


def resolve_topic(ctx, name, topic_id, by_id: bool):
    """Return (topic or None, the error code to answer when it is unknown)."""
    if by_id:
        return ctx.metadata.topic_by_id(topic_id), ErrorCode.UNKNOWN_TOPIC_ID
    return ctx.metadata.topics.get(name), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def partition_client(ctx, topic, index: int, unknown_error: int = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     follower: bool = False):
    """(the client for a topic's partition, or None and the error to answer): an unknown topic or
    partition index, or NOT_LEADER_OR_FOLLOWER where this front end does not serve that partition.
    `follower`: for a follower's fetch, which a broker cut off from the controller still serves."""
    if topic is None:
        return None, unknown_error
    client = ctx.partition(topic.topic_id, index, follower=follower)
    if client is not None:
        return client, 0
    if not 0 <= index < len(topic.partitions):
        return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return None, ErrorCode.NOT_LEADER_OR_FOLLOWER


async def leader_clients(ctx, wanted: list[tuple], by_id: bool) -> list[tuple]:
    """For requests that change partitions (produce, share acknowledgements): for each (topic
    name, topic id, partition index) in `wanted`, (the data-path client of its leader here, 0) or
    (None, the error to answer). Where this gateway's image has no route, it first catches up with
    the controller: a refusal is never decided on metadata older than what the client routed by,
    so a connection's first requests to a partition are not refused while later ones are taken."""
    def route(name, topic_id, index):
        topic, unknown_error = resolve_topic(ctx, name, topic_id, by_id)
        return partition_client(ctx, topic, index, unknown_error)

    routed = [route(*w) for w in wanted]
    if any(client is None for client, _ in routed):
        await ctx.catch_up_metadata()
        routed = [r if r[0] is not None else route(*w) for r, w in zip(routed, wanted)]
    return routed
