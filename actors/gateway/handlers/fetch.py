"""Fetch: read every asked-for partition in parallel; if the answer is smaller than min_bytes,
wait (without polling) until one of the partitions gets new data or max_wait_ms passes, then read
again. Clients that ask for an incremental fetch session (KIP-227: followers' replica fetchers,
Java consumers) get one (fetch_sessions.py): their fetches name only what changed, and the answers
carry only partitions with something new; others (librdkafka) send full fetches, as KIP-227 allows.

Partitions whose leaders share a listener (one shard) are read with one MANY frame, and waited
for with one WAIT_FOR_ANY frame, not one frame each: with a thousand partitions, an idle consumer's
long poll would otherwise cost two thousand frames.

A fetch with a replica id (ReplicaState from v15, ReplicaId before) is a follower replica's: it
reads up to the log end rather than the high watermark, tells the leader how far the follower
got (which moves the high watermark), and may answer a diverging epoch instead of records.

With an authorizer (as Kafka): a follower's fetch needs CLUSTER_ACTION on the cluster, a
consumer's READ on each topic; a refused partition answers TOPIC_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

import asyncio
import logging
import time


from protocol.errors import ErrorCode
from protocol.messages import FetchRequest, FetchResponse

from actors.controller.quorum_shell import wire as quorum_wire
from actors.gateway.fetch_sessions import FINAL_EPOCH, NO_SESSION, FetchSessions, SessionStep
from actors.gateway.file_region import FileRegion
from actors.gateway.handlers.quotas import throttle as quota_throttle
from actors.gateway.handlers.routing import partition_client, resolve_topic
from actors.gateway.leader_throttle import LeaderThrottle
from actors.quotas import CONSUMER_BYTE_RATE
from actors.gateway.partition_client import (
    by_listener, fetch_args, fetch_result, replica_fetch_args, replica_fetch_result,
)
from actors.security.authorizer import AclOperation, ResourceType
from actors.partition import wire

log = logging.getLogger("kray.gateway")


NO_REPLICA = -1
READ_COMMITTED = 1  # Fetch isolation_level
REFUSED_FOLLOWER_LOG_INTERVAL_S = 60.0
_refused_followers_logged: dict[tuple, float] = {}  # (host, principal) -> when last logged (monotonic)


def _log_refused_follower(replica_id, access) -> None:
    """A refused follower fetch repeats every replica.fetch.wait.max.ms: say so once a minute per peer."""
    key, now = (access.host, str(access.principal)), time.monotonic()
    if now - _refused_followers_logged.get(key, float("-inf")) >= REFUSED_FOLLOWER_LOG_INTERVAL_S:
        _refused_followers_logged[key] = now
        log.warning("a follower fetch (replica %d) from %s as %s refused: it needs CLUSTER_ACTION on the cluster "
                    "(an ACL for the brokers' principal, or super.users)", replica_id, access.host, access.principal)


class _Wanted:
    __slots__ = ("client", "offset", "max_bytes", "leader_epoch", "last_fetched_epoch", "replica_id", "response")

    def __init__(self, client, offset, max_bytes, leader_epoch, last_fetched_epoch, replica_id, response):
        self.client, self.offset, self.max_bytes = client, offset, max_bytes
        self.leader_epoch, self.last_fetched_epoch, self.replica_id = leader_epoch, last_fetched_epoch, replica_id
        self.response = response


async def _read(w: _Wanted, isolation_level: int) -> int:
    """Fill w.response from the partition; return the number of record bytes it got."""
    try:
        if w.replica_id == NO_REPLICA:
            r = await w.client.fetch(w.offset, w.max_bytes, leader_epoch=w.leader_epoch,
                                     isolation_level=isolation_level)
            diverging = None
        else:
            r, diverging = await w.client.replica_fetch(w.replica_id, w.offset, w.max_bytes,
                                                        leader_epoch=w.leader_epoch,
                                                        last_fetched_epoch=w.last_fetched_epoch)
    except Exception as e:
        log.warning("fetch from a partition replica failed: %s", e)
        w.response.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return 0
    return _fill(w, r, diverging)


async def _read_all(wanted: list[_Wanted], isolation_level: int) -> list[int]:
    """Read every partition, one MANY frame per listener; the record bytes each got."""
    sizes: dict[int, int] = {}

    async def read_group(group: list[_Wanted]) -> None:
        if len(group) == 1:
            sizes[id(group[0])] = await _read(group[0], isolation_level)
            return
        calls = [(w.client.key, wire.FETCH, fetch_args(w.offset, w.max_bytes, w.leader_epoch, isolation_level))
                 if w.replica_id == NO_REPLICA else
                 (w.client.key, wire.REPLICA_FETCH, replica_fetch_args(w.replica_id, w.offset, w.max_bytes,
                                                                       w.leader_epoch, w.last_fetched_epoch))
                 for w in group]
        try:
            answers = await group[0].client.many(calls)
        except Exception as e:
            log.warning("fetch from %d partitions of a shard failed: %s", len(group), e)
            answers = [(wire.NOT_HOSTED, [])] * len(group)
        again = []
        for w, (status, out) in zip(group, answers):
            if status != wire.ANSWERED:
                w.response.error_code, sizes[id(w)] = ErrorCode.NOT_LEADER_OR_FOLLOWER, 0
                continue
            if w.replica_id == NO_REPLICA:
                r = fetch_result(out)
                parsed = None if r is None else (r, None)
            else:
                parsed = replica_fetch_result(out)
            if parsed is None:  # its segment was deleted under the read: ask again, alone
                again.append(w)
            else:
                sizes[id(w)] = _fill(w, *parsed)
        for w in again:
            sizes[id(w)] = await _read(w, isolation_level)

    await asyncio.gather(*(read_group(g) for g in by_listener(wanted, lambda w: w.client)))
    return [sizes[id(w)] for w in wanted]


def _fill(w: _Wanted, r, diverging) -> int:
    if diverging is not None:
        w.response.diverging_epoch = FetchResponse.EpochEndOffset(epoch=diverging[0], end_offset=diverging[1])
    p = w.response
    if isinstance(p.records, FileRegion):  # read again after a wait: the first answer is dropped
        p.records.close()
    p.error_code, p.high_watermark = r.error_code, r.high_watermark
    p.last_stable_offset, p.log_start_offset = r.last_stable_offset, r.log_start_offset
    if r.error_code and w.replica_id == NO_REPLICA:  # a consumer's error answer carries no offsets, as Kafka's
        p.high_watermark = p.last_stable_offset = p.log_start_offset = -1
    p.records = r.records
    aborted = getattr(r, "aborted_transactions", None)
    p.aborted_transactions = None if aborted is None else [
        FetchResponse.AbortedTransaction(producer_id=producer_id, first_offset=first_offset)
        for producer_id, first_offset in aborted]
    return len(r.records) if r.records is not None else 0


def _wait_for_group(group: list[_Wanted], timeout_ms: int, isolation_level: int):
    if len(group) == 1:
        w = group[0]
        return w.client.wait_for_data(w.offset, timeout_ms, _wait_mode(w, isolation_level))
    return group[0].client.wait_for_any([(w.client.key, w.offset, _wait_mode(w, isolation_level)) for w in group],
                                        timeout_ms)


def _wait_mode(w: _Wanted, isolation_level: int) -> int:
    """What a long poll waits for: a follower for written records, a read_committed consumer for
    the last stable offset to pass its offset, another consumer for the high watermark."""
    if w.replica_id != NO_REPLICA:
        return wire.WAIT_REPLICA
    return wire.WAIT_READ_COMMITTED if isolation_level == READ_COMMITTED else wire.WAIT_CONSUMER


async def _wait_for_any(wanted: list[_Wanted], timeout_ms: int, isolation_level: int) -> bool:
    """Wait until one of the partitions has records past its offset: True; False when max wait
    passed without (then a second read would find what the first found)."""
    tasks = [asyncio.ensure_future(_wait_for_group(group, timeout_ms, isolation_level))
             for group in by_listener(wanted, lambda w: w.client)]
    deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
    try:
        while tasks:
            remaining = deadline - asyncio.get_running_loop().time()
            done, pending = await asyncio.wait(tasks, timeout=max(remaining, 0), return_when=asyncio.FIRST_COMPLETED)
            if not done:
                return False
            if any(t.exception() is not None or t.result() for t in done):
                return True  # records came (or a wait failed: read again to learn why)
            tasks = list(pending)
        return False
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()


async def handle_fetch(ctx, header, request, connection=None) -> FetchResponse:
    version = header.api_version
    if getattr(ctx, "quorum", None) is not None and quorum_wire.is_metadata_fetch(request, version):
        from actors.gateway.handlers.metadata_quorum import handle_quorum_fetch
        return await handle_quorum_fetch(ctx, header, request, connection)
    by_id = version >= 13
    step = SessionStep()  # a full fetch without a session
    if version >= 7 and (request.session_id, request.session_epoch) != (NO_SESSION, FINAL_EPOCH):
        step = ctx.fetch_sessions.begin(
            request.session_id, request.session_epoch,
            [((ft.topic_id if by_id else ft.topic, fp.partition), (ft.topic, ft.topic_id, fp))
             for ft in request.topics for fp in ft.partitions],
            [(t.topic_id if by_id else t.topic, p) for t in request.forgotten_topics_data for p in t.partitions])
        if step.error_code:
            return FetchResponse(error_code=step.error_code, session_id=NO_SESSION, responses=[])
    topics = _session_topics(step.session) if step.incremental else request.topics
    responses, wanted = [], []
    replica_id = (request.replica_state.replica_id if version >= 15 and request.replica_state is not None
                  else request.replica_id if version < 15 else NO_REPLICA)
    access = ctx.access(connection)
    follower_allowed = replica_id == NO_REPLICA or access.allows_cluster(AclOperation.CLUSTER_ACTION)
    if not follower_allowed:
        _log_refused_follower(replica_id, access)
    throttle = _leader_throttle(ctx) if replica_id != NO_REPLICA else None
    throttled: list[bool] = []  # per wanted partition: under the leader's replication throttle
    resolved = [resolve_topic(ctx, ft.topic, ft.topic_id, by_id) for ft in topics]
    names = [topic.name if topic is not None else None if by_id else ft.topic
             for ft, (topic, _) in zip(topics, resolved)]
    readable = access.allowed(AclOperation.READ, ResourceType.TOPIC, (n for n in names if n is not None))
    for ft, (topic, unknown_error), name in zip(topics, resolved, names):
        refused = name is not None and (not follower_allowed if replica_id != NO_REPLICA else name not in readable)
        tr = FetchResponse.FetchableTopicResponse(topic=ft.topic, topic_id=ft.topic_id, partitions=[])
        responses.append(tr)
        for fp in ft.partitions:
            pr = FetchResponse.PartitionData(partition_index=fp.partition, high_watermark=-1, last_stable_offset=-1,
                                             log_start_offset=-1, records=b"")
            tr.partitions.append(pr)
            if refused:
                pr.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            client, pr.error_code = partition_client(ctx, topic, fp.partition, unknown_error,
                                                     follower=replica_id != NO_REPLICA)
            if client is not None:
                last_fetched_epoch = fp.last_fetched_epoch if version >= 12 else -1
                wanted.append(_Wanted(client, fp.fetch_offset, fp.partition_max_bytes, fp.current_leader_epoch,
                                      last_fetched_epoch, replica_id, pr))
                throttled.append(throttle is not None and throttle.applies(topic, fp.partition, ctx.broker_id,
                                                                           replica_id))
    isolation = request.isolation_level
    sizes, held = _hold_back(throttle, wanted, await _read_all(wanted, isolation), throttled)
    # as Kafka's delayed fetch: an error on any partition (its leader moved...) or a diverging
    # epoch for a follower answers at once
    answer_now = len(wanted) < sum(len(ft.partitions) for ft in topics) or any(
        w.response.error_code or w.response.diverging_epoch.end_offset >= 0 for w in wanted)
    if wanted and sum(sizes) < max(request.min_bytes, 1) and request.max_wait_ms > 0 and not answer_now:
        idle = [w for w, size, h in zip(wanted, sizes, held) if size == 0 and not h]
        if idle:
            if await _wait_for_any(idle, request.max_wait_ms, isolation):
                sizes, held = _hold_back(throttle, wanted, await _read_all(wanted, isolation), throttled)
        elif any(held):  # only throttled records to send: wait for the leader's quota (at most max wait)
            await asyncio.sleep(min(request.max_wait_ms / 1000, throttle.wait_s(time.monotonic())))
            sizes, held = _hold_back(throttle, wanted, await _read_all(wanted, isolation), throttled)
    fetched_bytes = _trim_to_max_bytes(wanted, sizes, request.max_bytes)
    if any(throttled):
        throttle.record(sum(_sent_bytes(w) for w, t in zip(wanted, throttled) if t), time.monotonic())
    # consumer_byte_rate: a fetch that takes its client above the quota is answered empty, with the time to wait
    # (as Kafka's throttled fetch response; its bytes are not counted, as they were not sent)
    throttle_ms = quota_throttle(ctx, connection, header.client_id, CONSUMER_BYTE_RATE, fetched_bytes,
                                 count_throttled=False) if replica_id == NO_REPLICA and fetched_bytes else 0
    if throttle_ms:
        _drop_records(wanted)
        if step.session is not None and step.incremental:
            step.session.advance()
        return FetchResponse(throttle_time_ms=throttle_ms, error_code=0, session_id=step.session.session_id
                             if step.session is not None and step.incremental else NO_SESSION, responses=[])
    if step.session is None:
        return FetchResponse(throttle_time_ms=0, error_code=0, session_id=NO_SESSION, responses=responses)
    held = step.session.partitions
    for ft, tr in zip(topics, responses):
        kept = []
        for pr in tr.partitions:
            partition = held.get((ft.topic_id if by_id else ft.topic, pr.partition_index))
            if partition is None or FetchSessions.changed(partition, pr) or not step.incremental:
                kept.append(pr)
            elif isinstance(pr.records, FileRegion):
                pr.records.close()
        tr.partitions = kept
    if step.incremental:
        step.session.advance()
        responses = [tr for tr in responses if tr.partitions]
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=step.session.session_id, responses=responses)


def _session_topics(session) -> list:
    """The partitions of a session as a fetch's topics (consecutive partitions of a topic together)."""
    topics: dict = {}
    for name, topic_id, fp in (held.fetch for held in session.partitions.values()):
        ft = topics.get((name, topic_id))
        if ft is None:
            ft = topics[(name, topic_id)] = FetchRequest.FetchTopic(topic=name, topic_id=topic_id, partitions=[])
        ft.partitions.append(fp)
    return list(topics.values())


def _trim_to_max_bytes(wanted: list[_Wanted], sizes: list[int], max_bytes: int) -> int:
    """Keep the response within max_bytes, but always keep the first non-empty partition (KIP-74); the bytes kept."""
    total = 0
    for w, size in zip(wanted, sizes):
        if size and total and total + size > max_bytes:
            if isinstance(w.response.records, FileRegion):
                w.response.records.close()
            w.response.records = b""
            continue
        total += size
    return total


def _leader_throttle(ctx) -> LeaderThrottle:
    """The broker's leader side of the replication throttle, set to the rate the metadata says now."""
    throttle = getattr(ctx, "leader_throttle", None)
    if throttle is None:
        throttle = ctx.leader_throttle = LeaderThrottle()
    throttle.configure(ctx.broker_id, ctx.config, getattr(ctx.metadata, "dynamic_broker_configs", None) or {})
    return throttle


def _hold_back(throttle, wanted: list[_Wanted], sizes: list[int], throttled: list[bool]):
    """While the leader's replication quota is exceeded, the throttled partitions are answered without
    records (their offsets still go): (sizes with theirs 0, which were held back)."""
    if throttle is None or not any(throttled) or not throttle.exceeded(time.monotonic()):
        return sizes, [False] * len(sizes)
    held = [t and size > 0 for t, size in zip(throttled, sizes)]
    _drop_records([w for w, h in zip(wanted, held) if h])
    return [0 if h else size for size, h in zip(sizes, held)], held


def _sent_bytes(w: _Wanted) -> int:
    records = w.response.records
    return 0 if records is None else len(records)


def _drop_records(wanted: list[_Wanted]) -> None:
    for w in wanted:
        if isinstance(w.response.records, FileRegion):
            w.response.records.close()
        w.response.records = b""


