"""Produce: one data-path frame per shard, carrying the request's partitions that shard hosts
(one call per partition where a shard has only one), all shards in parallel.

The records travel as the bytes the producer sent; the partition leader validates them and
patches offsets into the batch headers. A connection's produce requests are routed and sent in
request order (the connection's turn, see actors/gateway/connection.py), so each partition
appends them in the order the client sent them; answers are awaited after the turn is passed on,
so up to max.in.flight requests stay pipelined. A topic the principal may not WRITE answers
TOPIC_AUTHORIZATION_FAILED for each of its partitions and nothing of it is sent (as Kafka). A
partition its shard no longer hosts answers NOT_LEADER_OR_FOLLOWER (nothing was appended); only a
data path that failed with the outcome unknown closes the connection.
"""
from __future__ import annotations

import asyncio
import logging

from protocol.errors import ErrorCode
from protocol.messages import ProduceResponse
from protocol.record_batch import parse_header

from actors.gateway.connection import CloseConnection, in_request_order
from actors.gateway.handlers.quotas import throttle as quota_throttle
from actors.gateway.handlers.routing import leader_clients
from actors.gateway.handlers.transactions import (PRODUCE_ADDS_PARTITIONS, add_produced_partitions, known_partition,
                                                  verify_produced_partitions)
from actors.gateway.partition_client import PartitionNotHosted, by_listener
from actors.quotas import PRODUCER_BYTE_RATE
from actors.security.authorizer import AclOperation, ResourceType

log = logging.getLogger("kray.gateway")
VALID_ACKS = (-1, 0, 1)
NO_EPOCH_GIVEN = -1
# the shard this broker routed to hosts no replica of the partition now (deleted, or moved while the
# request travelled): nothing was appended, so the client may retry it once its metadata is fresh
NOT_HOSTED_MESSAGE = "this broker does not host the partition now; refresh metadata and retry"


def acks_zero(request) -> bool:
    return request.acks == 0


async def handle_produce(ctx, header, request, connection=None) -> ProduceResponse:
    by_id = header.api_version >= 13
    responses, wanted, slots, known = [], [], [], []
    access = ctx.access(connection)
    names = {id(t): _topic_name(ctx, t, by_id) for t in request.topic_data}
    writable = access.allowed(AclOperation.WRITE, ResourceType.TOPIC, (n for n in names.values() if n is not None))
    # a transactional produce needs WRITE on its transactional id, else nothing of it is written (Kafka
    # answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition)
    refused = request.transactional_id is not None and not access.allows(
        AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
    # a transactional Produce's partitions join (transaction version 2: Produce v12+) or are checked to be in
    # (version 1, KIP-890 part 1) the producer's transaction before anything is appended
    transactional = request.transactional_id is not None
    adds = transactional and header.api_version >= PRODUCE_ADDS_PARTITIONS
    for topic_data in request.topic_data:
        topic_response = ProduceResponse.TopicProduceResponse(name=topic_data.name, topic_id=topic_data.topic_id,
                                                              partition_responses=[])
        responses.append(topic_response)
        for pdata in topic_data.partition_data:
            presp = ProduceResponse.PartitionProduceResponse(index=pdata.index, base_offset=-1,
                                                             log_append_time_ms=-1, log_start_offset=-1)
            topic_response.partition_responses.append(presp)
            name = names[id(topic_data)]
            if refused:
                presp.error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            elif name is not None and name not in writable:  # nothing of it is appended
                presp.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif request.acks not in VALID_ACKS:
                presp.error_code = ErrorCode.INVALID_REQUIRED_ACKS
            elif pdata.records is None or len(pdata.records) == 0:
                presp.error_code = ErrorCode.CORRUPT_MESSAGE
                presp.error_message = "the produce request carried no record batch"
            else:
                wanted.append((topic_data.name, topic_data.topic_id, pdata.index))
                slots.append((presp, pdata.records))
                known.append(name if transactional and name is not None and known_partition(ctx, name, pdata.index)
                             else None)
    answers = []  # (the partitions' responses, an awaitable of their results)
    try:
        async with in_request_order(connection):
            verified = {}  # version 1: id(partition response) -> what to check again right before writing
            if transactional and any(name is not None for name in known):
                # in the connection's turn, so a pipelined request's batches still reach their partitions in order
                batches = [(name, w[2], records) for name, w, (_, records) in zip(known, wanted, slots)
                           if name is not None]
                if adds:
                    checked = await add_produced_partitions(ctx, request.transactional_id, batches)
                elif not verification_enabled(ctx):
                    checked = [(ErrorCode.NONE, None)] * len(batches)
                else:
                    checked = await verify_produced_partitions(ctx, request.transactional_id, header.api_version,
                                                               batches)
                    verified = {id(slot[0]): (name, w[2], slot[1]) for name, w, slot in zip(known, wanted, slots)
                                if name is not None}
                results = iter(checked)
                kept = [(name is None or _set_error(slot[0], next(results)), w, slot)
                        for name, w, slot in zip(known, wanted, slots)]
                wanted, slots = [w for ok, w, _ in kept if ok], [slot for ok, _, slot in kept if ok]
            routed = []
            for (presp, records), (client, error) in zip(slots, await leader_clients(ctx, wanted, by_id)):
                presp.error_code = error
                if client is not None:
                    routed.append((presp, records, client))
            for group in by_listener(routed, lambda item: item[2]):
                if verified:  # version 1: no marker of the producer for the partition since it was verified
                    group = [item for item in group if _still_verified(ctx, request.transactional_id, item[0],
                                                                       verified.get(id(item[0])))]
                    if not group:
                        continue
                # Produce carries no leader epoch: the replica itself knows whether it leads now
                if len(group) == 1:
                    presp, records, client = group[0]
                    answers.append(([presp], _listed(await client.send_produce(
                        records, leader_epoch=NO_EPOCH_GIVEN, acks=request.acks, timeout_ms=request.timeout_ms))))
                else:
                    answers.append(([presp for presp, _, _ in group], await group[0][2].send_produce_many(
                        [(client.key, records) for _, records, client in group], leader_epoch=NO_EPOCH_GIVEN,
                        acks=request.acks, timeout_ms=request.timeout_ms)))
        results = await asyncio.gather(*(answer for _, answer in answers), return_exceptions=True)
    except (ConnectionError, OSError, asyncio.TimeoutError) as e:
        for _, answer in answers:
            answer.close()
        _data_path_failed(connection, e)
    for (presps, _), group_results in zip(answers, results):
        if isinstance(group_results, PartitionNotHosted):  # a single partition's call
            group_results = [group_results]
        elif isinstance(group_results, BaseException):
            _data_path_failed(connection, group_results)
        for presp, r in zip(presps, group_results):
            if isinstance(r, PartitionNotHosted):
                presp.error_code, presp.error_message = ErrorCode.NOT_LEADER_OR_FOLLOWER, NOT_HOSTED_MESSAGE
                continue
            if isinstance(r, BaseException):
                _data_path_failed(connection, r)
            presp.error_code, presp.base_offset = r.error_code, r.base_offset
            presp.log_append_time_ms, presp.log_start_offset, presp.error_message = \
                r.log_append_time_ms, r.log_start_offset, r.error_message
            if r.record_errors:   # Produce v8+ (KIP-467): which records of the batch were refused
                presp.record_errors = [ProduceResponse.BatchIndexAndErrorMessage(
                    batch_index=index, batch_index_error_message=message) for index, message in r.record_errors]
    # producer_byte_rate: the request's record bytes count against its client's quota (the answer says how long to
    # wait, and the connection is muted for that long, as Kafka's)
    throttle_ms = quota_throttle(ctx, connection, header.client_id, PRODUCER_BYTE_RATE,
                                 sum(len(p.records) for t in request.topic_data for p in t.partition_data
                                     if p.records is not None))
    return ProduceResponse(responses=responses, throttle_time_ms=throttle_ms)


def verification_enabled(ctx) -> bool:
    return ctx.config.get("transaction.partition.verification.enable", True) in (True, "true")


def _still_verified(ctx, transactional_id: str, presp, checked) -> bool:
    """Right before its batch is written (no await between): whether the partition is still verified in the
    producer's transaction; else its answer says retry (the transaction ended meanwhile)."""
    if checked is None:
        return True
    name, index, records = checked
    header = parse_header(records, 0, whole=False)
    if ctx.txn_verifications.is_verified(transactional_id, header.producer_id, header.producer_epoch, name, index):
        return True
    presp.error_code = ErrorCode.NOT_ENOUGH_REPLICAS
    presp.error_message = "the transaction ended while its partition was being verified; retry"
    return False


def _set_error(presp, error_and_message) -> bool:
    """True where the partition may be appended to; else its response carries the error."""
    error, message = error_and_message
    if error:
        presp.error_code, presp.error_message = error, message
    return not error


async def _listed(result):
    return [await result]


def _topic_name(ctx, topic_data, by_id: bool) -> str | None:
    """The topic's name for the authorizer; None for an unknown topic id (UNKNOWN_TOPIC_ID follows)."""
    if not by_id:
        return topic_data.name
    topic = ctx.metadata.topic_by_id(topic_data.topic_id)
    return topic.name if topic is not None else None


def _data_path_failed(connection, e: Exception):
    """The leader's data path failed (its actor died or moved, or did not answer): whether the
    records were appended is unknown, and a later request of this connection must not be appended
    before them. Close the connection, as a Kafka broker that fails closes it: the client retries
    everything it had in flight (the idempotent producer without duplicates)."""
    reason = f"a produce's partition leader could not be reached ({type(e).__name__}: {e}); retry"
    if connection is not None:
        connection.abort(reason)
    raise CloseConnection(reason)
