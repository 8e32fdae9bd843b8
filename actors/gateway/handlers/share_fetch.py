"""ShareFetch and ShareAcknowledge (KIP-932): share sessions, piggybacked acknowledgements,
long-poll on max_wait_ms, and one call per share-partition per request. Version 2 adds the
record_limit acquire mode (KIP-1206: MaxRecords is a hard limit) and RENEW acknowledgements in
requests flagged IsRenewAck, which extend locks and fetch nothing (KIP-1222).

The share-partition leader lives with the partition leader (see actors/partition/actor.py); the
gateway reaches the leaders of its node over their data-path sockets. A session belongs to its
connection and to this broker (as in Kafka): closing either releases what the member holds here.

With an authorizer (KIP-932): both need READ on the group (GROUP_AUTHORIZATION_FAILED, nothing
changes, the session's epoch included) and READ on each topic: a partition of a topic the principal
may not read answers TOPIC_AUTHORIZATION_FAILED and is neither fetched nor acknowledged. The check
is made on every request, so an ACL removed stops a live session at its next request.
"""
from __future__ import annotations

import asyncio
import logging
import time

from protocol.errors import ErrorCode
from protocol.messages import ShareAcknowledgeResponse, ShareFetchResponse

from actors.gateway.connection import in_request_order
from actors.gateway.quota_throttles import room_bytes, throttle as quota_throttle
from actors.quotas import CONSUMER_BYTE_RATE
from actors.gateway.handlers.routing import leader_clients, partition_client
from actors.security.authorizer import AclOperation, ResourceType
from actors.gateway.share_sessions import FINAL_EPOCH, ShareSession
from actors.config_schema import ShareGroupLimits

log = logging.getLogger("kray.gateway")


def _limits(ctx, group_id) -> ShareGroupLimits:
    """The group's share-partition limits in force by this gateway's metadata (KIP-1240): sent to
    the share-partition leaders with every fetch and acknowledgement, so that a changed group config
    applies from the next request, as in Kafka."""
    overrides = getattr(ctx.metadata, "group_configs", {}).get(group_id or "", {})
    return ShareGroupLimits.of_group(overrides, ctx.config)


def _acks(batches) -> list[tuple[int, int, list[int]]]:
    return [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in batches]


RENEW = 4
BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1  # ShareFetch v2 ShareAcquireMode (KIP-1206)


def _renew_error(header, request, acks) -> str | None:
    """KIP-1222: RENEW acknowledgements come only in v2 requests flagged IsRenewAck; a ShareFetch so
    flagged fetches nothing, so its fetch limits must be zero (a ShareAcknowledge has none). What is
    wrong, or None."""
    renewing = any(RENEW in types for batches in acks.values() for _, _, types in batches)
    flagged = header.api_version >= 2 and request.is_renew_ack
    if renewing and not flagged:
        return "RENEW acknowledgements need version 2 with IsRenewAck set"
    if flagged and any(getattr(request, f, 0) for f in ("max_wait_ms", "min_bytes", "max_bytes", "max_records")):
        return "a ShareFetch with IsRenewAck fetches nothing: MaxWaitMs, MinBytes, MaxBytes and MaxRecords must be 0"
    return None


def _leader(ctx, topic_id, index):
    topic = ctx.metadata.topic_by_id(topic_id)
    if topic is None or index >= len(topic.partitions):
        return -1, -1
    return ctx.metadata.leader_id(topic, index), topic.partitions[index].leader_epoch


async def _release(ctx, session: ShareSession) -> None:
    """The member's session is gone: what it held goes back to Available (or Archived)."""
    calls = [c.share_release(session.group_id, session.member_id)
             for c in (ctx.partition(*tp) for tp in session.partitions) if c is not None]
    await asyncio.gather(*calls, return_exceptions=True)


def _open_session(ctx, header, request, connection, *, may_open: bool):
    sessions = ctx.share_sessions
    error, session, replaced = sessions.begin(request.group_id, request.member_id, request.share_session_epoch,
                                              connection.connection_id if connection else 0, may_open=may_open)
    if replaced is not None:
        asyncio.ensure_future(_release(ctx, replaced))
    if session is not None and request.share_session_epoch == 0 and connection is not None:
        key = (request.group_id, request.member_id)

        async def on_close():
            current = sessions.sessions.get(key)
            if current is session:
                sessions.close(*key)
                await _release(ctx, session)
        connection.on_close.append(on_close)
    return error, session


def _topic_reader(ctx, access):
    """A predicate: may the principal READ the topic of this (topic id, partition)? Unknown topic ids
    pass (they answer UNKNOWN_TOPIC_ID on their way); each topic is checked once."""
    cache: dict = {}

    def may_read(tp) -> bool:
        if tp[0] not in cache:
            topic = ctx.metadata.topic_by_id(tp[0])
            cache[tp[0]] = topic is None or access.allows(AclOperation.READ, ResourceType.TOPIC, topic.name)
        return cache[tp[0]]
    return may_read


async def _call(coro, what):
    try:
        return await coro
    except Exception as e:  # the actor died or moved: the client refreshes metadata and retries
        log.warning("%s on a partition replica failed: %s", what, e)
        return None


async def _sent(sending):
    """Send, then wait for the answer."""
    return await (await sending)


async def _value(value):
    return value


async def _send_in_order(ctx, keys: list, send) -> list:
    """Route each (topic id, partition) to its leader here and send its part now, while the
    caller holds its connection's turn; return per key an awaitable of the answer: the result,
    the error code to answer, or None when the data path failed."""
    routed = await leader_clients(ctx, [(None, topic_id, index) for topic_id, index in keys], by_id=True)
    out = []
    for tp, (client, error) in zip(keys, routed):
        if client is None:
            out.append(_value(error))
            continue
        try:
            out.append(await send(tp, client))
        except Exception as e:
            log.warning("sending to a partition replica failed: %s", e)
            out.append(_value(None))
    return out


async def handle_share_fetch(ctx, header, request, connection=None) -> ShareFetchResponse:
    limits = _limits(ctx, request.group_id)
    lock_ms = limits.record_lock_duration_ms
    if not request.group_id or not request.member_id:
        return ShareFetchResponse(error_code=ErrorCode.INVALID_REQUEST, error_message="group id and member id are required")
    final = request.share_session_epoch == FINAL_EPOCH
    asked = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
    acks = {(t.topic_id, p.partition_index): _acks(p.acknowledgement_batches)
            for t in request.topics for p in t.partitions if p.acknowledgement_batches}
    # an invalid request changes nothing, the share session's epoch included
    invalid = _renew_error(header, request, acks)
    if final and any(tp not in acks for tp in asked):
        invalid = "a ShareFetch that closes the session may only acknowledge"
    if header.api_version >= 2 and request.share_acquire_mode not in (BATCH_OPTIMIZED, RECORD_LIMIT):
        invalid = f"unknown ShareAcquireMode {request.share_acquire_mode} (0: batch_optimized, 1: record_limit)"
    if invalid:
        return ShareFetchResponse(error_code=ErrorCode.INVALID_REQUEST,
                                  error_message=invalid)
    access = ctx.access(connection)
    if not access.allows(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ShareFetchResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    may_read = _topic_reader(ctx, access)
    # consumer_byte_rate counts share fetches as fetches, as Kafka's: a share fetch acquires at most what the quota
    # has room for, and none once the client is over it (its acknowledgements are still applied); the bytes sent
    # count, and the answer says how long to wait (the connection muted meanwhile). Kafka instead acquires, then
    # answers a fetch that takes the client over empty: its records stay locked until their acquisition lock ends.
    quota_room = room_bytes(ctx, connection, header.client_id, CONSUMER_BYTE_RATE)
    fetching = not final and not (header.api_version >= 2 and request.is_renew_ack) and \
        (quota_room is None or quota_room > 0)
    max_bytes = request.max_bytes if quota_room is None else max(1, min(request.max_bytes, quota_room))
    record_limit = header.api_version >= 2 and request.share_acquire_mode == RECORD_LIMIT
    results: dict = {}

    def send_one(tp, client, with_acks):
        return client.send_share_fetch(request.group_id, request.member_id,
                                       acks=acks.get(tp) if with_acks else None, max_records=request.max_records,
                                       batch_size=request.batch_size, max_bytes=max_bytes, fetch=fetching,
                                       record_limit=record_limit, limits=limits.as_list())

    async def fetch_one(tp, with_acks):
        client, error = partition_client(ctx, ctx.metadata.topic_by_id(tp[0]), tp[1], ErrorCode.UNKNOWN_TOPIC_ID)
        if client is None:
            results[tp] = error
            return
        r = await _call(_sent(send_one(tp, client, with_acks)), "share fetch")
        results[tp] = r if r is not None else ErrorCode.NOT_LEADER_OR_FOLLOWER

    # the session's epoch and the acknowledgements are applied in this connection's request order
    async with in_request_order(connection):
        error, session = _open_session(ctx, header, request, connection, may_open=True)
        if error:
            return ShareFetchResponse(error_code=error)
        if not final:
            session.add(asked)
            session.forget([(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions])
        partitions = session.rotated() if fetching else list(acks)
        partitions += [tp for tp in acks if tp not in partitions]
        for tp in [tp for tp in partitions if not may_read(tp)]:
            results[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        partitions = [tp for tp in partitions if may_read(tp)]
        sent = await _send_in_order(ctx, partitions, lambda tp, client: send_one(tp, client, True))
    for tp, r in zip(partitions, await asyncio.gather(*(_call(s, "share fetch") for s in sent))):
        results[tp] = r if r is not None else ErrorCode.NOT_LEADER_OR_FOLLOWER
    if fetching and request.max_wait_ms > 0 and not _got_records(results):
        acked = {tp: results[tp] for tp in acks if tp in results}
        await _long_poll(ctx, request, results, fetch_one)
        for tp, r in acked.items():  # keep the acknowledgement outcome of the first pass
            if not isinstance(results.get(tp), int) and not isinstance(r, int):
                results[tp].ack_error_code, results[tp].ack_error_message = r.ack_error_code, r.ack_error_message
    if final:
        ctx.share_sessions.close(request.group_id, request.member_id)
        await _release(ctx, session)
    response = _fetch_response(ctx, results, acks, lock_ms)
    if quota_room is not None:
        sent_bytes = sum(len(r.records) for r in results.values() if not isinstance(r, int) and r.acquired)
        response.throttle_time_ms = quota_throttle(ctx, connection, header.client_id, CONSUMER_BYTE_RATE, sent_bytes)
    return response


def _got_records(results) -> bool:
    return any(not isinstance(r, int) and r.acquired for r in results.values())


async def _long_poll(ctx, request, results, fetch_one) -> None:
    """Nothing acquired yet: wait (in the partition leaders) until one of the session's
    partitions may have records, then acquire from those; until max_wait_ms has passed. The waits
    acquire nothing, so a wait given up on leaves no record locked for an answer already sent."""
    deadline = time.monotonic() + request.max_wait_ms / 1000
    waiting = {tp: c for tp, r in results.items() if not isinstance(r, int)
               for c in [ctx.partition(*tp)] if c is not None}
    while waiting and not _got_records(results):
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            return
        waits = {asyncio.ensure_future(c.share_wait(request.group_id, remaining_ms)): tp for tp, c in waiting.items()}
        done, pending = await asyncio.wait(waits, timeout=remaining_ms / 1000 + 1, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()  # the leader's wait ends by itself at its timeout; it holds nothing
        woken = [waits[t] for t in done if not t.cancelled() and t.exception() is None and t.result()]
        failed = [waits[t] for t in done if not t.cancelled() and t.exception() is not None]
        for tp in failed:
            waiting.pop(tp)
        if not woken and not failed:
            return
        await asyncio.gather(*(fetch_one(tp, False) for tp in woken))


def _fetch_response(ctx, results, acks, lock_ms) -> ShareFetchResponse:
    by_topic: dict = {}
    for (topic_id, index), r in results.items():
        if isinstance(r, int):
            pd = ShareFetchResponse.PartitionData(partition_index=index, error_code=r, records=b"")
        else:
            if not (r.acquired or r.error_code or (topic_id, index) in acks):
                continue
            pd = ShareFetchResponse.PartitionData(
                partition_index=index, error_code=r.error_code, error_message=r.error_message,
                acknowledge_error_code=r.ack_error_code, acknowledge_error_message=r.ack_error_message,
                records=r.records if r.acquired else b"",  # Records is nullable only in v0
                acquired_records=[ShareFetchResponse.AcquiredRecords(first_offset=a[0], last_offset=a[1],
                                                                     delivery_count=a[2]) for a in r.acquired])
        leader_id, leader_epoch = _leader(ctx, topic_id, index)
        pd.current_leader = ShareFetchResponse.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch)
        by_topic.setdefault(topic_id, []).append(pd)
    return ShareFetchResponse(error_code=0, acquisition_lock_timeout_ms=lock_ms, responses=[
        ShareFetchResponse.ShareFetchableTopicResponse(topic_id=t, partitions=ps) for t, ps in by_topic.items()])


async def handle_share_acknowledge(ctx, header, request, connection=None) -> ShareAcknowledgeResponse:
    limits = _limits(ctx, request.group_id)
    lock_ms = limits.record_lock_duration_ms
    if not request.group_id or not request.member_id:
        return ShareAcknowledgeResponse(error_code=ErrorCode.INVALID_REQUEST,
                                        error_message="group id and member id are required")
    invalid = _renew_error(header, request, {(t.topic_id, p.partition_index): _acks(p.acknowledgement_batches)
                                             for t in request.topics for p in t.partitions})
    if invalid:
        return ShareAcknowledgeResponse(error_code=ErrorCode.INVALID_REQUEST,
                                        error_message=invalid)
    access = ctx.access(connection)
    if not access.allows(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ShareAcknowledgeResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    may_read = _topic_reader(ctx, access)
    asked = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
    keys = [tp for tp in asked if may_read(tp)]
    batches = {(t.topic_id, p.partition_index): _acks(p.acknowledgement_batches)
               for t in request.topics for p in t.partitions}
    # the session's epoch and the acknowledgements are applied in this connection's request order
    async with in_request_order(connection):
        error, session = _open_session(ctx, header, request, connection, may_open=False)
        if error:
            return ShareAcknowledgeResponse(error_code=error)
        sent = await _send_in_order(ctx, keys, lambda tp, client: client.send_share_acknowledge(
            request.group_id, request.member_id, batches[tp], limits.as_list()))
    by_topic: dict = {}
    for (topic_id, index), r in zip(keys, await asyncio.gather(*(_call(s, "share acknowledge") for s in sent))):
        code, message = (r, None) if isinstance(r, int) else r if r is not None else \
            (ErrorCode.NOT_LEADER_OR_FOLLOWER, None)
        leader_id, leader_epoch = _leader(ctx, topic_id, index)
        by_topic.setdefault(topic_id, []).append(ShareAcknowledgeResponse.PartitionData(
            partition_index=index, error_code=code, error_message=message,
            current_leader=ShareAcknowledgeResponse.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch)))
    for topic_id, index in (tp for tp in asked if not may_read(tp)):
        by_topic.setdefault(topic_id, []).append(ShareAcknowledgeResponse.PartitionData(
            partition_index=index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    if request.share_session_epoch == FINAL_EPOCH:
        ctx.share_sessions.close(request.group_id, request.member_id)
        await _release(ctx, session)
    return ShareAcknowledgeResponse(error_code=0, acquisition_lock_timeout_ms=lock_ms, responses=[
        ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse(topic_id=t, partitions=ps) for t, ps in by_topic.items()])
