"""The internal-topic partition behind a coordinator: replayed when the coordinator starts, and the
place its records go. Durable coordinator state travels through the same log as user data.

A coordinator is the leader actor of its internal partition, so this log is that actor's own:
appends and replays are calls within the process, not Ray calls.
"""
from __future__ import annotations

import asyncio
import time

import numpy as np

from protocol.errors import ErrorCode
from protocol.record_batch import build_batch, decode_records, iter_batches

REPLAY_FETCH_BYTES = 8 * 1024 * 1024
APPEND_TIMEOUT_MS = 30000
REPLAY_COMMIT_WAIT_MS = 30000  # a new leader waits this long for its followers before it replays


class CoordinatorLogError(RuntimeError):
    """An append to the coordinator's partition failed; the caller answers with a retriable error."""

    def __init__(self, error_code: int, message: str | None):
        super().__init__(f"{ErrorCode(error_code).name}: {message or ''}")
        self.error_code = error_code
        self.message = message

    def __reduce__(self):  # crosses Ray calls whole (Ray re-creates exceptions from their args)
        return type(self), (self.error_code, self.message)


class CoordinatorLog:
    def __init__(self, partition_actor, leader_epoch: int = -1):
        self.partition = partition_actor  # the PartitionActor instance in this process
        self.leader_epoch = leader_epoch
        self.next_offset = 0
        self.waiting: list[tuple[list, asyncio.Future]] = []
        self.appending = False

    async def replay(self) -> list[tuple[int, bytes | None, bytes | None]]:
        """Every (offset, key, value) record of the partition, oldest first: once everything in
        the log is committed (a new leader may hold records its followers have yet to confirm)."""
        if not await self.partition.await_committed(REPLAY_COMMIT_WAIT_MS):
            raise CoordinatorLogError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                      "the coordinator's partition is not committed yet, or not led here")
        out, offset = [], 0
        while True:
            result = await self.partition.fetch(offset, REPLAY_FETCH_BYTES, self.leader_epoch, 0)
            if result.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and offset < result.log_start_offset:
                offset = result.log_start_offset
                continue
            if result.error_code:
                raise CoordinatorLogError(result.error_code, result.error_message)
            records = memoryview(result.records if result.records is not None else b"")
            if len(records) == 0:
                break
            for header in iter_batches(records):
                if header.is_control:  # a transaction marker (WriteTxnMarkers) is no coordinator record
                    offset = max(offset, header.last_offset + 1)
                    continue
                for r in decode_records(header):
                    if r.offset >= offset:
                        out.append((r.offset, r.key, r.value))
                offset = max(offset, header.last_offset + 1)
            if offset >= result.high_watermark:
                break
        self.next_offset = offset
        return out

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> list[int]:
        """Append records; return their offsets. Group commit: while one append is in flight, the
        records of later calls wait and go together in the next batch (one Ray call for many)."""
        if not records:
            return []
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((records, future))
        if not self.appending:
            self.appending = True
            asyncio.ensure_future(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self.waiting:
                calls, self.waiting = self.waiting, []
                try:
                    offsets = await self._append_now([r for records, _ in calls for r in records])
                except Exception as e:
                    for _, future in calls:
                        future.set_exception(e)
                    continue
                start = 0
                for records, future in calls:
                    future.set_result(offsets[start:start + len(records)])
                    start += len(records)
        finally:
            self.appending = False

    async def _append_now(self, records: list[tuple[bytes, bytes | None]]) -> list[int]:
        now_ms = time.time_ns() // 1_000_000
        batch = build_batch([(key, value, [], now_ms) for key, value in records])
        [result] = await self.partition.produce([np.frombuffer(batch, dtype=np.uint8)], self.leader_epoch,
                                                -1, APPEND_TIMEOUT_MS)
        if result.error_code:
            raise CoordinatorLogError(result.error_code, result.error_message)
        self.next_offset = result.base_offset + len(records)
        return list(range(result.base_offset, result.base_offset + len(records)))


class ShardHost:
    """A coordinator shard loaded by replaying its partition: once, on first use, shared by the
    calls that wait for it; after a failed append (memory ahead of the log) it is rebuilt."""

    def __init__(self, log: CoordinatorLog, build):
        self.log = log
        self.build = build  # async (records) -> shard
        self.shard = None
        self.loading: asyncio.Future | None = None

    async def ready(self):
        if self.shard is None:
            if self.loading is None:
                self.loading = asyncio.ensure_future(self._load())
            await asyncio.shield(self.loading)
        return self.shard

    async def _load(self) -> None:
        try:
            self.shard = await self.build(await self.log.replay())
        finally:
            self.loading = None

    def invalidate(self) -> None:
        self.shard, self.loading = None, None
