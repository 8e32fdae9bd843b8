"""The share-partition leaders' shell: one `SharePartition` per share group, hosted by the
partition leader actor of their topic-partition (KIP-932: the share-partition leader lives with
the partition leader and moves with it).

Why inside the partition actor rather than an actor per (group, partition): a ShareFetch reads the
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
from dataclasses import dataclass, field
from typing import Any

from actors import controller_client, internal_topics, metrics
from actors.share_coordinator.core import state_partition_for
from actors.share_partition.core import LATEST_TIMESTAMP, SharePartition, start_offset_timestamp
from actors.share_partition.state_client import StateConnection
from actors.startup import start_unless_started, succeeded
from protocol.errors import ErrorCode
from protocol.messages import WriteShareGroupStateRequest
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
WRITE_VERSION = 1


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class ShareFetchResult:
    error_code: int = 0
    error_message: str | None = None
    ack_error_code: int = 0
    ack_error_message: str | None = None
    records: Any = None  # a FileSlice of the segment holding the acquired batches (sent from the file)
    acquired: list = field(default_factory=list)  # [(first_offset, last_offset, delivery_count)]


class ShareLeaders:
    """All share-partition leaders of one topic-partition, inside its partition actor."""

    def __init__(self, partition_actor, broker_config: dict, controller):
        self.partition = partition_actor  # the PartitionActor that hosts us (its core is the log)
        self.config = broker_config
        self.controller = controller
        self.groups: dict[str, SharePartition] = {}
        self.state_epochs: dict[str, int] = {}
        self.loading: dict[str, asyncio.Future] = {}
        self.coordinators: dict[int, Any] = {}
        self.coordinator_indexes: dict[str, int] = {}  # group id -> its __share_group_state partition
        self.state_connections: dict[int, asyncio.Future] = {}  # coordinator index -> StateConnection
        self.acquirable = asyncio.Event()  # set when records may have become acquirable
        self.bytes_per_record = 1024.0  # running estimate from what the log returned
        self.timer: asyncio.Task | None = None
        self.background: set[asyncio.Task] = set()

    # ---- share coordinator -------------------------------------------------------------------
    def _coordinator_index(self, group_id: str) -> int:
        index = self.coordinator_indexes.get(group_id)
        if index is None:  # a string hash: once per group, not on every write
            count = int(self.config["share.coordinator.state.topic.num.partitions"])
            index = self.coordinator_indexes[group_id] = state_partition_for(
                group_id, self.partition.topic_id, self.partition.partition, count)
        return index

    async def _coordinator(self, group_id: str):
        index = self._coordinator_index(group_id)
        if index not in self.coordinators:
            image = await controller_client.ensure_internal_topic(self.controller, internal_topics.SHARE_GROUP_STATE)
            for (name, i), handle in image.coordinators.items():
                if name == internal_topics.SHARE_GROUP_STATE:
                    self.coordinators.setdefault(i, handle)
        return self.coordinators[index]

    async def _state_connection(self, group_id: str) -> StateConnection:
        """A kept-open connection to the coordinator's state listener; a new one after a failure
        (the coordinator restarted, perhaps elsewhere: its handle tells the new address)."""
        index = self._coordinator_index(group_id)
        opening = self.state_connections.get(index)
        if opening is not None and succeeded(opening) and not opening.result().usable:
            opening = None  # it worked, then failed: connect again
        opening = self.state_connections[index] = start_unless_started(opening, lambda: self._connect(group_id))
        return await asyncio.shield(opening)

    async def _connect(self, group_id: str) -> StateConnection:
        host, port = await (await self._coordinator(group_id)).state_listener.remote()
        return await StateConnection.open(host, port, STATE_WRITE_TIMEOUT_S, self.config)

    async def _write_state(self, group_id: str, start_offset: int, batches: list) -> tuple[int, str | None]:
        """WriteShareGroupState, over the coordinator's state listener (not a Ray call: see
        actors/share_coordinator/wire.py)."""
        W = WriteShareGroupStateRequest
        p = self.partition
        request = W(group_id=group_id, topics=[W.WriteStateData(topic_id=p.topic_id, partitions=[W.PartitionData(
            partition=p.partition, state_epoch=self.state_epochs[group_id], leader_epoch=p.leader_epoch,
            start_offset=start_offset, delivery_complete_count=-1, state_batches=[
                W.StateBatch(first_offset=b[0], last_offset=b[1], delivery_state=b[2], delivery_count=b[3])
                for b in batches])])])
        connection = await self._state_connection(group_id)
        response = await connection.call(request, WRITE_VERSION, STATE_WRITE_TIMEOUT_S)
        result = response.results[0].partitions[0]
        return result.error_code, result.error_message

    async def _persist(self, group_id: str, sp: SharePartition) -> tuple[int, str | None]:
        dirty = sp.take_dirty()
        if dirty is None:
            return 0, None
        start_offset, batches = dirty
        try:
            error, message = await self._write_state(group_id, start_offset, batches)
        except Exception as e:
            error, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, f"share coordinator unreachable: {e}"
        if error:
            if error in COORDINATOR_MOVED:
                self._forget_coordinator(group_id)
            sp.invalidate_persisted()  # the next write carries the whole state
            log.warning("writing share state of %s failed: %s", group_id, message)
        return error, message

    def _persist_soon(self, group_id: str, sp: SharePartition) -> None:
        task = asyncio.ensure_future(self._persist(group_id, sp))
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def _forget_coordinator(self, group_id: str) -> None:
        """The share coordinator moved (its partition's leadership did) or is unreachable: look it
        up again, and connect again, on the next write."""
        index = self._coordinator_index(group_id)
        self.coordinators.pop(index, None)
        opening = self.state_connections.pop(index, None)
        if succeeded(opening):
            opening.result().close()

    async def _load(self, group_id: str) -> SharePartition:
        started = time.monotonic()
        try:
            sp = await self._read_state(group_id)
        except Exception:
            self._forget_coordinator(group_id)
            raise
        metrics.record_load_time((time.monotonic() - started) * 1000)
        return sp

    async def _read_state(self, group_id: str) -> SharePartition:
        core = self.partition.core
        coordinator = await self._coordinator(group_id)
        p = self.partition
        configs = await p.group_configs(group_id)
        result = await coordinator.read_state.remote(group_id, p.topic_id, p.partition, p.leader_epoch)
        lock_ms = configs.get("share.record.lock.duration.ms", self.config["group.share.record.lock.duration.ms"])
        sp = SharePartition(group_id, p.topic_id, p.partition, record_lock_duration_ms=int(lock_ms),
                            delivery_count_limit=int(self.config["group.share.delivery.count.limit"]),
                            max_record_locks=int(self.config["group.share.partition.max.record.locks"]))
        if result.error_code == 0 and result.start_offset >= 0:
            sp.load(result.start_offset, result.state_batches, log_start_offset=core.log_start_offset)
            self.state_epochs[group_id] = result.state_epoch
            sp.take_dirty()
            return sp
        # The group coordinator resolves share.auto.offset.reset when it initializes the share-partition
        # (KIP-932 InitializeShareGroupState), so that nothing produced after a member's assignment is
        # skipped. When it could not (or the state was never initialized), it is resolved here, now.
        start = self._initial_offset(configs)
        sp.load(start, [], log_start_offset=core.log_start_offset)
        if result.error_code == 0:  # initialized by the group coordinator without a start offset
            self.state_epochs[group_id] = result.state_epoch
            error, message = await coordinator.write_state.remote(group_id, p.topic_id, p.partition, result.state_epoch,
                                                            p.leader_epoch, start, [])
        elif result.error_code == ErrorCode.INVALID_REQUEST:  # never initialized: do it here
            self.state_epochs[group_id] = NO_STATE_EPOCH
            error, message = await coordinator.initialize_state.remote(group_id, p.topic_id, p.partition,
                                                                 NO_STATE_EPOCH, start)
        else:
            error, message = result.error_code, result.error_message
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
        error, offset, _ = core.list_offsets(timestamp)
        if error or offset < 0:  # by_duration: no record that recent
            error, offset, _ = core.list_offsets(LATEST_TIMESTAMP)
        return offset if error == 0 and offset >= 0 else core.high_watermark

    async def get(self, group_id: str) -> SharePartition:
        sp = self.groups.get(group_id)
        if sp is not None:
            return sp
        if group_id not in self.loading:
            self.loading[group_id] = asyncio.ensure_future(self._load(group_id))
        try:
            sp = await asyncio.shield(self.loading[group_id])
        except Exception:
            self.loading.pop(group_id, None)
            raise
        self.groups.setdefault(group_id, sp)
        self._ensure_timer()
        return self.groups[group_id]

    # ---- operations ---------------------------------------------------------------------------
    async def share_fetch(self, group_id: str, member_id: str, *, acks, max_records: int, batch_size: int,
                          max_bytes: int, fetch: bool = True, record_limit: bool = False) -> ShareFetchResult:
        """Apply `acks`, then (if `fetch`) acquire what is acquirable now. Never waits for records:
        a long poll is share_wait, then a share_fetch whose answer is certain to be used, so no
        record is acquired for a request that has already been answered (which would cost it a
        delivery attempt it never had)."""
        try:
            sp = await self.get(group_id)
        except Exception as e:
            return ShareFetchResult(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=str(e))
        result = ShareFetchResult()
        acks_durable = None  # the write that makes this request's acknowledgements durable
        if acks:
            outcome = self._acknowledge(sp, member_id, acks)
            result.ack_error_code = outcome.error_code
            if outcome.changed:
                self._wake()
                acks_durable = asyncio.ensure_future(self._persist(group_id, sp))
        if fetch:
            # acquire while the acknowledgements are being written: the answer waits for both
            result.records, result.acquired = self._acquire(sp, member_id, max_records, batch_size, max_bytes,
                                                            record_limit)
            if result.acquired:
                self._persist_soon(group_id, sp)  # delivery counts; need not delay the answer
        if acks_durable is not None:
            error, message = await acks_durable
            if error and not result.ack_error_code:
                result.ack_error_code, result.ack_error_message = error, message
        return result

    async def share_wait(self, group_id: str, timeout_ms: int) -> bool:
        """True as soon as records may be acquirable for the group (new records, released or
        expired locks); False after timeout_ms. Acquires nothing."""
        try:
            sp = await self.get(group_id)
        except Exception:
            return True  # let the share fetch that follows report the error
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        while True:
            offset = sp.fetch_offset()
            if offset is not None and offset < self.partition.core.high_watermark:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            waiter = self.acquirable
            data = asyncio.ensure_future(self.partition.wait_for_data(sp.end_offset, int(remaining * 1000) + 1))
            woken = asyncio.ensure_future(waiter.wait())
            try:
                await asyncio.wait([data, woken], timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                data.cancel()
                woken.cancel()

    def _acquire(self, sp: SharePartition, member_id: str, max_records: int, batch_size: int, max_bytes: int,
                 record_limit: bool = False):
        """Read from the share-partition's fetch offset and acquire; synchronous, so nothing
        interleaves between the read and the acquisition."""
        core = self.partition.core
        sp.on_log_start_offset(core.log_start_offset)
        offset = sp.fetch_offset()
        if offset is None or offset >= core.high_watermark:
            return None, []
        wanted_bytes = int(max(max_records, 1) * self.bytes_per_record * READ_HEADROOM)
        try:  # where the batches lie and their offsets, from their headers: the bytes stay in the file
            where, spans = core.log.slice_spans(
                offset, min(max(max_bytes, 1), SHARE_FETCH_BYTES_MAX, max(wanted_bytes, SHARE_FETCH_BYTES_MIN)),
                max_offset=core.high_watermark)
        except (OffsetOutOfRange, OSError) as e:
            log.warning("share fetch of partition %s-%d at offset %d: %s", self.partition.topic_id,
                        self.partition.partition, offset, e)
            return None, []
        if not spans:
            return None, []
        records_read = spans[-1][2] - spans[0][1] + 1
        self.bytes_per_record = 0.8 * self.bytes_per_record + 0.2 * (where.size_bytes / max(records_read, 1))
        acquired = sp.acquire(member_id, [(base, last) for _, base, last, _ in spans],
                              max_records=max(max_records, 1), now_ms=now_ms(),
                              batch_size=batch_size if batch_size > 0 else None, fetch_offset=offset,
                              record_limit=record_limit)
        if not acquired:
            return None, []
        first, last = acquired[0].first_offset, acquired[-1].last_offset
        kept = [span for span in spans if span[2] >= first and span[1] <= last]
        start, end = kept[0][0], kept[-1][0] + kept[-1][3]
        return FileSlice(where.path, start, end - start), [tuple(a) for a in acquired]

    async def share_acknowledge(self, group_id: str, member_id: str, acks) -> tuple[int, str | None]:
        try:
            sp = await self.get(group_id)
        except Exception as e:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)
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

    def close(self) -> None:
        if self.timer:
            self.timer.cancel()
        for opening in self.state_connections.values():
            if succeeded(opening):
                opening.result().close()
