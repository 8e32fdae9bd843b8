"""Follower replicas' fetches from their leaders, one fetcher per source broker, as Kafka's replica
fetcher threads: every follower replica of one host (a shard) whose leader is on broker B is
fetched for by the host's one fetcher for B, with one long-polled Kafka follower Fetch for all of
them (replica id and broker epoch, and per partition: current leader epoch, fetch offset, last
fetched epoch), over one kept-open TCP connection to B's listener, the one clients use. The
fetcher keeps an incremental fetch session (KIP-227) with B, as Kafka's fetchers do: after the
first full fetch, a fetch names only the partitions whose fetch state changed (and those it drops),
and B answers only the partitions with something new, so an idle follower costs little per round.

Sans-Ray. `encode_fetch` and `decode_fetch` are pure (bytes in, answers out). What to ask and what
an answer means stays in each replica's ReplicationCore (`next_fetch`, `on_fetch_response`, via the
replica's `on_fetched`), so ISR, high watermark, truncation and diverging epochs are per replica as
before; the fetcher only batches, and delays a partition whose answer was refused (Kafka's
replica.fetch.backoff.ms) without delaying the others. A partition that joins a fetcher while a
long poll is in flight is asked for in the next round (at most replica.fetch.wait.max.ms later),
as Kafka does. Replicas a topic lists in follower.replication.throttled.replicas (a follower's `throttled`)
share their host's ReplicationQuota (follower.replication.throttled.rate): while it is exceeded they are left
out of the fetches, the others fetch on.
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, Protocol

from actors.security.inter_broker import BrokerLoginFailed, broker_transport
from actors.partition.epoch_cache import EpochEndOffset
from actors.partition.replication import FetchAnswer, FetchRequest
from actors.partition.replication_quota import ReplicationQuota
from actors.pipelined import PipelinedConnection
from protocol import primitives
from protocol.errors import ErrorCode, MalformedMessage
from protocol.headers import RequestHeader, encode_request
from protocol.messages import FetchRequest as KafkaFetchRequest, FetchResponse as KafkaFetchResponse
from protocol.record_batch import CorruptRecord

log = logging.getLogger("kray.fetcher")

FETCH_VERSION = 16              # ReplicaState (v15+), topic ids (v13+), diverging epochs (v12+)
FETCH_API_KEY = 1
CONNECT_TIMEOUT_S = 5.0
CLIENT_ID = "kray-replica-fetcher"
BACKOFF_S = 0.05                # after a failed or refused fetch, doubling
BACKOFF_S_MAX = 1.0             # replica.fetch.backoff.ms is 1 s in Kafka
LOGIN_FAILURE_LOG_S = 60.0      # a refused login of the broker is logged at most this often per fetcher
RESPONSE_OVERHEAD_BYTES = 65536
RESPONSE_OVERHEAD_BYTES_PER_PARTITION = 128
FETCHER_DEFAULTS = {"replica.fetch.wait.max.ms": 500, "replica.fetch.max.bytes": 1048576,
                    "replica.fetch.response.max.bytes": 10485760}

Key = tuple[uuid.UUID, int]     # (topic id, partition)


class Follower(Protocol):
    """What a fetcher needs of a follower replica (actors/partition/actor.py's PartitionReplica)."""
    key: Key
    broker_epoch: int
    throttled: bool  # listed in its topic's follower.replication.throttled.replicas

    def next_fetch(self) -> FetchRequest | None: ...

    def on_fetched(self, request: FetchRequest, answer: FetchAnswer, records: memoryview) -> bool: ...


def encode_fetch(correlation_id: int, wanted: list[tuple[Key, FetchRequest]], *, replica_id: int,
                 broker_epoch: int, max_wait_ms: int, max_bytes: int, partition_max_bytes: int,
                 session_id: int = 0, session_epoch: int = -1, forgotten: list[Key] = ()) -> bytes:
    """One follower Fetch for every (partition, request) in `wanted` (within a fetch session:
    session id and epoch, and the partitions it forgets)."""
    topics: dict[uuid.UUID, list] = {}
    for (topic_id, partition), request in wanted:
        topics.setdefault(topic_id, []).append(KafkaFetchRequest.FetchPartition(
            partition=partition, current_leader_epoch=request.current_leader_epoch,
            fetch_offset=request.fetch_offset, last_fetched_epoch=request.last_fetched_epoch,
            log_start_offset=-1, partition_max_bytes=partition_max_bytes))
    body = KafkaFetchRequest(
        replica_state=KafkaFetchRequest.ReplicaState(replica_id=replica_id, replica_epoch=broker_epoch),
        max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes, isolation_level=0, session_id=session_id,
        session_epoch=session_epoch, rack_id="",
        forgotten_topics_data=[KafkaFetchRequest.ForgottenTopic(topic_id=t, partitions=ps)
                               for t, ps in _by_topic(forgotten).items()],
        topics=[KafkaFetchRequest.FetchTopic(topic_id=t, partitions=ps) for t, ps in topics.items()],
    ).encode(FETCH_VERSION)
    return encode_request(RequestHeader(FETCH_API_KEY, FETCH_VERSION, correlation_id, CLIENT_ID), body)


def _by_topic(keys) -> dict[uuid.UUID, list[int]]:
    topics: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in keys:
        topics.setdefault(topic_id, []).append(partition)
    return topics


def decode_fetch(body_after_correlation_id: memoryview) -> tuple[int, int, dict[Key, tuple[FetchAnswer, memoryview]]]:
    """(request-level error, session id, the leader's answer per partition and its records)."""
    _, pos = primitives.read_tagged_fields(body_after_correlation_id, 0)  # response header v1
    response = KafkaFetchResponse.decode(body_after_correlation_id[pos:], FETCH_VERSION)
    if response.error_code:
        return response.error_code, response.session_id, {}
    answers = {}
    for topic in response.responses:
        for p in topic.partitions:
            diverging = p.diverging_epoch
            diverging = (EpochEndOffset(diverging.epoch, diverging.end_offset)
                         if diverging is not None and diverging.end_offset >= 0 else None)
            # log end offset: Kafka's follower fetch answers carry none; ours is unknown (-1) then
            answers[(topic.topic_id, p.partition_index)] = (
                FetchAnswer(p.error_code, p.high_watermark, p.log_start_offset, -1, diverging),
                memoryview(p.records or b""))
    return 0, response.session_id, answers


class ReplicaFetcher:
    """Fetches for every follower replica of one host whose leader is on one broker."""

    def __init__(self, endpoint: tuple[str, int], replica_id: int, config: dict[str, int], ssl_context=None,
                 login=None, quota: ReplicationQuota | None = None):
        self.endpoint, self.replica_id = endpoint, replica_id
        self.quota = quota if quota is not None else ReplicationQuota()  # the host's, shared by its fetchers
        self.ssl_context = ssl_context  # TLS to the leader's listener (SSL, SASL_SSL), or None
        self.login = login  # async (connection) -> None: logs a new connection in as the broker (SASL)
        self.login_failure_logged_at = float("-inf")  # the loop's time of the last warning about it
        self.max_wait_ms = config["replica.fetch.wait.max.ms"]
        self.max_bytes = config["replica.fetch.response.max.bytes"]
        self.partition_max_bytes = config["replica.fetch.max.bytes"]
        self.followers: dict[Key, Follower] = {}
        self.delayed: dict[Key, tuple[float, float]] = {}  # key -> (until, loop time; backoff s)
        self.changed = asyncio.Event()
        self.connection: PipelinedConnection | None = None
        self.task: asyncio.Task | None = None
        # the fetch session with the leader's broker: its id (0: none yet), the epoch of the next
        # fetch (0: a full fetch that opens one), and the fetch state it holds per partition
        self.session_id, self.session_epoch = 0, 0
        self.in_session: dict[Key, FetchRequest] = {}

    def add(self, follower: Follower) -> None:
        self.followers[follower.key] = follower
        self.delayed.pop(follower.key, None)
        self.changed.set()
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def remove(self, key: Key) -> None:
        self.followers.pop(key, None)
        self.delayed.pop(key, None)

    def close(self) -> None:
        self.followers.clear()
        if self.task is not None:
            self.task.cancel()
            self.task = None
        self._close_connection()

    def _close_connection(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def _due(self, now: float) -> list[tuple[Follower, FetchRequest]]:
        due = []
        throttled = self.quota.exceeded(now)
        for key, follower in self.followers.items():
            delay = self.delayed.get(key)
            if delay is not None and delay[0] > now:
                continue
            if throttled and getattr(follower, "throttled", False):
                continue
            request = follower.next_fetch()
            if request is not None:
                due.append((follower, request))
        return due

    def _delay(self, key: Key, now: float) -> None:
        _, backoff_s = self.delayed.get(key, (0.0, BACKOFF_S / 2))
        backoff_s = min(backoff_s * 2, BACKOFF_S_MAX)
        self.delayed[key] = (now + backoff_s, backoff_s)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff_s = BACKOFF_S
        try:
            while self.followers:
                self.changed.clear()
                now = loop.time()
                due = self._due(now)
                if not due:  # every follower waits out a delay or the throttle, or has no fetch to send
                    wake = min((until for until, _ in self.delayed.values() if until > now), default=None)
                    if self.quota.exceeded(now) and any(getattr(f, "throttled", False)
                                                        for f in self.followers.values()):
                        wake = min(wake or float("inf"), self.quota.ready_at(now))
                    try:
                        await asyncio.wait_for(self.changed.wait(), None if wake is None else wake - now)
                    except asyncio.TimeoutError:
                        pass
                    continue
                try:
                    error, answers = await self._fetch(due)
                except (OSError, ConnectionError, asyncio.TimeoutError, MalformedMessage) as e:
                    self._close_connection()
                    self.session_epoch = 0  # start over with a full fetch (closing the old session)
                    if isinstance(e, BrokerLoginFailed) and now - self.login_failure_logged_at >= LOGIN_FAILURE_LOG_S:
                        self.login_failure_logged_at = now  # repeats every backoff: say it once a minute
                        log.warning("followers of broker %s cannot log in to its inter-broker listener %s: %s",
                                    self.replica_id, self.endpoint, e)
                    log.debug("fetch of %d partitions from %s failed: %s", len(due), self.endpoint, e)
                    await asyncio.sleep(backoff_s)
                    backoff_s = min(backoff_s * 2, BACKOFF_S_MAX)
                    continue
                backoff_s = BACKOFF_S
                now = loop.time()
                if error in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
                    self.session_id = self.session_epoch = 0  # the leader lost it: a full fetch opens another
                    continue
                for follower, _ in due:
                    request = self.in_session.get(follower.key)
                    if self.followers.get(follower.key) is not follower or request is None:
                        continue  # left this fetcher while the fetch was out
                    if error:
                        answer, records = FetchAnswer(error), memoryview(b"")
                    elif follower.key in answers:
                        answer, records = answers[follower.key]
                    else:
                        continue  # nothing new for it (an incremental answer leaves it out)
                    if len(records) and getattr(follower, "throttled", False):
                        self.quota.record(len(records), now)
                    try:
                        accepted = follower.on_fetched(request, answer, records)
                    except CorruptRecord as e:
                        log.warning("%s: a batch fetched from %s failed its CRC check: %s", follower.key,
                                    self.endpoint, e)
                        accepted = False
                    if accepted:
                        self.delayed.pop(follower.key, None)
                    else:  # refused (not leader yet, another epoch): the controller's metadata will tell
                        self._delay(follower.key, now)
        finally:
            self._close_connection()

    async def _fetch(self, due: list[tuple[Follower, FetchRequest]]) -> dict:
        if self.connection is None or not self.connection.usable:
            connection = await PipelinedConnection.open_tcp(
                *self.endpoint, timeout_s=CONNECT_TIMEOUT_S,
                response_bytes_max=self.max_bytes + self.partition_max_bytes + RESPONSE_OVERHEAD_BYTES
                + RESPONSE_OVERHEAD_BYTES_PER_PARTITION * len(self.followers), ssl_context=self.ssl_context)
            if self.login is not None:
                try:
                    await self.login(connection)
                except BaseException:
                    connection.close()
                    raise
            self.connection = connection
        due_state = {f.key: request for f, request in due}
        if self.session_epoch == 0:  # a full fetch (with the old session's id, which it closes)
            wanted, forgotten = list(due_state.items()), []
        else:  # what changed since the session's last fetch, and what left it
            wanted = [(key, r) for key, r in due_state.items() if self.in_session.get(key) != r]
            forgotten = [key for key in self.in_session if key not in due_state]
        broker_epoch = max(f.broker_epoch for f, _ in due)
        session_id, session_epoch = self.session_id, self.session_epoch
        body = await self.connection.call(
            lambda cid: [encode_fetch(cid, wanted, replica_id=self.replica_id, broker_epoch=broker_epoch,
                                      max_wait_ms=self.max_wait_ms, max_bytes=self.max_bytes,
                                      partition_max_bytes=self.partition_max_bytes, session_id=session_id,
                                      session_epoch=session_epoch, forgotten=forgotten)],
            self.max_wait_ms / 1000 + 30)
        error, answered_session_id, answers = decode_fetch(body)
        if not error:
            if session_epoch == 0:
                self.in_session = due_state
                self.session_id = answered_session_id
                self.session_epoch = 1 if answered_session_id else 0  # 0: the leader keeps no sessions
            else:
                for key in forgotten:
                    del self.in_session[key]
                self.in_session.update(wanted)
                self.session_epoch = 1 if self.session_epoch >= 2**31 - 1 else self.session_epoch + 1
        elif session_epoch == 0:
            self.in_session = due_state  # what the refusal answers
        return error, answers


class ReplicaFetchers:
    """A host's fetchers, one per source broker (its listener's endpoint). A follower replica is in
    at most one: `follow` moves it when its leader moves."""

    def __init__(self, replica_id: int, broker_config: dict[str, Any]):
        self.replica_id = replica_id
        self.config = {k: int(broker_config.get(k, v)) for k, v in FETCHER_DEFAULTS.items()}
        self.ssl_context, self.login = broker_transport(broker_config)
        self.fetchers: dict[tuple[str, int], ReplicaFetcher] = {}
        self.source: dict[Key, tuple[str, int]] = {}
        # follower.replication.throttled.rate for this host's share of its broker (the controller sets it)
        self.quota = ReplicationQuota()

    def set_throttle(self, rate_bytes_per_s: float | None) -> None:
        """This host's follower replication throttle (None: none); fetchers waiting on it look again."""
        self.quota.set_rate(rate_bytes_per_s)
        for fetcher in self.fetchers.values():
            fetcher.changed.set()

    def follow(self, follower: Follower, endpoint: tuple[str, int]) -> None:
        """`follower` fetches from `endpoint` (again at once, if it was waiting out a refusal)."""
        endpoint = tuple(endpoint)
        if self.source.get(follower.key) != endpoint:
            self.unfollow(follower.key)
        fetcher = self.fetchers.get(endpoint)
        if fetcher is None:
            fetcher = self.fetchers[endpoint] = ReplicaFetcher(endpoint, self.replica_id, self.config,
                                                                            self.ssl_context, self.login, self.quota)
        fetcher.add(follower)
        self.source[follower.key] = endpoint

    def unfollow(self, key: Key) -> None:
        endpoint = self.source.pop(key, None)
        fetcher = self.fetchers.get(endpoint) if endpoint is not None else None
        if fetcher is not None:
            fetcher.remove(key)
            if not fetcher.followers:
                fetcher.close()
                del self.fetchers[endpoint]

    def close(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.close()
        self.fetchers.clear()
        self.source.clear()
