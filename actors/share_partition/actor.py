"""The share-partition leaders' shell: one `SharePartition` per share group, hosted by the
partition leader actor of their topic-partition (KIP-932: the share-partition leader lives with
the partition leader and moves with it).

Why inside the partition replica rather than an actor per (group, partition): a ShareFetch reads the
log and acquires records in one step; as separate actors that is a Ray call (~2 ms of CPU here)
per fetch on the hot path, and state would straddle two processes. In process, acquisition is a
synchronous step right after the log read.

Durability: what changes durable state (acknowledgements, releases, expiries, redeliveries) is
written to the share coordinator before the request is answered. The shell reads the clock and
polls lock deadlines; the core never does.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from actors import controller_client, internal_topics, metrics
from actors.share_coordinator import wire as state_wire
from actors.share_coordinator.core import state_partition_for
from actors.share_partition.core import LATEST_TIMESTAMP, ShareFetchResult, SharePartition, start_offset_timestamp
from actors.config_schema import ShareGroupLimits
from actors.security.inter_broker import broker_transport
from actors.share_partition.dead_letter_writer import DLQ_BATCH_RECORDS_MAX, DeadLetterWriter
from actors.share_partition.state_client import BrokerStateConnection, LocalStateConnection
from actors.startup import start_unless_started, succeeded
from protocol.errors import ErrorCode
from protocol.record_batch import CorruptRecord, iter_batches, record_keys
from actors.partition import wire
from actors.partition.core import READ_COMMITTED, READ_UNCOMMITTED, skipped_by_read_committed
from actors.partition.log import FileSlice, OffsetOutOfRange

# answers that mean the share coordinator is elsewhere now, or not there yet
COORDINATOR_MOVED = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
log = logging.getLogger("kray.share_partition")
SHARE_FETCH_BYTES_MAX = 8 * 1024 * 1024
SHARE_FETCH_BYTES_MIN = 64 * 1024
# A share fetch acquires about max_records records, so it reads about that many from the log (by
# the bytes per record seen so far) instead of max_bytes: most of a large read would be thrown away.
READ_HEADROOM = 1.25
DEADLINE_POLL_S_MAX = 1.0
NO_STATE_EPOCH = 0
STATE_WRITE_TIMEOUT_S = 30.0
# loading a share-partition's state: each step (the group's configs; each share-state request,
# finding where its coordinator is included) waits at most this long; a load that failed is tried
# again at the next ShareFetch, with the coordinator looked up afresh (one on a host cut off
# answers nothing)
STATE_LOAD_STEP_TIMEOUT_S = 10.0
# A ShareFetch that acknowledges nothing here waits at most this long for the share-partition's
# state to load (a new leader's first request, most often, answered within it): a load that takes
# longer (its coordinator's host cut off) goes on while the request is answered without records
# from here, as Kafka answers for a share-partition still initializing. Clients keep one ShareFetch
# in flight (librdkafka's share consumer, across all brokers): holding it would hold every other
# partition's records too. Its long poll (share_wait) waits for the load within its own time.
LOAD_WAIT_S = 0.5
# While a share-state request waits for its answer, how often the leaders look (in the
# controller's metadata) whether the coordinator's partition still has the leader the request went
# to: a broker cut off answers nothing, and its partitions have new leaders after
# broker.session.timeout.ms, long before STATE_WRITE_TIMEOUT_S. A look is one controller call per
# share-partition leader (however many requests wait), made only while one waits this long.
STATE_MOVE_CHECK_S = 0.5
MOVED = object()  # _answer_unless_moved: the coordinator moved while the request waited
# A state write answered NOT_COORDINATOR is sent again (the whole state, to where the coordinator is
# now) after each of these delays: at once, then twice more for a broker the metadata names
# before that broker has heard it leads (~0.7 s in all, within a ShareAcknowledge's patience).
MOVED_RETRY_DELAYS_S = (0.0, 0.2, 0.5)
DLQ_RETRY_S = 1.0  # after a failed dead-letter write, before the records are written again
DLQ_STUCK_LOG_S = 60.0  # while dead-letter writes keep failing the same way, how often that is said again


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def _step(what: str, awaitable):
    """One step of loading a share-partition's state, at most STATE_LOAD_STEP_TIMEOUT_S."""
    try:
        return await asyncio.wait_for(awaitable, STATE_LOAD_STEP_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise TimeoutError(f"{what}: no answer within {STATE_LOAD_STEP_TIMEOUT_S:g} s") from None


class ShareLeaders:
    """All share-partition leaders of one topic-partition, inside its partition replica."""

    def __init__(self, partition_replica, broker_config: dict, controller):
        self.partition = partition_replica  # the PartitionReplica that hosts us (its core is the log)
        self.config = broker_config
        self.controller = controller
        self.groups: dict[str, SharePartition] = {}
        self.state_epochs: dict[str, int] = {}
        self.loading: dict[str, asyncio.Future] = {}
        self.coordinator_indexes: dict[str, int] = {}  # group id -> its __share_group_state partition
        # coordinator index -> (its partition's key, where its state writes go: a Unix socket
        # address on this broker, or another broker's (host, port)); address -> its connection
        self.state_routes: dict[int, tuple] = {}
        self.state_connections: dict[Any, asyncio.Future] = {}
        self.transport = None  # (TLS context, broker login) for other brokers' listeners, made on first use
        # group id -> a FIFO lock, held while one of its writes finds its route and is written
        self.sending: dict[str, asyncio.Lock] = {}
        self.acquirable = asyncio.Event()  # set when records may have become acquirable
        self.bytes_per_record = 1024.0  # running estimate from what the log returned
        self.pending_retried: dict[str, float] = {}  # group id -> when its pending keys last caused a write
        self.timer: asyncio.Task | None = None
        self.background: set[asyncio.Task] = set()
        self.image_check: tuple[float, asyncio.Future] | None = None  # (when asked, the controller's answer)
        self.dead_letters = DeadLetterWriter(partition_replica, broker_config, controller)
        self.dead_lettering: dict[str, asyncio.Task] = {}  # group id -> its dead-letter drain (KIP-1191)
        # group id -> (the failure last logged, when it was logged, when the writes began to fail)
        self.dead_letter_errors: dict[str, tuple[str, float, float]] = {}

    # ---- share coordinator -------------------------------------------------------------------
    def _coordinator_index(self, group_id: str) -> int:
        index = self.coordinator_indexes.get(group_id)
        if index is None:  # a string hash: once per group, not on every write
            count = int(self.config["share.coordinator.state.topic.num.partitions"])
            index = self.coordinator_indexes[group_id] = state_partition_for(
                group_id, self.partition.topic_id, self.partition.partition, count)
        return index

    def _learn(self, image) -> None:
        """Where each share coordinator's state requests go: (its partition's key, this broker's
        listener of its shard) where it leads on this broker, else (its partition's key, its
        broker's inter-broker listener address)."""
        for name, i in image.coordinators:
            if name != internal_topics.SHARE_GROUP_STATE:
                continue
            if i in self.state_routes:
                continue
            route = self._route_in(image, i)
            if route is not None:
                self.state_routes[i] = route

    def _route_in(self, image, i: int):
        """(the partition key of coordinator `i`, where its state writes go) by `image`, or None
        where it has no leader (or one this broker cannot reach yet)."""
        topic = image.topics.get(internal_topics.SHARE_GROUP_STATE)
        if topic is None or i >= len(topic.partitions):
            return None
        key, leader = (topic.topic_id, i), topic.partitions[i].leader
        if leader == self.partition.broker_id and key in image.partition_listeners:
            return key, image.partition_listeners[key]
        if leader in image.brokers and leader != self.partition.broker_id:
            info = image.brokers[leader]
            return key, (info.host, info.port)
        return None

    async def _state_route(self, group_id: str):
        """(the coordinator's partition key, a connection to it): a kept-open connection per
        address, shared by every group whose coordinator is there; a new one after a failure."""
        index = self._coordinator_index(group_id)
        if index not in self.state_routes:
            self._learn(await controller_client.ensure_internal_topic(self.controller, internal_topics.SHARE_GROUP_STATE))
            if index not in self.state_routes:
                raise ConnectionError(f"{internal_topics.SHARE_GROUP_STATE}-{index} has no leader now")
        key, address = self.state_routes[index]
        opening = self.state_connections.get(address)
        if opening is not None and succeeded(opening) and not opening.result().usable:
            opening = None  # it worked, then failed: connect again
        opening = self.state_connections[address] = start_unless_started(opening, lambda: self._connect(address))
        return key, await asyncio.shield(opening)

    async def _connect(self, address):
        if isinstance(address, str):  # this broker's shard: its Unix socket
            return await LocalStateConnection.open(address, STATE_WRITE_TIMEOUT_S)
        if self.transport is None:
            self.transport = broker_transport(self.config)
        ssl_context, login = self.transport
        return await BrokerStateConnection.open(*address, STATE_WRITE_TIMEOUT_S, ssl_context, login)

    async def _write_state(self, group_id: str, start_offset: int, batches: list,
                           delivery_complete_count: int = -1) -> tuple[int, str | None]:
        """WriteShareGroupState over the brokers' own listeners, not a Ray call (see
        actors/share_coordinator/wire.py): to this broker's coordinator shard, or to another
        broker's inter-broker listener. A group's writes leave in the order they are made (finding the
        route and connecting may wait: its `sending` lock keeps the order meanwhile, without holding
        up other groups), and each waits only for its own answer."""
        p = self.partition
        index = self._coordinator_index(group_id)
        sent = {}  # "route": where the write went, once it has

        async def write():
            async with self.sending.setdefault(group_id, asyncio.Lock()):
                key, connection = await self._state_route(group_id)
                sent["route"] = self.state_routes.get(index)
                state_epoch = self.state_epochs[group_id]
                if isinstance(connection, LocalStateConnection):
                    answer = connection.send_write(key, group_id, p.topic_id, p.partition, state_epoch,
                                                   p.leader_epoch, start_offset, batches, STATE_WRITE_TIMEOUT_S,
                                                   delivery_complete_count)
                else:
                    answer = connection.send_write(group_id, p.topic_id, p.partition, state_epoch, p.leader_epoch,
                                                   start_offset, batches, STATE_WRITE_TIMEOUT_S,
                                                   delivery_complete_count)
            return await answer
        answer = await self._answer_unless_moved(index, sent, write())
        return (ErrorCode.NOT_COORDINATOR, "the share coordinator moved while the write waited") \
            if answer is MOVED else answer

    async def _state_call(self, group_id: str, api_key: int, item: list) -> list:
        """A share-state operation of this share-partition (Read, Initialize, or a Write outside
        the ordered writes of _write_state) on its coordinator over the brokers' listeners, as the
        writes go: not a Ray call, which to a coordinator's shard this process never called would
        wait for Ray's GCS to say where it runs (a cut-off Ray head: until the heal). Its result
        as the frame's ([error, message, fields...]). Sent again to the coordinator's new leader
        when it moved while the request waited (each of these may be repeated: a Read, an
        Initialize of a state epoch, a Write of the whole state)."""
        index = self._coordinator_index(group_id)
        for _ in range(2):
            sent = {}

            async def call():
                key, connection = await self._state_route(group_id)
                sent["route"] = self.state_routes.get(index)
                if isinstance(connection, LocalStateConnection):
                    return list(await connection.call_item(key, api_key, group_id, item, STATE_WRITE_TIMEOUT_S))
                return await connection.call_item(api_key, group_id, item, STATE_WRITE_TIMEOUT_S)
            answer = await self._answer_unless_moved(index, sent, call())
            if answer is not MOVED:
                return answer
            self._forget_coordinator(group_id)
        return [ErrorCode.NOT_COORDINATOR, "the share coordinator moved twice while a request waited"]

    async def _answer_unless_moved(self, index: int, sent: dict, answer):
        """A share-state request's answer; or MOVED as soon as the metadata shows that coordinator
        `index` no longer leads where the request went (`sent["route"]`, or while it is still
        connecting, where it connects), without waiting for STATE_WRITE_TIMEOUT_S: a broker cut off
        from the others answers nothing (and takes connections nowhere), while its partitions get
        new leaders once its session times out. An answer that comes after all is dropped; the
        caller sends the request (a write: the whole state) to the new leader."""
        answer = asyncio.ensure_future(answer)
        try:
            while True:
                done, _ = await asyncio.wait([answer], timeout=STATE_MOVE_CHECK_S)
                if done:
                    return answer.result()
                try:
                    image = await asyncio.wait_for(asyncio.shield(self._recent_image()), STATE_MOVE_CHECK_S)
                except Exception:  # the controller is slow or away: keep waiting for the answer
                    continue
                if answer.done():
                    return answer.result()
                route = sent.get("route") or self.state_routes.get(index)
                now = self._route_in(image, index)
                if route is not None and now != route:
                    log.warning("share coordinator %d moved (%s -> %s) while a share-state request waited for its "
                                "answer", index, route and route[1], now and now[1])
                    return MOVED
        finally:
            answer.cancel()

    def _recent_image(self) -> asyncio.Future:
        """The controller's metadata, asked at most once per STATE_MOVE_CHECK_S however many
        requests wait, and never twice at once (a slow controller is not asked again meanwhile)."""
        if self.image_check is None or (self.image_check[1].done()
                                        and time.monotonic() - self.image_check[0] >= STATE_MOVE_CHECK_S):
            self.image_check = (time.monotonic(), asyncio.ensure_future(
                controller_client.ensure_internal_topic(self.controller, internal_topics.SHARE_GROUP_STATE)))
        return self.image_check[1]

    async def _persist(self, group_id: str, sp: SharePartition, wake_freed: bool = True) -> tuple[int, str | None]:
        """Write what changed to the share coordinator. `wake_freed`: wake waiting fetches when the
        write frees keys (key ordering); False when the caller acquires right after it and wakes
        them itself if anything is left (so that they do not all race for the same records)."""
        version = sp.durable_version  # what this write makes durable (key ordering frees keys by it)
        dirty = sp.take_dirty()
        if dirty is None:
            return 0, None
        # the records beyond the start offset delivered for good (acknowledged, rejected, archived):
        # DescribeShareGroupOffsets' lag leaves them out (WriteShareGroupState v1's DeliveryCompleteCount)
        complete = sp.delivery_complete_count()
        for attempt in range(len(MOVED_RETRY_DELAYS_S) + 1):
            start_offset, batches = dirty
            try:
                error, message = await self._write_state(group_id, start_offset, batches, complete)
            except Exception as e:
                error, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, f"share coordinator unreachable: {e}"
            if not error:
                break
            if error in COORDINATOR_MOVED:
                self._forget_coordinator(group_id)
            sp.invalidate_persisted()  # the next write carries the whole state
            log.warning("writing share state of %s failed: %s", group_id, message)
            if error != ErrorCode.NOT_COORDINATOR or attempt == len(MOVED_RETRY_DELAYS_S):
                break
            # the coordinator moved: the whole state, to where it is now (at once the first time;
            # then a little later, for a new leader that has not heard yet that it leads)
            await asyncio.sleep(MOVED_RETRY_DELAYS_S[attempt])
            version = sp.durable_version
            dirty = sp.take_dirty()  # the coordinator moved: once more, the whole state to where it is now
            complete = sp.delivery_complete_count()
            if dirty is None:
                break
        if not error and sp.made_durable(version) and wake_freed:
            self._wake()  # key ordering: the next records of keys just done with may go out now
        if not error:
            self._dead_letter_soon(group_id, sp)  # Archiving records are durable as such: write their DLQ records
        return error, message

    # ---- dead letters (KIP-1191) ----------------------------------------------------------------
    def _dead_letter_soon(self, group_id: str, sp: SharePartition) -> None:
        """Start writing the group's Archiving records to its DLQ topic, unless that is under way."""
        if sp.archiving_count() and group_id not in self.dead_lettering:
            self.dead_lettering[group_id] = asyncio.ensure_future(self._drain_dead_letters(group_id, sp))

    async def _drain_dead_letters(self, group_id: str, sp: SharePartition) -> None:
        """Batch after batch: write the DLQ records, then (durable) archive the records and persist
        that; a failed write hands the records out again after DLQ_RETRY_S. Other records of the
        partition are acquired and acknowledged meanwhile: only the Archiving ones wait. Stops when
        this share-partition is no longer led here (its new leader writes what is still Archiving)."""
        try:
            await self._drain_dead_letter_batches(group_id, sp)
        finally:  # at once, so that no record goes Archiving between the last empty take and this
            if self.dead_lettering.get(group_id) is asyncio.current_task():
                del self.dead_lettering[group_id]

    async def _drain_dead_letter_batches(self, group_id: str, sp: SharePartition) -> None:
        while self.groups.get(group_id) is sp:
            letters = sp.take_dead_letters(DLQ_BATCH_RECORDS_MAX)
            if not letters:
                return
            first, last = letters[0].first_offset, letters[-1].last_offset
            self._report_archiving(group_id, sp)
            try:
                outcome = await self.dead_letters.write(sp, letters, now_ms())
            except Exception as e:
                self._dead_letter_failed(group_id, sp, first, e)
                sp.dead_letters_failed(first, last)
                await asyncio.sleep(DLQ_RETRY_S)
                continue
            if self.dead_letter_errors.pop(group_id, None) is not None:
                log.info("share group %s: dead letters of %s-%d are written again", group_id,
                         self.partition.topic, self.partition.partition)
            n = sp.dead_letters_written(first, last, copied=outcome == "written")
            metrics.record_dead_letters(group_id, n if outcome == "written" else 0, n if outcome != "written" else 0)
            self._report_archiving(group_id, sp)
            self._wake()
            await self._persist(group_id, sp)  # Archived (a failed write: the next one carries it)

    def _report_archiving(self, group_id: str, sp: SharePartition) -> None:
        metrics.record_archiving(group_id, self.partition.topic, self.partition.partition, sp.archiving_count())

    def _dead_letter_failed(self, group_id: str, sp: SharePartition, oldest: int, e: Exception) -> None:
        """Say why a DLQ write failed: once while it keeps failing the same way, and again every
        DLQ_STUCK_LOG_S while records stay ARCHIVING (each counts against the group's record locks)."""
        said = self.dead_letter_errors.get(group_id)
        now = time.monotonic()
        if said is not None and said[0] == str(e) and now - said[1] < DLQ_STUCK_LOG_S:
            return
        since = now if said is None else said[2]
        self.dead_letter_errors[group_id] = (str(e), now, since)
        log.warning("share group %s: %d records of %s-%d wait ARCHIVING for their dead-letter write, the oldest at "
                    "offset %d, for %.0f s: %s (retrying every %g s)", group_id, sp.archiving_count(),
                    self.partition.topic, self.partition.partition, oldest, now - since, e, DLQ_RETRY_S)

    def _persist_soon(self, group_id: str, sp: SharePartition) -> None:
        task = asyncio.ensure_future(self._persist(group_id, sp))
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def _forget_coordinator(self, group_id: str) -> None:
        """The share coordinator moved (its partition's leadership did) or is unreachable: look it
        up again on the next write (a failed connection is replaced when next used; one that no
        coordinator is behind any more is closed once idle)."""
        index = self._coordinator_index(group_id)
        route = self.state_routes.pop(index, None)
        if route is not None and route[1] not in {address for _, address in self.state_routes.values()}:
            opening = self.state_connections.get(route[1])
            if succeeded(opening) and not opening.result().connection.waiting:
                self.state_connections.pop(route[1]).result().close()

    async def _load(self, group_id: str) -> SharePartition:
        started = time.monotonic()
        try:
            sp = await self._read_state(group_id)
        except Exception as e:
            log.warning("loading the share-partition state of %s on %s-%d failed after %.1f s: %s",
                        group_id, self.partition.topic_id, self.partition.partition, time.monotonic() - started,
                        e or type(e).__name__)
            self._forget_coordinator(group_id)
            raise
        metrics.record_load_time((time.monotonic() - started) * 1000)
        return sp

    async def _read_state(self, group_id: str) -> SharePartition:
        core = self.partition.core
        p = self.partition
        configs = await _step("the group's configs", p.group_configs(group_id))
        read_error, read_message, state_epoch, start_offset, batches = (await _step("ReadShareGroupState",
            self._state_call(group_id, state_wire.READ, [p.topic_id.bytes, p.partition, p.leader_epoch]))
            + [-1, -1, []])[:5]
        limits = ShareGroupLimits.of_group(configs, self.config)
        sp = SharePartition(group_id, p.topic_id, p.partition, **vars(limits))
        if read_error == 0 and start_offset >= 0:
            sp.load(start_offset, [tuple(b) for b in batches], log_start_offset=core.log_start_offset)
            self.state_epochs[group_id] = state_epoch
            sp.take_dirty()
            return sp
        # The group coordinator resolves share.auto.offset.reset when it initializes the share-partition
        # (KIP-932 InitializeShareGroupState), so that nothing produced after a member's assignment is
        # skipped. When it could not (or the state was never initialized), it is resolved here, now.
        start = self._initial_offset(configs)
        sp.load(start, [], log_start_offset=core.log_start_offset)
        if read_error == 0:  # initialized by the group coordinator without a start offset
            self.state_epochs[group_id] = state_epoch
            error, message = (await _step("WriteShareGroupState", self._state_call(
                group_id, state_wire.WRITE, state_wire.write_item(p.topic_id, p.partition, state_epoch,
                                                                  p.leader_epoch, start, []))))[:2]
        elif read_error == ErrorCode.INVALID_REQUEST:  # never initialized: do it here
            self.state_epochs[group_id] = NO_STATE_EPOCH
            error, message = (await _step("InitializeShareGroupState", self._state_call(
                group_id, state_wire.INITIALIZE, [p.topic_id.bytes, p.partition, NO_STATE_EPOCH, start])))[:2]
        else:
            error, message = read_error, read_message
        if error:
            raise RuntimeError(f"cannot load the share-partition state of {group_id}: {message}")
        sp.take_dirty()
        return sp

    def _initial_offset(self, group_configs: dict) -> int:
        """Where share.auto.offset.reset (Kafka's default: latest) starts the share-partition now."""
        core = self.partition.core
        try:
            timestamp = start_offset_timestamp(group_configs.get("share.auto.offset.reset"), now_ms())
        except ValueError:  # configs are validated when set: not expected
            timestamp = LATEST_TIMESTAMP
        isolation = READ_COMMITTED if group_configs.get("share.isolation.level") == "read_committed" \
            else READ_UNCOMMITTED
        error, offset, _ = core.list_offsets(timestamp, isolation_level=isolation)
        if error or offset < 0:  # by_duration: no record that recent
            error, offset, _ = core.list_offsets(LATEST_TIMESTAMP, isolation_level=isolation)
        return offset if error == 0 and offset >= 0 else core.high_watermark

    def _readable_end(self, sp: SharePartition) -> int:
        """Where acquisition stops: the high watermark, or the last stable offset for a
        read_committed group (KIP-932 "Reading transactional records")."""
        core = self.partition.core
        return core.last_stable_offset if sp.read_committed else core.high_watermark

    def _loading(self, group_id: str) -> asyncio.Future:
        """The load of the group's share-partition state, started unless one is under way."""
        if group_id not in self.loading:
            self.loading[group_id] = asyncio.ensure_future(self._load(group_id))
        return self.loading[group_id]

    async def get(self, group_id: str, wait_s: float | None = None) -> SharePartition | None:
        """The group's share-partition, loaded from its share coordinator on first use (a failed
        load raises, and the next call loads again). With `wait_s`: None if it is not loaded within
        that long (the load goes on)."""
        sp = self.groups.get(group_id)
        if sp is not None:
            return sp
        loading = self._loading(group_id)
        if wait_s is not None and not loading.done():
            await asyncio.wait([loading], timeout=wait_s)
            if not loading.done():
                return None
        try:
            sp = await asyncio.shield(loading)
        except Exception:
            if self.loading.get(group_id) is loading:
                del self.loading[group_id]
            raise
        self.groups.setdefault(group_id, sp)
        self._ensure_timer()
        self._dead_letter_soon(group_id, self.groups[group_id])  # what a previous leader left Archiving
        return self.groups[group_id]

    # ---- operations ---------------------------------------------------------------------------
    @staticmethod
    def _configure(sp: SharePartition, limits) -> None:
        """The group's limits as the gateway's metadata has them now (ShareGroupLimits.as_list(), or
        None: keep those in force): a changed group config takes effect at the next request, as
        Kafka's share-partition reads its group's configs on every use (KIP-1240)."""
        if limits:
            limits = ShareGroupLimits(*limits)
            if sp.configure(**vars(limits)):
                log.info("share group %s on %s-%d: %s", sp.group_id, sp.topic_id, sp.partition, limits)

    async def share_fetch(self, group_id: str, member_id: str, *, acks, max_records: int, batch_size: int,
                          max_bytes: int, fetch: bool = True, record_limit: bool = False,
                          limits: list | None = None) -> ShareFetchResult:
        """Apply `acks`, then (if `fetch`) acquire what is acquirable now. Never waits for records:
        a long poll is share_wait, then a share_fetch whose answer is certain to be used, so no
        record is acquired for a request that has already been answered (which would cost it a
        delivery attempt it never had). `limits`: the group's (see _configure)."""
        try:
            sp = await self.get(group_id, wait_s=None if acks else LOAD_WAIT_S)
        except Exception as e:
            return ShareFetchResult(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=str(e))
        if sp is None:  # still loading: nothing from here this time
            return ShareFetchResult()
        self._configure(sp, limits)
        result = ShareFetchResult()
        acks_durable = None  # the write that makes this request's acknowledgements durable
        acquire_after = False
        if acks:
            outcome = self._acknowledge(sp, member_id, acks)
            result.ack_error_code = outcome.error_code
            if outcome.changed:
                self._wake()
                # key ordering: the keys these acknowledgements free are free once they are durable;
                # the answer waits for that write anyway, so acquire after it (the next records of
                # those keys go out in this answer, not a round trip later)
                acquire_after = fetch and sp.has_pending_keys()
                acks_durable = asyncio.ensure_future(self._persist(group_id, sp, wake_freed=not acquire_after))
        if acquire_after:
            await asyncio.wait([acks_durable])
            fetch = self.groups.get(group_id) is sp  # not forgotten meanwhile (state altered, moved)
            if not fetch:
                self._wake()
        if fetch:
            # (else) acquire while the acknowledgements are being written: the answer waits for both
            result.records, result.acquired = self._acquire(sp, member_id, max_records, batch_size, max_bytes,
                                                            record_limit)
            if result.acquired:
                self._persist_soon(group_id, sp)  # delivery counts; need not delay the answer
            if acquire_after:  # what this fetch left acquirable goes to the others waiting
                offset = sp.fetch_offset()
                if offset is not None and offset < self._readable_end(sp):
                    self._wake()
        if acks_durable is not None:
            error, message = await acks_durable
            if error and not result.ack_error_code:
                result.ack_error_code, result.ack_error_message = error, message
        return result

    async def share_wait(self, group_id: str, timeout_ms: int) -> bool:
        """True as soon as records may be acquirable for the group (new records, released or
        expired locks); False after timeout_ms. Acquires nothing. A share-partition still loading
        is waited for within timeout_ms."""
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        if group_id not in self.groups:
            loading = self._loading(group_id)
            await asyncio.wait([loading], timeout=max(timeout_ms, 0) / 1000)
            if not loading.done():
                return False
            if loading.cancelled() or loading.exception() is not None:
                return True  # let the share fetch that follows report the error
        try:
            sp = await self.get(group_id)
        except Exception:
            return True
        while True:
            offset = sp.fetch_offset()
            if offset is not None and offset < self._readable_end(sp):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            waiter = self.acquirable
            # offset None: the in-flight window is full and nothing in it is acquirable (with key
            # ordering: every Available record waits for its key). New records cannot change that
            # (the log may well have more: waiting for data would return at once, a busy loop);
            # only an acknowledgement, a release or an expiry can, and each of those wakes us.
            waits = [asyncio.ensure_future(waiter.wait())]
            if offset is not None:
                waits.append(asyncio.ensure_future(self.partition.wait_for_data(
                    sp.end_offset, int(remaining * 1000) + 1,
                    wire.WAIT_READ_COMMITTED if sp.read_committed else wire.WAIT_CONSUMER)))
            try:
                await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    def _acquire(self, sp: SharePartition, member_id: str, max_records: int, batch_size: int, max_bytes: int,
                 record_limit: bool = False):
        """Read from the share-partition's fetch offset and acquire; synchronous, so nothing
        interleaves between the read and the acquisition."""
        core = self.partition.core
        sp.on_log_start_offset(core.log_start_offset)
        offset = sp.fetch_offset()
        readable_end = self._readable_end(sp)
        if offset is None or offset >= readable_end:
            return None, []
        wanted_bytes = int(max(max_records, 1) * self.bytes_per_record * READ_HEADROOM)
        try:  # where the batches lie and their offsets, from their headers: the bytes stay in the file
            where, spans = core.log.slice_spans(
                offset, min(max(max_bytes, 1), SHARE_FETCH_BYTES_MAX, max(wanted_bytes, SHARE_FETCH_BYTES_MIN)),
                max_offset=readable_end)
            aborted = ()
            if sp.read_committed and spans:
                aborted = skipped_by_read_committed(
                    core.log.headers_in(offset, where),
                    core.log.collect_aborted_txns(offset, min(readable_end, spans[-1][2] + 1)))
        except (OffsetOutOfRange, OSError, CorruptRecord) as e:
            log.warning("share fetch of partition %s-%d at offset %d: %s", self.partition.topic_id,
                        self.partition.partition, offset, e)
            return None, []
        if not spans:
            return None, []
        records_read = spans[-1][2] - spans[0][1] + 1
        self.bytes_per_record = 0.8 * self.bytes_per_record + 0.2 * (where.size_bytes / max(records_read, 1))
        keys = None
        if sp.key_ordering:  # share.key.ordering.enable: the keys of the batches not decoded yet
            try:
                keys = self._read_keys(sp, offset, spans)
            except (OSError, CorruptRecord) as e:
                log.warning("share fetch of partition %s-%d at offset %d: keys unreadable: %s",
                            self.partition.topic_id, self.partition.partition, offset, e)
                return None, []
        acquired = sp.acquire(member_id, [(base, last) for _, base, last, _ in spans],
                              max_records=max(max_records, 1), now_ms=now_ms(),
                              batch_size=batch_size if batch_size > 0 else None, fetch_offset=offset,
                              aborted=aborted, record_limit=record_limit, keys=keys)
        if not acquired:
            return None, []
        first, last = acquired[0].first_offset, acquired[-1].last_offset
        kept = [span for span in spans if span[2] >= first and span[1] <= last]
        start, end = kept[0][0], kept[-1][0] + kept[-1][3]
        return FileSlice(where.path, start, end - start), [tuple(a) for a in acquired]

    def _read_keys(self, sp: SharePartition, offset: int, spans) -> dict:
        """offset -> key (None: a null key, a control record or an offset the batch lacks) of
        every record of the batches in `spans` whose keys the share-partition has not cached and
        may need (up to its key horizon): one
        pread from the first such batch to the last, each decompressed if it must. Control batches
        carry no user key."""
        horizon = sp.key_horizon()  # a full window acquires nothing new: the batches beyond wait
        needed = [span for span in spans if span[1] <= horizon and not sp.keys_known(span[1], span[2])]
        keys: dict = {}
        if not needed:
            return keys
        start, end = needed[0][0], needed[-1][0] + needed[-1][3]
        wanted = {span[1] for span in needed}
        data = self.partition.core.log.bytes_in(offset, start, end - start)
        for header in iter_batches(data):
            if header.base_offset not in wanted:
                continue
            keys.update(dict.fromkeys(range(header.base_offset, header.last_offset + 1)))
            if not header.is_control:
                keys.update(record_keys(header))
        return keys

    async def share_acknowledge(self, group_id: str, member_id: str, acks,
                                limits: list | None = None) -> tuple[int, str | None]:
        try:
            sp = await self.get(group_id)
        except Exception as e:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)
        self._configure(sp, limits)
        outcome = self._acknowledge(sp, member_id, acks)
        if outcome.changed:
            self._wake()
            error, message = await self._persist(group_id, sp)
            if error:
                return error, message
        return outcome.error_code, None

    @staticmethod
    def _acknowledge(sp: SharePartition, member_id: str, acks):
        before = dict(sp.metrics.acknowledged_records)
        outcome = sp.acknowledge(member_id, acks, now_ms=now_ms())
        metrics.record_acknowledgements(1, metrics.counter_deltas(before, sp.metrics.acknowledged_records))
        return outcome

    async def share_release(self, group_id: str, member_id: str) -> None:
        sp = self.groups.get(group_id)
        if sp is not None and sp.release_member(member_id, now_ms=now_ms()):
            self._wake()
            await self._persist(group_id, sp)

    def forget(self, group_id: str) -> None:
        """Drop a group's share-partition (its state was altered or deleted by an admin, the group
        being empty); the next use reloads it from the share coordinator."""
        self.groups.pop(group_id, None)
        self.loading.pop(group_id, None)
        self.state_epochs.pop(group_id, None)
        lock = self.sending.get(group_id)
        if lock is not None and not lock.locked():
            del self.sending[group_id]

    # ---- lock deadlines ------------------------------------------------------------------------
    def _wake(self) -> None:
        self.acquirable.set()
        self.acquirable = asyncio.Event()

    def _ensure_timer(self) -> None:
        if self.timer is None:
            self.timer = asyncio.ensure_future(self._expire_loop())

    async def _expire_loop(self) -> None:
        while True:
            deadlines = [d for d in (sp.next_deadline_ms() for sp in self.groups.values()) if d is not None]
            wait_s = DEADLINE_POLL_S_MAX if not deadlines else min(max((min(deadlines) - now_ms()) / 1000, 0.01),
                                                                   DEADLINE_POLL_S_MAX)
            await asyncio.sleep(wait_s)
            now = now_ms()
            for group_id, sp in list(self.groups.items()):
                if sp.expire_locks(now):
                    self._wake()
                    try:
                        await self._persist(group_id, sp)
                    except Exception:
                        log.exception("persisting expired locks of %s failed", group_id)
                elif sp.has_pending_keys() and time.monotonic() - self.pending_retried.get(group_id, 0) >= 1:
                    # key ordering: keys may wait for a state write that failed (the next write
                    # carries the whole state) while nothing else writes: write, at most once a second
                    self.pending_retried[group_id] = time.monotonic()
                    self._persist_soon(group_id, sp)

    def close(self) -> None:
        if self.timer:
            self.timer.cancel()
        for task in list(self.dead_lettering.values()):
            task.cancel()
        self.dead_letters.close()
        for opening in self.state_connections.values():
            if succeeded(opening):
                opening.result().close()
