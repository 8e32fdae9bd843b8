"""A share-group member (KIP-932) that speaks the Kafka protocol itself, for the Spark bridge.

Why not confluent-kafka's ShareConsumer: in explicit acknowledgement mode librdkafka refuses to poll
again until every record of its last poll is acknowledged (measured: `IllegalStateException: 500
records from previous poll have not been acknowledged`), so one consumer can never hold more than
one poll's records while Spark works on them. A pipeline batch of 100,000 records must stay
acquired, unacknowledged, until the Spark job commits; this member holds as many records as the
broker lets it (`group.share.partition.max.record.locks` per partition) and renews their locks
(ShareAcknowledge v2 RENEW, KIP-1222) while they are held.

One I/O thread owns every socket: it heartbeats the group coordinator (ShareGroupHeartbeat),
sends ShareFetch to every partition leader at once (pipelined, so an idle leader's long poll does
not delay the others), and carries acknowledgements and renewals queued by other threads
(ShareAcknowledge when there is nothing to fetch). Only Kafka APIs are used, so it reads share
groups from Apache Kafka 4.1+ brokers too (RENEW needs ShareAcknowledge v2, Kafka 4.2).
"""
from __future__ import annotations

import base64
import itertools
import logging
import queue
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from cluster.admin import AdminError, parse_bootstrap
from protocol.apis import API_BY_KEY
from protocol.error_codes import ErrorCode
from protocol.framing import FrameDecoder
from protocol.headers import RequestHeader, decode_response_header, encode_request
from protocol.messages import (ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest,
                               ShareAcknowledgeRequest, ShareFetchRequest, ShareGroupHeartbeatRequest)
from protocol.record_batch import decode_records, iter_batches

log = logging.getLogger("kray.spark")

# acknowledge types (KIP-932 / KIP-1222)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
ACK_TYPE_NAMES = {GAP: "GAP", ACCEPT: "ACCEPT", RELEASE: "RELEASE", REJECT: "REJECT", RENEW: "RENEW"}

RESPONSE_BYTES_MAX = 256 * 1024 * 1024
RECV_CHUNK_BYTES = 1024 * 1024
SOCKET_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.2
SESSION_ERRORS = {ErrorCode.SHARE_SESSION_NOT_FOUND, ErrorCode.INVALID_SHARE_SESSION_EPOCH}
METADATA_ERRORS = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                   ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.FENCED_LEADER_EPOCH}
COORDINATOR_ERRORS = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                      ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


class ShareClientError(RuntimeError):
    """The share group member cannot go on; the message says what to do."""


def new_member_id() -> str:
    """Kafka's member ids: a random UUID, base64url without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class Connection:
    """One blocking connection with ApiVersions negotiation; requests may be pipelined:
    `send` several, then `receive` their responses in order."""

    def __init__(self, address: str, client_id: str):
        self.address = address
        self.client_id = client_id
        host, port = parse_bootstrap(address)
        try:
            self.sock = socket.create_connection((host, port), timeout=SOCKET_TIMEOUT_S)
        except OSError as e:
            raise AdminError(f"cannot connect to {address}: {e}; is the broker running?") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder(RESPONSE_BYTES_MAX)
        self.frames: list = []
        self.correlation_ids = itertools.count(1)
        self.in_flight: list[tuple[int, int, int]] = []
        self.send(ApiVersionsRequest(), 0)
        r = self.receive()
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}

    def version_for(self, api_key: int, highest: int | None = None) -> int:
        spec = API_BY_KEY[api_key]
        if api_key not in self.versions:
            raise ShareClientError(f"broker {self.address} does not support {spec.name}: share groups need "
                                   f"Kafka 4.1+ or Kray")
        lo, hi = self.versions[api_key]
        version = min(hi, spec.max_version if highest is None else highest)
        if version < max(lo, spec.min_version):
            raise ShareClientError(f"no common version of {spec.name} with broker {self.address}")
        return version

    def send(self, request: Any, version: int | None = None) -> None:
        version = self.version_for(request.API_KEY) if version is None else version
        correlation_id = next(self.correlation_ids)
        header = RequestHeader(request.API_KEY, version, correlation_id, self.client_id)
        self.sock.sendall(encode_request(header, request.encode(version)))
        self.in_flight.append((correlation_id, request.API_KEY, version))

    def receive(self, timeout_s: float = SOCKET_TIMEOUT_S) -> Any:
        correlation_id, api_key, version = self.in_flight.pop(0)
        self.sock.settimeout(timeout_s)
        while not self.frames:
            chunk = self.sock.recv(RECV_CHUNK_BYTES)
            if not chunk:
                raise ConnectionError(f"broker {self.address} closed the connection")
            self.frames.extend(self.decoder.feed(chunk))
        body = memoryview(self.frames.pop(0))
        got, offset = decode_response_header(body, api_key, version)
        if got != correlation_id:
            raise ConnectionError(f"response {got} from {self.address} does not match request {correlation_id}")
        return API_BY_KEY[api_key].response.decode(body[offset:], version)

    def call(self, request: Any, version: int | None = None, timeout_s: float = SOCKET_TIMEOUT_S) -> Any:
        self.send(request, version)
        return self.receive(timeout_s)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


@dataclass
class FetchedRecords:
    """Records of one partition from one ShareFetch, only those this member acquired, in offset
    order; columns, not objects, so they go to Arrow cheaply."""
    topic: str
    partition: int
    offsets: list[int] = field(default_factory=list)
    timestamps_ms: list[int] = field(default_factory=list)
    keys: list = field(default_factory=list)
    values: list = field(default_factory=list)
    headers: list = field(default_factory=list)
    delivery_counts: list[int] = field(default_factory=list)


@dataclass
class _Ack:
    """Acknowledgements for one partition, queued for the I/O thread; `done` is set with the
    partition's error code (0 = applied)."""
    topic: str
    partition: int
    ranges: list[tuple[int, int, int]]   # (first_offset, last_offset, ack type)
    done: threading.Event = field(default_factory=threading.Event)
    error_code: int = -1
    error_message: str | None = None


def offset_ranges(offsets, ack_type: int) -> list[tuple[int, int, int]]:
    """Sorted offsets -> contiguous (first, last, type) ranges."""
    out: list[tuple[int, int, int]] = []
    for o in sorted(offsets):
        if out and out[-1][1] == o - 1:
            out[-1] = (out[-1][0], o, ack_type)
        else:
            out.append((o, o, ack_type))
    return out


def _is_renew(ack: _Ack) -> bool:
    return all(t == RENEW for _, _, t in ack.ranges)


class ShareGroupMember:
    """A member of share group `group` subscribed to `topics`. `on_records(list[FetchedRecords])`
    is called on the I/O thread with every fetch's acquired records; `want_records()` says how many
    more the owner can hold (0: fetch nothing, only acknowledge and renew)."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], *,
                 on_records: Callable[[list[FetchedRecords]], None], want_records: Callable[[], int],
                 fetch_max_wait_ms: int = 200, fetch_max_bytes: int = 64 * 1024 * 1024,
                 client_id: str = "kray-spark-reader", member_id: str | None = None):
        if not topics:
            raise ValueError("subscribe to at least one topic")
        self.bootstrap = bootstrap
        self.group = group
        self.topics = list(topics)
        self.client_id = client_id
        self.member_id = member_id or new_member_id()
        self.member_epoch = 0
        self.heartbeat_interval_ms = 1000
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.on_records = on_records
        self.want_records = want_records
        self.lock_duration_ms: int | None = None
        self.error: BaseException | None = None
        self._acks: queue.Queue[_Ack] = queue.Queue()
        self._stop = threading.Event()
        self._bootstrap_conn = Connection(bootstrap, client_id)
        self._coordinator: Connection | None = None
        self._leaders: dict[int, Connection] = {}          # node id -> connection
        self._session_epochs: dict[int, int] = {}          # node id -> next share session epoch
        self._brokers: dict[int, str] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        self._leader_of: dict[tuple[str, int], int] = {}
        self._assignment: set[tuple[str, int]] = set()
        self._in_session: dict[int, set[tuple[str, int]]] = {}  # what each leader's session holds
        self._next_heartbeat = 0.0
        self._thread = threading.Thread(target=self._run, name=f"share-member-{group}", daemon=True)
        self._refresh_metadata()
        self._thread.start()

    # ---- owner API (any thread) -------------------------------------------------------------------

    def acknowledge(self, topic: str, partition: int, ranges: list[tuple[int, int, int]],
                    timeout_s: float = 60.0) -> _Ack:
        """Queue (first, last, type) ranges for one partition and wait until the leader answers."""
        ack = _Ack(topic, partition, ranges)
        self._acks.put(ack)
        if not ack.done.wait(timeout_s):
            ack.error_code, ack.error_message = ErrorCode.REQUEST_TIMED_OUT, f"no answer in {timeout_s} s"
        return ack

    def acknowledge_many(self, acks: list[_Ack], timeout_s: float = 60.0) -> list[_Ack]:
        for a in acks:
            self._acks.put(a)
        deadline = time.monotonic() + timeout_s
        for a in acks:
            if not a.done.wait(max(0.0, deadline - time.monotonic())):
                a.error_code, a.error_message = ErrorCode.REQUEST_TIMED_OUT, f"no answer in {timeout_s} s"
        return acks

    def close(self) -> None:
        """Leave the group: close every share session (the broker releases what is still
        acquired) and send the leaving heartbeat."""
        self._stop.set()
        self._thread.join(timeout=30)
        for node, conn in list(self._leaders.items()):
            try:
                conn.call(ShareAcknowledgeRequest(group_id=self.group, member_id=self.member_id,
                                                  share_session_epoch=-1, topics=[]), timeout_s=5)
            except Exception:
                pass
            conn.close()
        if self._coordinator is not None and self.member_epoch > 0:
            try:
                self._coordinator.call(ShareGroupHeartbeatRequest(group_id=self.group, member_id=self.member_id,
                                                                  member_epoch=-1), timeout_s=5)
            except Exception:
                pass
            self._coordinator.close()
        self._bootstrap_conn.close()

    # ---- I/O thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if time.monotonic() >= self._next_heartbeat:
                    self._heartbeat()
                acks = self._drain_acks()
                if not self._assignment:
                    self._answer(acks, ErrorCode.NOT_LEADER_OR_FOLLOWER, "this member has no partitions assigned")
                    self._stop.wait(min(0.1, self.heartbeat_interval_ms / 1000))
                    continue
                self._fetch_round(acks, max(0, self.want_records()))
                failures = 0
            except ShareClientError as e:
                self.error = e
                log.error("share group member %s stops: %s", self.member_id, e)
                self._answer(self._drain_acks(), ErrorCode.UNKNOWN_SERVER_ERROR, str(e))
                return
            except (OSError, ConnectionError, AdminError) as e:
                failures += 1
                log.warning("share group member %s: %s; reconnecting", self.member_id, e)
                self._reset_connections()
                self._stop.wait(min(5.0, RETRY_BACKOFF_S * failures))
            except Exception as e:  # a bug: say so, and fail whoever waits
                self.error = e
                log.exception("share group member %s failed", self.member_id)
                self._answer(self._drain_acks(), ErrorCode.UNKNOWN_SERVER_ERROR, repr(e))
                return

    def _drain_acks(self) -> list[_Ack]:
        out = []
        while True:
            try:
                out.append(self._acks.get_nowait())
            except queue.Empty:
                return out

    @staticmethod
    def _answer(acks: list[_Ack], error_code: int, message: str | None = None) -> None:
        for a in acks:
            a.error_code, a.error_message = int(error_code), message
            a.done.set()

    def _reset_connections(self) -> None:
        for conn in list(self._leaders.values()) + [c for c in (self._coordinator,) if c]:
            conn.close()
        self._leaders.clear()
        self._session_epochs.clear()
        self._in_session.clear()
        self._coordinator = None
        try:
            self._bootstrap_conn.close()
            self._bootstrap_conn = Connection(self.bootstrap, self.client_id)
            self._refresh_metadata()
        except AdminError:
            pass

    def _refresh_metadata(self) -> None:
        r = self._bootstrap_conn.call(MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in self.topics],
            allow_auto_topic_creation=False))
        self._brokers = {b.node_id: f"{b.host}:{b.port}" for b in r.brokers}
        for t in r.topics:
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise ShareClientError(f"topic {t.name!r} does not exist: create it first "
                                       f"(kray topics --create --topic {t.name})")
            if t.error_code:
                continue
            self._topic_ids[t.name] = t.topic_id
            self._topic_names[t.topic_id] = t.name
            for p in t.partitions:
                self._leader_of[(t.name, p.partition_index)] = p.leader_id

    def _heartbeat(self) -> None:
        if self._coordinator is None:
            self._coordinator = self._find_coordinator()
        r = self._coordinator.call(ShareGroupHeartbeatRequest(
            group_id=self.group, member_id=self.member_id, member_epoch=self.member_epoch,
            subscribed_topic_names=self.topics if self.member_epoch == 0 else None))
        now = time.monotonic()
        if r.error_code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            log.warning("share group member %s was fenced (%s): joining again", self.member_id,
                        ErrorCode(r.error_code).name)
            self.member_epoch = 0
            self._next_heartbeat = now
            return
        if r.error_code in COORDINATOR_ERRORS:
            self._coordinator.close()
            self._coordinator = None
            self._next_heartbeat = now + RETRY_BACKOFF_S
            return
        if r.error_code:
            raise ShareClientError(f"share group {self.group!r} refused member {self.member_id}: "
                                   f"{ErrorCode(r.error_code).name}: {r.error_message or ''}")
        self.member_epoch = r.member_epoch
        self.heartbeat_interval_ms = r.heartbeat_interval_ms or self.heartbeat_interval_ms
        self._next_heartbeat = now + self.heartbeat_interval_ms / 1000
        if r.assignment is not None:
            assigned = set()
            for tp in r.assignment.topic_partitions:
                name = self._topic_names.get(tp.topic_id)
                if name is None:
                    self._refresh_metadata()
                    name = self._topic_names.get(tp.topic_id)
                if name is not None:
                    assigned.update((name, p) for p in tp.partitions)
            self._assignment = assigned

    def _find_coordinator(self) -> Connection:
        conn = self._bootstrap_conn
        version = conn.version_for(FindCoordinatorRequest.API_KEY)
        if version >= 4:
            r = conn.call(FindCoordinatorRequest(key_type=0, coordinator_keys=[self.group]), version)
            c = r.coordinators[0]
            error, node, host, port = c.error_code, c.node_id, c.host, c.port
        else:
            r = conn.call(FindCoordinatorRequest(key=self.group, key_type=0), version)
            error, node, host, port = r.error_code, r.node_id, r.host, r.port
        if error:
            raise ConnectionError(f"no coordinator for group {self.group!r} yet: {ErrorCode(error).name}")
        return Connection(f"{host}:{port}", self.client_id)

    def _leader(self, node: int) -> Connection:
        conn = self._leaders.get(node)
        if conn is None:
            if node not in self._brokers:
                self._refresh_metadata()
            if node not in self._brokers:
                raise ConnectionError(f"leader {node} is not in the metadata")
            conn = self._leaders[node] = Connection(self._brokers[node], self.client_id)
            self._session_epochs[node] = 0
            self._in_session[node] = set()
        return conn

    def _next_epoch(self, node: int) -> int:
        epoch = self._session_epochs[node]
        self._session_epochs[node] = 1 if epoch >= 2**31 - 1 else epoch + 1
        return epoch

    def _fetch_round(self, acks: list[_Ack], room: int) -> None:
        """One request per leader, all sent before any answer is read: ShareFetch (with the queued
        acknowledgements) when there is room, else ShareAcknowledge for leaders with acks."""
        by_node: dict[int, list[tuple[str, int]]] = {}
        for tp in sorted(self._assignment):
            by_node.setdefault(self._leader_of.get(tp, -1), []).append(tp)
        # One request may carry one acknowledgement per partition (ranges ascending, never
        # overlapping) and RENEW only in a request of its own (IsRenewAck): the rest waits a round.
        acks_by_node: dict[int, list[_Ack]] = {}
        deferred: list[_Ack] = []
        renewing: set[int] = set()
        settling = {self._leader_of.get((a.topic, a.partition), -1) for a in acks if not _is_renew(a)}
        seen: set[tuple[str, int]] = set()
        for a in acks:
            node = self._leader_of.get((a.topic, a.partition), -1)
            if (a.topic, a.partition) in seen or (_is_renew(a) and node in settling):
                deferred.append(a)
                continue
            seen.add((a.topic, a.partition))
            acks_by_node.setdefault(node, []).append(a)
            if _is_renew(a):
                renewing.add(node)
        for a in deferred:
            self._acks.put(a)
        if -1 in by_node or -1 in acks_by_node:
            self._refresh_metadata()
            self._answer(acks_by_node.pop(-1, []), ErrorCode.NOT_LEADER_OR_FOLLOWER, "partition leader unknown")
            by_node.pop(-1, None)
        sent: list[tuple[int, str, list[_Ack]]] = []
        per_node_room = max(1, room // max(1, len(by_node))) if room else 0
        for node in sorted(set(by_node) | set(acks_by_node)):
            partitions = by_node.get(node, [])
            node_acks = acks_by_node.get(node, [])
            conn = self._leader(node)
            ack_map: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
            for a in node_acks:
                ack_map.setdefault((a.topic, a.partition), []).extend(a.ranges)
            if room and partitions and node not in renewing:
                wanted = set(partitions) | set(ack_map)
                forgotten = self._in_session[node] - wanted
                conn.send(self._share_fetch(node, wanted, ack_map, forgotten, per_node_room))
                self._in_session[node] = wanted
                sent.append((node, "fetch", node_acks))
            elif node_acks:
                renew = node in renewing
                version = conn.version_for(ShareAcknowledgeRequest.API_KEY)
                if renew and version < 2:
                    self._answer(node_acks, ErrorCode.UNSUPPORTED_VERSION,
                                 "the broker cannot renew locks (needs ShareAcknowledge v2, Kafka 4.2+)")
                    continue
                if self._session_epochs[node] == 0:  # a session must exist before ShareAcknowledge
                    conn.send(self._share_fetch(node, set(ack_map), {}, set(), 0))
                    sent.append((node, "open", []))
                    self._in_session[node] = set(ack_map)
                conn.send(ShareAcknowledgeRequest(
                    group_id=self.group, member_id=self.member_id, share_session_epoch=self._next_epoch(node),
                    is_renew_ack=renew, topics=self._ack_topics(ack_map, ShareAcknowledgeRequest)), version)
                sent.append((node, "ack", node_acks))
        if not sent:
            self._stop.wait(0.05)
            return
        try:
            fetched = self._receive_round(sent)
        except BaseException as e:  # the connection broke mid-round: nobody waits for an answer in vain
            self._answer([a for a in acks if not a.done.is_set()], ErrorCode.NETWORK_EXCEPTION, str(e))
            raise
        if fetched:
            self.on_records(fetched)

    def _receive_round(self, sent: list[tuple[int, str, list[_Ack]]]) -> list[FetchedRecords]:
        """Read every answer and settle the waiting acknowledgements first; decode records last,
        so a commit does not wait for the decoding of the next batch's records."""
        to_decode: list[tuple[str, Any]] = []
        for node, kind, node_acks in sent:
            conn = self._leaders[node]
            r = conn.receive(timeout_s=SOCKET_TIMEOUT_S + self.fetch_max_wait_ms / 1000)
            if kind == "fetch" and getattr(r, "acquisition_lock_timeout_ms", 0):
                self.lock_duration_ms = r.acquisition_lock_timeout_ms
            if r.error_code:
                if r.error_code in SESSION_ERRORS:
                    self._session_epochs[node] = 0
                    self._in_session[node] = set()
                self._answer(node_acks, r.error_code, r.error_message)
                if r.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH):
                    self._next_heartbeat = 0.0
                continue
            codes: dict[tuple[str, int], tuple[int, str | None]] = {}
            for t in r.responses:
                name = self._topic_names.get(t.topic_id)
                for p in t.partitions:
                    code = p.acknowledge_error_code if kind == "fetch" else p.error_code
                    message = p.acknowledge_error_message if kind == "fetch" else p.error_message
                    codes[(name, p.partition_index)] = (code, message)
                    if kind == "fetch":
                        if p.error_code in METADATA_ERRORS:
                            self._refresh_metadata()
                        elif p.error_code == 0 and p.acquired_records:
                            to_decode.append((name, p))
            for a in node_acks:
                a.error_code, a.error_message = codes.get((a.topic, a.partition), (
                    ErrorCode.UNKNOWN_SERVER_ERROR, "the broker's answer did not mention this partition"))
                a.done.set()
        return [self._decode(name, p) for name, p in to_decode]

    def _share_fetch(self, node: int, partitions, ack_map, forgotten, max_records: int) -> ShareFetchRequest:
        topics: dict[str, list] = {}
        for topic, partition in sorted(set(partitions) | set(ack_map)):
            topics.setdefault(topic, []).append(ShareFetchRequest.FetchPartition(
                partition_index=partition, partition_max_bytes=0, acknowledgement_batches=[
                    ShareFetchRequest.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=[t])
                    for f, l, t in ack_map.get((topic, partition), [])]))
        gone: dict[str, list[int]] = {}
        for topic, partition in forgotten:
            gone.setdefault(topic, []).append(partition)
        fetching = max_records > 0
        return ShareFetchRequest(
            group_id=self.group, member_id=self.member_id, share_session_epoch=self._next_epoch(node),
            max_wait_ms=self.fetch_max_wait_ms if fetching else 0, min_bytes=1 if fetching else 0,
            max_bytes=self.fetch_max_bytes if fetching else 0, max_records=max_records, batch_size=max_records,
            topics=[ShareFetchRequest.FetchTopic(topic_id=self._topic_ids[t], partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[ShareFetchRequest.ForgottenTopic(topic_id=self._topic_ids[t], partitions=ps)
                                   for t, ps in gone.items()])

    def _ack_topics(self, ack_map, cls) -> list:
        topics: dict[str, list] = {}
        for (topic, partition), ranges in sorted(ack_map.items()):
            topics.setdefault(topic, []).append(cls.AcknowledgePartition(
                partition_index=partition, acknowledgement_batches=[
                    cls.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=[t])
                    for f, l, t in ranges]))
        return [cls.AcknowledgeTopic(topic_id=self._topic_ids[t], partitions=ps) for t, ps in topics.items()]

    def _decode(self, topic: str, p) -> FetchedRecords:
        """The acquired records of one partition's answer; offsets acquired without a record
        (control records, compacted gaps) are acknowledged as GAP right away."""
        acquired = [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records]
        out = FetchedRecords(topic, p.partition_index)
        present: set[int] = set()
        buf = p.records or b""
        i = 0
        for header in iter_batches(buf):
            if header.is_control or header.last_offset < acquired[0][0]:
                continue
            for rec in decode_records(header):
                while i < len(acquired) and rec.offset > acquired[i][1]:
                    i += 1
                if i == len(acquired):
                    break
                first, _, count = acquired[i]
                if rec.offset < first:
                    continue
                out.offsets.append(rec.offset)
                out.timestamps_ms.append(rec.timestamp_ms)
                out.keys.append(rec.key)
                out.values.append(rec.value)
                out.headers.append([(k if isinstance(k, str) else k.decode("utf-8", "replace"), v)
                                    for k, v in rec.headers])
                out.delivery_counts.append(count)
                present.add(rec.offset)
            if i == len(acquired):
                break
        gaps = [o for first, last, _ in acquired for o in range(first, last + 1) if o not in present]
        if gaps:
            self._acks.put(_Ack(topic, p.partition_index, offset_ranges(gaps, GAP)))
        return out
