"""Kafka's share-state APIs (Initialize, Read, Write, Delete and ReadSummary ShareGroupState, keys
83-87) on the broker's listeners, as a Kafka broker serves them to the other brokers' share-partition
leaders: the only way share state reaches a coordinator from another broker (the coordinator has no
port of its own; see actors/share_coordinator/wire.py).

Authorization is Kafka's: CLUSTER_ACTION on the Cluster, else every partition of the request answers
CLUSTER_AUTHORIZATION_FAILED. Kray's share-partition leaders log in as the brokers do on a SASL
inter-broker listener (Kray's own `User:kray-broker`, a super user, or the operator's login:
actors/security/inter_broker.py); over a PLAINTEXT or SSL one
their principal is ANONYMOUS or their certificate's, which needs CLUSTER_ACTION where an
authorizer is on, exactly as for followers' fetches. Without an authorizer everything is allowed,
as in Kafka.

Each partition goes to the share coordinator of the `__share_group_state` partition that
"group:topicId:partition" hashes to, which must lead here: its shard gets the request's partitions
of that coordinator as one SHARE_STATE frame over the gateway's Unix socket to it (the data path
produce takes). Elsewhere (or while this broker is fenced) the partition answers NOT_COORDINATOR
and the sender looks the coordinator up again. Frames are sent while holding the connection's turn,
so one sender's writes reach the coordinator in the order it sent them; a data path that fails
with the outcome unknown closes the sender's connection, as a produce's does, so that nothing it
sends later overtakes what may still be applied.
"""
from __future__ import annotations

import asyncio
import logging

from protocol.errors import ErrorCode

from actors import internal_topics
from actors.gateway.connection import CloseConnection, in_request_order
from actors.gateway.partition_client import PartitionNotHosted
from actors.security.authorizer import AclOperation
from actors.share_coordinator import wire
from actors.share_coordinator.core import state_partition_for

log = logging.getLogger("kray.gateway")
CLUSTER_REFUSED = "Cluster authorization failed."
NOT_COORDINATOR_MESSAGE = "this broker does not lead the share coordinator's partition now"


def _routes(ctx, group_id: str, keys: list) -> tuple[list, object]:
    """The client of the coordinator's partition for each (topic id, partition) in `keys` (None where
    this broker does not lead it), and the `__share_group_state` topic."""
    topic = ctx.metadata.topics.get(internal_topics.SHARE_GROUP_STATE)
    if topic is None or not topic.partitions:
        return [None] * len(keys), None
    count = len(topic.partitions)
    return [ctx.partition(topic.topic_id, state_partition_for(group_id, t, p, count)) for t, p in keys], topic


async def _serve(ctx, header, request, connection):
    api_key = header.api_key
    items = wire.items(api_key, request)
    if not ctx.access(connection).allows_cluster(AclOperation.CLUSTER_ACTION):
        log.warning("a %s request from %s as %s refused: it needs CLUSTER_ACTION on the cluster (the brokers' "
                    "principal: in super.users, or granted with an ACL)",
                    type(request).__name__.removesuffix("Request"), getattr(connection, "peer", None),
                    getattr(connection, "principal", None))
        return wire.response(api_key, request, [wire.error_result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                                  CLUSTER_REFUSED)] * len(items))
    results: list = [wire.error_result(ErrorCode.NOT_COORDINATOR, NOT_COORDINATOR_MESSAGE)] * len(items)
    answers = []  # (the item positions, an awaitable of their results)
    try:
        async with in_request_order(connection):
            keys = [key for key, _ in items]
            clients, _ = _routes(ctx, request.group_id, keys)
            if any(c is None for c in clients):  # decide on metadata no older than what the sender routed by
                await ctx.catch_up_metadata()
                clients = [c if c is not None else again
                           for c, again in zip(clients, _routes(ctx, request.group_id, keys)[0])]
            groups: dict[int, tuple] = {}
            for position, client in enumerate(clients):
                if client is not None:
                    groups.setdefault(id(client), (client, []))[1].append(position)
            for client, positions in groups.values():
                answers.append((positions, await client.send_share_state(
                    api_key, request.group_id, [items[i][1] for i in positions])))
        outcomes = await asyncio.gather(*(answer for _, answer in answers), return_exceptions=True)
    except (ConnectionError, OSError, asyncio.TimeoutError) as e:
        for _, answer in answers:
            answer.close()
        _data_path_failed(connection, e)
    for (positions, _), outcome in zip(answers, outcomes):
        if isinstance(outcome, PartitionNotHosted):
            continue  # NOT_COORDINATOR: nothing was done
        if isinstance(outcome, BaseException):
            _data_path_failed(connection, outcome)
        for position, result in zip(positions, outcome):
            results[position] = result
    return wire.response(api_key, request, results)


def _data_path_failed(connection, e: BaseException):
    reason = f"a share coordinator could not be reached ({type(e).__name__}: {e}); retry"
    if connection is not None:
        connection.abort(reason)
    raise CloseConnection(reason)


async def handle_share_state(ctx, header, request, connection=None):
    return await _serve(ctx, header, request, connection)
