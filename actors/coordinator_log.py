"""The internal-topic partition behind a coordinator: replayed when the coordinator starts, and the
place its records go. Durable coordinator state travels through the same log as user data.

A coordinator is the leader actor of its internal partition, so this log is that actor's own:
appends and replays are calls within the process, not Ray calls.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from actors.partition.control_records import read_marker
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


class TxnMarker(NamedTuple):
    """A transaction's COMMIT or ABORT marker met in the log (`replay(transactions=True)`)."""
    offset: int
    producer_id: int
    committed: bool


class TxnWrite(NamedTuple):
    """Records a coordinator writes inside a producer's transaction (TxnOffsetCommit): one transactional batch of
    that producer id and epoch, its sequence the next the partition expects of the producer. `still_valid` is
    asked just before the append, with nothing in between: False (the transaction ended meanwhile: its marker
    is in the log) fails the append with INVALID_TXN_STATE, as a KIP-890 verification guard does, so that no
    transactional record lands after its transaction's marker."""
    producer_id: int
    producer_epoch: int
    still_valid: Callable[[], bool] = lambda: True


class CoordinatorLog:
    def __init__(self, partition_replica, leader_epoch: int = -1):
        self.partition = partition_replica  # the PartitionReplica instance in this process
        self.leader_epoch = leader_epoch
        self.next_offset = 0
        self.waiting: list[tuple[list, asyncio.Future]] = []
        self.appending = False

    async def replay(self, transactions: bool = False) -> list:
        """Every (offset, key, value) record of the partition, oldest first: once everything in
        the log is committed (a new leader may hold records its followers have yet to confirm).
        Control batches (transaction markers) are skipped; with `transactions`, each record is
        (offset, key, value, producer id: its transactional batch's, else -1) and each marker a
        TxnMarker, in log order."""
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
                    if transactions and header.base_offset >= offset:
                        marker = read_marker(header)
                        if marker is not None:
                            out.append(TxnMarker(header.base_offset, header.producer_id, marker.committed))
                    offset = max(offset, header.last_offset + 1)
                    continue
                producer_id = header.producer_id if header.is_transactional else -1
                for r in decode_records(header):
                    if r.offset >= offset:
                        out.append((r.offset, r.key, r.value, producer_id) if transactions
                                   else (r.offset, r.key, r.value))
                offset = max(offset, header.last_offset + 1)
            if offset >= result.high_watermark:
                break
        self.next_offset = offset
        return out

    async def append(self, records: list[tuple[bytes, bytes | None]], transaction: TxnWrite | None = None
                     ) -> list[int]:
        """Append records; return their offsets. Group commit: while one append is in flight, the
        records of later calls wait and go together in the next append (one Ray call for many),
        in the order of the calls: consecutive calls of no transaction (or of one producer's) share
        a batch, and each transaction's records get a transactional batch of their own."""
        if not records:
            return []
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((records, transaction, future))
        if not self.appending:
            self.appending = True
            asyncio.ensure_future(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self.waiting:
                calls, self.waiting = self.waiting, []
                runs: list[tuple[TxnWrite | None, list]] = []  # consecutive calls of one batch
                for call in calls:
                    txn = call[1]
                    key = None if txn is None else (txn.producer_id, txn.producer_epoch)
                    if runs and (None if runs[-1][0] is None else runs[-1][0][:2]) == key:
                        runs[-1][1].append(call)
                    else:
                        runs.append((txn, [call]))
                try:
                    outcomes = await self._append_now(runs)
                except Exception as e:
                    outcomes = [e] * len(runs)
                for (_, run), outcome in zip(runs, outcomes):
                    start = outcome if not isinstance(outcome, BaseException) else None
                    for records, _, future in run:
                        if start is None:
                            future.set_exception(outcome)
                        else:
                            future.set_result(list(range(start, start + len(records))))
                            start += len(records)
                failed = next((o for o in outcomes if isinstance(o, BaseException)), None)
                if failed is not None and self.waiting:
                    # the calls queued while the failed append was in flight were made on a state that
                    # held its records: they fail with it, unwritten, and each caller takes its changes
                    # back or rebuilds (as Kafka's coordinator runtime fails the writes after a failed one)
                    queued, self.waiting = self.waiting, []
                    for _, _, future in queued:
                        future.set_exception(failed)
        finally:
            self.appending = False

    def _batch(self, txn: TxnWrite | None, records: list, now_ms: int) -> bytes:
        rows = [(key, value, [], now_ms) for key, value in records]
        if txn is None:
            return build_batch(rows)
        entry = self.partition.core.producers.entry(txn.producer_id)
        sequence = entry.last_seq + 1 if entry is not None and entry.producer_epoch == txn.producer_epoch else 0
        return build_batch(rows, producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
                           base_sequence=sequence, is_transactional=True)

    async def _append_now(self, runs: list) -> list:
        """One blob per run, appended in one call: each run's base offset, or the exception it failed with."""
        now_ms = time.time_ns() // 1_000_000
        blobs, refused = [], {}
        for n, (txn, run) in enumerate(runs):
            records = [r for records, _, _ in run for r in records]
            if txn is not None and not all(t.still_valid() for _, t, _ in run):
                refused[n] = CoordinatorLogError(ErrorCode.INVALID_TXN_STATE,
                                                 f"the transaction of producer {txn.producer_id} ended meanwhile")
                continue
            blobs.append((n, len(records), np.frombuffer(self._batch(txn, records, now_ms), dtype=np.uint8)))
        results = await self.partition.produce([b for _, _, b in blobs], self.leader_epoch, -1,
                                               APPEND_TIMEOUT_MS) if blobs else []
        outcomes: list = [refused.get(n) for n in range(len(runs))]
        for (n, count, _), result in zip(blobs, results):
            if result.error_code:
                outcomes[n] = CoordinatorLogError(result.error_code, result.error_message)
            else:
                outcomes[n] = result.base_offset
                self.next_offset = max(self.next_offset, result.base_offset + count)
        return outcomes


class ShardHost:
    """A coordinator shard loaded by replaying its partition: once, on first use, shared by the
    calls that wait for it; after a failed append (memory ahead of the log) it is rebuilt."""

    def __init__(self, log: CoordinatorLog, build, transactions: bool = False):
        self.log = log
        self.build = build  # async (records) -> shard
        self.transactions = transactions  # replay(transactions=...)
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
            self.shard = await self.build(await self.log.replay(self.transactions))
        finally:
            self.loading = None

    def invalidate(self) -> None:
        self.shard, self.loading = None, None
