"""WriteTxnMarkers (api key 27), the partition leaders' side: the transaction coordinator asks
this broker to end transactions in the partitions it leads, with a COMMIT or ABORT marker each.

As Kafka's handleWriteTxnMarkersRequest: the caller needs CLUSTER_ACTION on the cluster (the
brokers' own principal), else every partition answers CLUSTER_AUTHORIZATION_FAILED and nothing
is written; an unknown topic or partition answers UNKNOWN_TOPIC_OR_PARTITION, one this broker
does not lead NOT_LEADER_OR_FOLLOWER; the others get their marker appended by their leader
(actors/partition/core.py append_marker: INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED)
and answered once min.insync.replicas hold it (acks=all). Markers travel over the data path, one
frame per shard for all of the request's markers it leads, never one call per marker.
"""
from __future__ import annotations

import asyncio
import logging

from protocol.errors import ErrorCode
from protocol.messages import WriteTxnMarkersResponse

from actors.gateway.handlers.routing import leader_clients
from actors.gateway.partition_client import PartitionNotHosted, by_listener
from actors.security.authorizer import AclOperation

log = logging.getLogger("kray.gateway")
# Kafka writes markers with the request timeout of the coordinator's channel to the broker
# (request.timeout.ms, 30 s): an acks=all wait longer than this answers REQUEST_TIMED_OUT
MARKER_TIMEOUT_MS = 30_000


async def handle_write_txn_markers(ctx, header, request, connection=None) -> WriteTxnMarkersResponse:
    allowed = ctx.access(connection).allows_cluster(AclOperation.CLUSTER_ACTION)
    results, wanted, slots = [], [], []
    for marker in request.markers:
        topics = []
        results.append(WriteTxnMarkersResponse.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topics))
        for topic in marker.topics:
            partitions = []
            topics.append(WriteTxnMarkersResponse.WritableTxnMarkerTopicResult(name=topic.name, partitions=partitions))
            for index in topic.partition_indexes:
                answer = WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult(partition_index=index, error_code=0)
                partitions.append(answer)
                if not allowed:
                    answer.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                    continue
                wanted.append((topic.name, None, index))
                slots.append((answer, marker))
                # the producer's transaction ends here: a later batch of it is verified again (KIP-890 part 1)
                ctx.txn_verifications.marker(marker.producer_id, topic.name, index)
    routed = []
    for (answer, marker), (client, error) in zip(slots, await leader_clients(ctx, wanted, False)):
        answer.error_code = error
        if client is not None:
            routed.append((answer, marker, client))
    sent = []
    try:
        for group in by_listener(routed, lambda item: item[2]):
            calls = [(client.key, m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result)
                     for _, m, client in group]
            sent.append(([answer for answer, _, _ in group],
                         await group[0][2].send_txn_markers(calls, timeout_ms=MARKER_TIMEOUT_MS)))
        outcomes = await asyncio.gather(*(result for _, result in sent), return_exceptions=True)
    except (ConnectionError, OSError, asyncio.TimeoutError) as e:
        for _, result in sent:
            result.close()
        outcomes = [e] * len(sent)
    for (answers, _), outcome in zip(sent, outcomes):
        if isinstance(outcome, BaseException):
            # whether the markers were written is unknown: the coordinator retries them (a
            # marker written twice ends nothing the second time)
            log.warning("WriteTxnMarkers: a shard's data path failed: %s", outcome)
            outcome = [outcome] * len(answers)
        for answer, r in zip(answers, outcome):
            if isinstance(r, PartitionNotHosted):
                answer.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif isinstance(r, BaseException):
                answer.error_code = ErrorCode.REQUEST_TIMED_OUT if isinstance(r, asyncio.TimeoutError) \
                    else ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                answer.error_code = r[0]
    return WriteTxnMarkersResponse(markers=results)
